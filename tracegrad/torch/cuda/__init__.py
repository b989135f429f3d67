"""`torch.cuda`: tracegrad has no CUDA. `is_available()` is False, the seeding functions do
nothing and the memory statistics are 0 (as PyTorch's without CUDA), and asking for a device
(`set_device`, `current_device`) raises."""

from __future__ import annotations

from typing import Any

from tracegrad.frontend.device import require_cpu
from tracegrad.torch._functions import OutOfMemoryError  # noqa: F401 (code catches it by name)
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.cuda import amp


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def is_initialized() -> bool:
    return False


_initialized = False  # PyTorch's private flag, which reversible layers read before saving GPU RNG
default_generators: tuple = ()  # one per CUDA device (transformers' Reformer seeds from them)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return False


def manual_seed(seed: int) -> None:
    """Nothing to seed (PyTorch ignores it too without CUDA)."""


manual_seed_all = manual_seed


def get_rng_state_all() -> list:
    """One state per CUDA device: none."""
    return []


def set_rng_state_all(new_states: Any) -> None:
    """Restore one state per CUDA device: there are none, so the list must be empty."""
    if len(new_states):
        raise RuntimeError(f"torch.cuda.set_rng_state_all: {len(new_states)} states given, and "
                           "tracegrad has no CUDA devices")  # fmt: skip


def seed() -> None:
    pass


seed_all = seed


def empty_cache() -> None:
    pass


def synchronize(device: Any = None) -> None:
    pass


def memory_allocated(device: Any = None) -> int:
    """0: no CUDA memory is in use (PyTorch's answer without CUDA; llm.c prints the peak)."""
    return 0


max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated


def memory_stats(device: Any = None) -> dict[str, Any]:
    return {}


def reset_peak_memory_stats(device: Any = None) -> None:
    pass


def set_device(device: Any) -> None:
    require_cpu(
        device if not isinstance(device, int) else f"cuda:{device}", "torch.cuda.set_device"
    )


def current_device() -> int:
    raise RuntimeError("torch.cuda.current_device: tracegrad has no CUDA (it runs on the CPU)")


def _needs_cuda(name: str) -> type:
    """A CUDA class code names in annotations and `isinstance` checks: it exists, and making one
    raises."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"torch.cuda.{name}: tracegrad has no CUDA")

    return type(name, (), {"__init__": refuse, "__module__": __name__})


CUDAGraph, Stream, StreamContext, Event, graph = (
    _needs_cuda(n) for n in ("CUDAGraph", "Stream", "StreamContext", "Event", "graph")
)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

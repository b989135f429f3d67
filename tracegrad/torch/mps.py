"""`torch.mps` and `torch.xpu` (`xpu` shares this file): Apple's and Intel's GPUs, which
tracegrad does not have. `is_available()` is False (code checks it before choosing a device),
seeding and cache calls do nothing, and the memory statistics are 0, as `torch.cuda`'s."""

from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def manual_seed(seed: int) -> None:
    """Nothing to seed: no such device."""


def seed() -> None:
    pass


def synchronize(device: Any = None) -> None:
    pass


def empty_cache() -> None:
    pass


def current_allocated_memory() -> int:
    return 0


driver_allocated_memory = recommended_max_memory = current_allocated_memory
memory_allocated = max_memory_allocated = memory_reserved = current_allocated_memory
_SHARED = ("is_available", "device_count", "manual_seed", "seed", "synchronize", "empty_cache",
           "memory_allocated", "max_memory_allocated", "memory_reserved")  # fmt: skip
xpu = file_module("tracegrad.torch.xpu", "`torch.xpu`: Intel's GPUs, which tracegrad lacks",
                  {name: globals()[name] for name in _SHARED}
                  | {"manual_seed_all": manual_seed, "is_initialized": lambda: False})  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.autograd.profiler`: the older spelling of `torch.profiler`'s names (Lightning's
profilers import them): `profile` (`use_cuda=False`), `record_function`, `EventList`."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.profiler import EventList, profile, record_function

__all__ = ["EventList", "emit_nvtx", "profile", "record_function"]


class emit_nvtx:  # noqa: N801 (PyTorch's name)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("torch.autograd.profiler.emit_nvtx: tracegrad has no CUDA")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.profiler`: `record_function(name)`, the label model code puts around its parts, is
accepted as a context manager and decorator that labels nothing. PyTorch's profiler itself is
not provided: a traced step's profile is `step.profile()`, an eager run's is Python's cProfile.
Its names exist (libraries annotate with them at import: accelerate's `ProfileKwargs`), and
profiling with them raises."""

from __future__ import annotations

import contextlib
import enum
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["ProfilerAction", "ProfilerActivity", "kineto_available", "profile", "record_function",
           "schedule", "tensorboard_trace_handler"]  # fmt: skip


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1
    XPU = 2
    MTIA = 3
    HPU = 4
    PrivateUse1 = 5


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class profile:  # noqa: N801 (PyTorch's name)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torch.profiler.profile is not provided by tracegrad: a traced step's profile is "
            "step.profile(), an eager run's Python's cProfile"
        )


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0,
             skip_first: int = 0) -> Any:  # fmt: skip
    raise NotImplementedError("torch.profiler.schedule: PyTorch's profiler is not provided")


def tensorboard_trace_handler(dir_name: str, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("torch.profiler.tensorboard_trace_handler: PyTorch's profiler is "
                              "not provided")  # fmt: skip


def kineto_available() -> bool:
    """PyTorch's profiling library: not here."""
    return False


class record_function(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    def __init__(self, name: str, args: str | None = None) -> None:
        self.name = name

    def __enter__(self) -> record_function:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.profiler`: `record_function(name)`, the label model code puts around its parts, is
accepted as a context manager and decorator that labels nothing. PyTorch's profiler itself
(`profile`, `schedule`) is not provided: a traced step's profile is `step.profile()`, an eager
run's is Python's cProfile."""

from __future__ import annotations

import contextlib
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["record_function"]


class record_function(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    def __init__(self, name: str, args: str | None = None) -> None:
        self.name = name

    def __enter__(self) -> record_function:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.serialization`: `save` and `load` (tracegrad's checkpoints, nothing pickled), and
PyTorch's allow-lists of classes for unpickling, accepted (tracegrad never unpickles)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tracegrad.frontend.serialization import load, save
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["add_safe_globals", "load", "safe_globals", "save"]


def add_safe_globals(safe_globals: list[Any]) -> None:
    """Accepted: tracegrad's checkpoints hold no classes to allow."""


@contextlib.contextmanager
def safe_globals(safe_globals: list[Any]) -> Iterator[None]:
    yield


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.compiler`: `is_compiling()` says whether code runs inside a step being traced by
`torch.compile` (tracegrad's `trace`); `disable` and `reset` are accepted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracegrad.frontend.tensor import Listeners
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["disable", "is_compiling", "is_dynamo_compiling", "reset"]


def is_compiling() -> bool:
    """True while a traced step is being traced (its Python runs only then)."""
    return bool(Listeners.tracers)


is_dynamo_compiling = is_compiling


def disable(fn: Callable | None = None, recursive: bool = True, *,
            reason: str | None = None) -> Any:  # fmt: skip
    """The function itself. PyTorch runs it outside the compiled graph; tracegrad traces it with
    the step that calls it, which computes the same values (Python side effects in it run only
    when the step is traced)."""
    return fn if fn is not None else (lambda f: f)


def reset() -> None:
    """Accepted: each traced function keeps its own plans (drop the function to drop them)."""


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

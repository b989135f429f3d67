"""`torch.compiler`: `is_compiling()` says whether code runs inside a step being traced by
`torch.compile` (tracegrad's `trace`); `disable`, `reset`, `allow_in_graph` and the shape hints
(`mark_dynamic`) are accepted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracegrad.frontend.tensor import Listeners
from tracegrad.torch._support import not_provided as _not_provided

__all__ = [
    "allow_in_graph", "assume_constant_result", "disable", "is_compiling", "is_dynamo_compiling",
    "mark_dynamic", "mark_static", "maybe_mark_dynamic", "reset",
]  # fmt: skip


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


def allow_in_graph(fn: Callable) -> Callable:
    """The function itself: Dynamo would put its call in the graph without reading its Python;
    a trace runs it and records its tensor operations, which computes the same (einops and
    other libraries mark their functions so)."""
    return fn


assume_constant_result = allow_in_graph  # a trace bakes in what does not depend on tensors


def mark_dynamic(t: Any, index: Any, **kwargs: Any) -> None:
    """Accepted: a trace compiles one plan per input shape (up to `cache_size_limit`)."""


mark_static = maybe_mark_dynamic = mark_dynamic


def mark_static_address(t: Any, guard: bool = True) -> None:
    """Accepted: a plan's buffers stay where they are between calls (transformers' static
    key-value cache marks its tensors so)."""


def reset() -> None:
    """Accepted: each traced function keeps its own plans (drop the function to drop them)."""


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

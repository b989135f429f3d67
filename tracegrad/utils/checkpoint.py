"""Activation checkpointing's interface (PyTorch's `torch.utils.checkpoint`). In a traced step
tracegrad's memory planner already chooses which activations to keep and which to recompute,
for the whole step; so these compute their function once, as written, with the same values
and gradients as PyTorch's (a dropout inside draws the same masks as without checkpointing,
as PyTorch's `preserve_rng_state` makes its recomputation do)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               **kwargs: Any) -> Any:  # fmt: skip
    """`function(*args, **kwargs)`. PyTorch's keywords (use_reentrant, preserve_rng_state,
    context_fn, determinism_check, debug) are accepted and need nothing here: what to recompute
    is the memory planner's choice in a traced step."""
    for option in ("preserve_rng_state", "context_fn", "determinism_check", "debug"):
        kwargs.pop(option, None)
    return function(*args, **kwargs)


def checkpoint_sequential(
    functions: Sequence[Callable[[Any], Any]] | Any, segments: int, input: Any,
    use_reentrant: bool | None = None, **kwargs: Any,
) -> Any:  # fmt: skip
    """The functions (or a Sequential's layers) applied in order to `input`; `segments` is
    accepted (the memory planner decides what to keep)."""
    if segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be positive, not {segments}")
    for function in functions:
        input = function(input)
    return input

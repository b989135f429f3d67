"""PyTorch's `torch._foreach_*`: an op over lists of tensors, which EMA and optimizer code calls
(`torch._foreach_lerp_(ema, params, 1 - decay)`). PyTorch runs a list in few kernels; here each
is the op on each tensor in turn (inside a compiled step, the plan fuses them as it fuses any
update). The other operand may be a number, a tensor, or a list of either, one per tensor; the
in-place forms (`_foreach_mul_`) write each result into its tensor with `copy_`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import tracegrad as _tg
from tracegrad.frontend.tensor import Tensor


def _each(other: Any, n: int) -> list:
    return list(other) if isinstance(other, list | tuple) else [other] * n


def _over(op: Callable, operands: int) -> Callable:
    """The list form of `op(t, *others, **options)`, `others` given whole or one per tensor,
    by position or by name (schedulefree's `_foreach_lerp_(y, z, weight=c)`)."""
    try:
        names = list(inspect.signature(op).parameters)[1 : 1 + operands]
    except ValueError:  # an op of the table (no Python signature): by position only
        names = []

    def over(tensors: Sequence[Tensor], *others: Any, **options: Any) -> list[Tensor]:
        others += tuple(options.pop(k) for k in names[len(others) :] if k in options)
        if len(others) != operands:
            raise TypeError(f"expected {operands} operand(s) after the tensors, got {len(others)}")
        columns = [_each(o, len(tensors)) for o in others]
        return [op(t, *row, **options) for t, *row in zip(tensors, *columns, strict=True)]

    return over


def _in_place(over: Callable) -> Callable:
    def in_place(tensors: Sequence[Tensor], *others: Any, **options: Any) -> None:
        for t, result in zip(tensors, over(tensors, *others, **options), strict=True):
            t.copy_(result)

    return in_place


def _lerp(t: Tensor, end: Any, weight: Any) -> Tensor:
    return t + weight * (end - t)


_OPS: dict[str, tuple[Callable, int]] = {
    "add": (lambda t, o, alpha=1: t + o * alpha if alpha != 1 else t + o, 1),
    "sub": (lambda t, o, alpha=1: t - o * alpha if alpha != 1 else t - o, 1),
    "mul": (lambda t, o: t * o, 1), "div": (lambda t, o: t / o, 1),
    "pow": (lambda t, o: t**o, 1),
    "maximum": (_tg.maximum, 1), "minimum": (_tg.minimum, 1),
    "clamp_min": (_tg.maximum, 1), "clamp_max": (_tg.minimum, 1),
    "lerp": (_lerp, 2),
    "addcmul": (lambda t, a, b, value=1: t + value * a * b, 2),
    "addcdiv": (lambda t, a, b, value=1: t + value * a / b, 2),
    "copy": (lambda t, src: _tg.broadcast_to(src, t.shape).to(t.dtype), 1),
    "zero": (_tg.zeros_like, 0),
    **{name: (getattr(_tg, name), 0)
       for name in ("sqrt", "exp", "log", "abs", "neg", "reciprocal", "sigmoid", "tanh", "sign",
                    "sin", "cos", "floor", "ceil", "round", "trunc", "frac", "expm1", "log1p")},
}  # fmt: skip


def _norm(tensors: Sequence[Tensor], ord: float = 2, dtype: Any = None) -> list[Tensor]:
    return [_tg.linalg.vector_norm(t if dtype is None else t.to(dtype), ord) for t in tensors]


FUNCTIONS: dict[str, Callable] = {"_foreach_norm": _norm}
for _name, (_op, _operands) in _OPS.items():
    _list = _over(_op, _operands)
    if _name not in ("zero", "copy"):  # PyTorch has only their in-place forms
        FUNCTIONS[f"_foreach_{_name}"] = _list
    FUNCTIONS[f"_foreach_{_name}_"] = _in_place(_list)

"""NumPy's `asarray` over tensors: the one conversion every `tracegrad.numpy` function applies
to its array arguments, so that Python floats become float64 as in NumPy; and NumPy's
promotion, applied before the front end's (PyTorch's) can differ."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tracegrad.frontend import functions
from tracegrad.frontend.tensor import Tensor


def holds_tensors(x: Any) -> bool:
    if isinstance(x, list | tuple):
        return any(holds_tensors(v) for v in x)
    return isinstance(x, Tensor)


def asarray(a: Any, dtype: Any = None) -> Tensor:
    """`a` as a tensor, sharing an ndarray's memory; a list holding tensors is stacked
    (differentiably). Python floats become float64, as in NumPy."""
    if isinstance(a, Tensor):
        return a if dtype is None else functions.astype(a, dtype)
    if isinstance(a, list | tuple) and holds_tensors(a):
        out = functions.stack([asarray(v) for v in a])
        return out if dtype is None else functions.astype(out, dtype)
    return Tensor._of(np.asarray(a, dtype))


def promoted(args: tuple, ufunc: np.ufunc | None = None) -> tuple:
    """`args` with each tensor cast to the dtype NumPy computes in: `ufunc`'s loop, else
    `np.result_type`. Python numbers stay as they are (weak, in NumPy as in PyTorch): the
    front end then finds operands that agree and promotes nothing its own way."""
    kinds = tuple(_kind(a) for a in args)
    dtypes = _loop(ufunc, kinds) if ufunc is not None else _result(kinds)
    return tuple(
        a if isinstance(k, type) else asarray(a, None if k == d else d)
        for a, k, d in zip(args, kinds, dtypes, strict=True)
    )


def _kind(a: Any) -> np.dtype | type:
    """A Python number's type (weak, NEP 50), else the operand's dtype."""
    if type(a) in (int, float, complex):
        return type(a)
    return a._value.dtype if isinstance(a, Tensor) else np.asarray(a).dtype


@functools.lru_cache(maxsize=1024)
def _loop(ufunc: np.ufunc, kinds: tuple) -> tuple:
    return ufunc.resolve_dtypes((*kinds, *(None,) * ufunc.nout))[: ufunc.nin]


@functools.lru_cache(maxsize=1024)
def _result(kinds: tuple) -> tuple:
    dtype = np.result_type(*(k(0) if isinstance(k, type) else k for k in kinds))
    return (dtype,) * len(kinds)

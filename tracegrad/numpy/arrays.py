"""NumPy's `asarray` over tensors: the one conversion every `tracegrad.numpy` function applies
to its array arguments, so that Python floats become float64 as in NumPy."""

from __future__ import annotations

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

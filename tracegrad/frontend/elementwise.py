"""Elementwise functions composed of the op table's primitives (no VJP of their own), and
PyTorch's comparison names. `equal` is PyTorch's: one bool for the whole tensors (NumPy's
elementwise `equal` is `eq`, or `tracegrad.numpy.equal`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.frontend.functions import pytorch_keywords
from tracegrad.frontend.tensor import Tensor, as_tensor

eq, ne, lt, le, gt, ge = P.equal, P.not_equal, P.less, P.less_equal, P.greater, P.greater_equal
subtract, multiply, divide, true_divide, negative = P.sub, P.mul, P.div, P.div, P.neg
absolute, fix = P.abs, P.trunc


def equal(input: Any, other: Any) -> bool:
    """Whether the two tensors have the same shape and elements (PyTorch's)."""
    a, b = as_tensor(input), as_tensor(other)
    return a.shape == b.shape and bool(np.array_equal(a.numpy(), b.numpy()))


def square(input: Any) -> Tensor:
    x = as_tensor(input)
    return x * x


def reciprocal(input: Any) -> Tensor:
    return 1.0 / as_tensor(input)


def deg2rad(input: Any) -> Tensor:
    return as_tensor(input) * (math.pi / 180.0)


def rad2deg(input: Any) -> Tensor:
    return as_tensor(input) * (180.0 / math.pi)


def sinc(input: Any) -> Tensor:
    """sin(pi x) / (pi x), 1 at 0; the 0 is replaced before dividing so the gradient there is
    0, not nan."""
    x = as_tensor(input)
    at_zero = x == 0.0
    safe = P.where(at_zero, 1.0, x) * math.pi
    return P.where(at_zero, 1.0, P.sin(safe) / safe)


def fmax(input: Any, other: Any) -> Tensor:
    """maximum, ignoring a nan on one side."""
    x, y = as_tensor(input), as_tensor(other)
    return P.where(y != y, x, P.where(x != x, y, P.maximum(x, y)))


def fmin(input: Any, other: Any) -> Tensor:
    x, y = as_tensor(input), as_tensor(other)
    return P.where(y != y, x, P.where(x != x, y, P.minimum(x, y)))


def floor_divide(input: Any, other: Any) -> Tensor:
    return P.floor(P.div(input, other))


def isnan(input: Any) -> Tensor:
    x = as_tensor(input)
    return x != x


def isinf(input: Any) -> Tensor:
    return P.abs(input) == math.inf


def isfinite(input: Any) -> Tensor:
    x = as_tensor(input)
    return (x - x) == 0.0  # inf - inf and nan - nan are nan


@pytorch_keywords
def round(input: Any, *, decimals: int = 0) -> Tensor:
    """Rounded half to even; no gradient, as it is piecewise constant."""
    scale = 10.0**decimals
    return P.rint(as_tensor(input) * scale) / scale if decimals else P.rint(input)


@pytorch_keywords
def nan_to_num(input: Any, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:  # fmt: skip
    """nan and infinities replaced by finite numbers; gradient 1 where x was finite, else 0."""
    x = as_tensor(input)
    big = np.finfo(x.dtype).max if x.dtype.kind == "f" else 0
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    return P.where(x != x, nan, P.where(x == math.inf, posinf, P.where(x == -math.inf, neginf, x)))


def real(input: Any) -> Tensor:
    return as_tensor(input)


conj = real


def angle(input: Any) -> Tensor:
    """0 for x >= 0, pi for x < 0 (real inputs); no gradient."""
    x = as_tensor(input).detach()
    return P.where(x < 0.0, math.pi, 0.0).astype(x.dtype if x.dtype.kind == "f" else np.float64)


__all__ = [
    "absolute", "angle", "conj", "deg2rad", "divide", "eq", "equal", "fix", "floor_divide",
    "fmax", "fmin", "ge", "gt", "isfinite", "isinf", "isnan", "le", "lt", "multiply",
    "nan_to_num", "ne", "negative", "rad2deg", "real", "reciprocal", "round", "sinc", "square",
    "subtract", "true_divide",
]  # fmt: skip

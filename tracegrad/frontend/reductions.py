"""Reductions and scans with PyTorch's meanings: `max(x, dim)` gives the named tuple (values,
indices), `max(x)` the maximum and `max(x, y)` the elementwise maximum; `var`/`std` are unbiased
by default (`correction=1`); `cumsum` needs its dim; `argmax` without a dim indexes the
flattened tensor. The values of a (values, indices) pair are gathered at the indices, so the
gradient goes to the elements chosen only, as PyTorch's does."""

from __future__ import annotations

import builtins
import math
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.frontend.elementwise import maximum, minimum
from tracegrad.frontend.functions import (
    astype,
    at,
    cat,
    dim_tuple,
    one_dim,
    pytorch_keywords,
    ravel,
    reshape,
    squeeze,
    take_along,
    unsqueeze,
)
from tracegrad.frontend.tensor import Listeners, Tensor, as_tensor, get_default_dtype


def every_if_empty(dim: Any) -> Any:
    """PyTorch's reading of an empty dim list, `sum(dim=[])`: every dim (NumPy's axis=()
    reduces none: `reduce_dims`, which tracegrad.numpy calls)."""
    return None if isinstance(dim, list | tuple) and not dim else dim


def reduce_dims(prim: P.Primitive, input: Any, dim: Any, keepdim: bool, dtype: Any = None):
    """`prim` over `dim` (NumPy's reading: an empty tuple is no dims)."""
    x = as_tensor(input)
    x = x if dtype is None else astype(x, dtype)
    return prim(x, axis=dim_tuple(prim.name, dim, x.ndim), keepdims=bool(keepdim))


@pytorch_keywords
def sum(input: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return reduce_dims(P.sum, input, every_if_empty(dim), keepdim, dtype)


@pytorch_keywords
def prod(input: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return reduce_dims(P.prod, input, dim, keepdim, dtype)


@pytorch_keywords
def mean(input: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return mean_dims(input, every_if_empty(dim), keepdim, dtype)


def mean_dims(input: Any, dim: Any, keepdim: bool, dtype: Any = None) -> Tensor:
    """The mean over `dim`, read as `reduce_dims` reads it."""
    x = as_tensor(input)
    x = x if dtype is None else astype(x, dtype)
    shape = x._value.shape
    axes = dim_tuple("mean", dim, len(shape))
    total = P.sum(x, axis=axes, keepdims=bool(keepdim))
    return total / float(math.prod([shape[a] for a in axes]))


@pytorch_keywords
def amax(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """The maximum over `dim` (all by default); ties share the gradient."""
    return reduce_dims(P.max, input, dim, keepdim)


@pytorch_keywords
def amin(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    return reduce_dims(P.min, input, dim, keepdim)


@pytorch_keywords
def all(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether every element (along `dim`) is true (nonzero)."""
    x = as_tensor(input)
    if 0 in x.shape:  # NumPy's min of nothing raises; nothing false is there: True
        return _as_bytes(x, reduce_dims(P.sum, (x == 0).astype(np.int64), dim, keepdim) == 0)
    return _as_bytes(x, reduce_dims(P.min, x if x.dtype == np.bool_ else x != 0, dim, keepdim))


@pytorch_keywords
def any(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether some element (along `dim`) is true (nonzero)."""
    x = as_tensor(input)
    if 0 in x.shape:  # NumPy's max of nothing raises; nothing true is there: False
        return _as_bytes(x, reduce_dims(P.sum, (x != 0).astype(np.int64), dim, keepdim) > 0)
    return _as_bytes(x, reduce_dims(P.max, x if x.dtype == np.bool_ else x != 0, dim, keepdim))


def _as_bytes(x: Tensor, out: Tensor) -> Tensor:
    """all's and any's result: uint8 for a uint8 input, as PyTorch's (bool otherwise)."""
    return astype(out, np.uint8) if x.dtype == np.uint8 else out


def _argmax(x: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    if dim is None:
        idx = P.argmax(ravel(x), axis=0)
        return reshape(idx, (1,) * x.ndim) if keepdim else idx
    d = one_dim("argmax", dim, x.ndim)
    idx = P.argmax(x, axis=d) if x.ndim else P.argmax(ravel(x), axis=0)
    return unsqueeze(idx, d) if keepdim and x.ndim else idx


@pytorch_keywords
def argmax(input: Any, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the (first) maximum along `dim`; of the flattened tensor if dim is None."""
    return _argmax(as_tensor(input), dim, keepdim)


@pytorch_keywords
def argmin(input: Any, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return _argmax(-as_tensor(input), dim, keepdim)


def values_indices(name: str) -> type:
    """PyTorch's return type of `name` with a dim: a named tuple (values, indices)."""
    return NamedTuple(name, [("values", Tensor), ("indices", Tensor)])


MaxResult, MinResult = values_indices("max"), values_indices("min")


class AminmaxResult(NamedTuple):
    min: Tensor
    max: Tensor


@pytorch_keywords
def aminmax(input: Any, *, dim: int | None = None, keepdim: bool = False) -> Any:
    """The named tuple (min, max): `amin` and `amax` over `dim` (all elements without)."""
    return AminmaxResult(amin(input, dim, keepdim), amax(input, dim, keepdim))


def taken(x: Tensor, idx: Tensor, dim: int, keepdim: bool, result: type) -> Any:
    """(values, indices) with the values gathered at `idx` (kept dim), so that the gradient goes
    to the elements chosen only, as PyTorch's does."""
    values = take_along(x, idx, dim, x.shape) if x.ndim else x
    if not keepdim and x.ndim:
        values, idx = squeeze(values, dim), squeeze(idx, dim)
    return result(values, idx)


def _negated(x: Tensor) -> Tensor:
    """-x, whose largest is x's smallest (a boolean's by logical not)."""
    return ~x if x.dtype.kind == "b" else -x


def _extreme(name: str, input: Any, dim: Any, keepdim: bool, other: Any) -> Any:
    x = as_tensor(input)
    if other is not None or isinstance(dim, Tensor | np.ndarray):
        return (maximum if name == "max" else minimum)(x, dim if other is None else other)
    if dim is None:
        return (amax if name == "max" else amin)(x, None, keepdim)
    d = one_dim(name, dim, x.ndim)
    result = MaxResult if name == "max" else MinResult
    if x.ndim and not _tracked(x):  # no gradient to route: the values by the reduction itself
        idx = _argmax(x if name == "max" else _negated(x), d, keepdim)
        return result(reduce_dims(P.max if name == "max" else P.min, x, d, keepdim), idx)
    idx = _argmax(x if name == "max" else _negated(x), d, keepdim=True)
    return taken(x, idx, d, keepdim, result)


def _tracked(x: Tensor) -> bool:
    """Whether autograd may differentiate through `x` here (`autodiff.edge`'s test)."""
    return Listeners.grad_enabled and (
        x._node is not None or x._requires_grad or bool(Listeners.recording)
    )


@pytorch_keywords
def max(input: Any, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    """max(x): the maximum; max(x, dim): the named tuple (values, indices) along dim (the
    gradient goes to the first maximum); max(x, y) of two tensors: the elementwise maximum."""
    return _extreme("max", input, dim, keepdim, other)


@pytorch_keywords
def min(input: Any, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    """As `max`, for the minimum."""
    return _extreme("min", input, dim, keepdim, other)


def _correction(dim: Any, unbiased: bool | None, correction: float | None) -> tuple[Any, float]:
    if isinstance(dim, bool):  # var(x, False): PyTorch's unbiased flag in dim's place
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError("var/std: give unbiased= or correction=, not both")
    if correction is None:
        correction = 1 if unbiased is None else int(unbiased)
    return dim, correction


@pytorch_keywords
def var(input: Any, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
        correction: float | None = None) -> Tensor:  # fmt: skip
    """The variance, divided by N - correction: unbiased (correction=1) by default, as in PyTorch
    (NumPy's ddof=0 default is `tracegrad.numpy.var`); of complex values the mean of |x - m|^2,
    real, as PyTorch's and NumPy's."""
    x = as_tensor(input)
    dim, correction = _correction(dim, unbiased, correction)
    axes = dim_tuple("var", dim, x.ndim)
    centered = x - mean(x, axes, keepdim=True)
    squares = centered * centered
    if x.dtype.kind == "c":
        squares = P.real(centered * P.conj(centered))
    count = builtins.max(math.prod(x.shape[a] for a in axes) - correction, 0)  # PyTorch's
    return sum(squares, axes, keepdim) / float(count)


@pytorch_keywords
def std(input: Any, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
        correction: float | None = None) -> Tensor:  # fmt: skip
    """The standard deviation, unbiased by default (see `var`). Where all values are equal its
    gradient is 0, as PyTorch's (not 0 / 0)."""
    v = var(input, dim, unbiased, keepdim, correction=correction)
    zero = v == 0.0
    return P.where(zero, 0.0, P.sqrt(P.where(zero, 1.0, v)))


@pytorch_keywords
def logsumexp(input: Any, dim: Any, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over `dim`, stable for large |x|: the max is subtracted (and not
    differentiated)."""
    x = as_tensor(input)
    axes = dim_tuple("logsumexp", dim, x.ndim)
    if not x.size:  # log of an empty sum: -inf, as PyTorch's (a max over nothing would raise)
        return P.log(sum(P.exp(x), axes, keepdim))
    m = amax(x, axes, keepdim=True).detach()
    m = P.where(P.abs(m) < math.inf, m, 0.0)  # an all -inf row sums exp(-inf) = 0: log 0 = -inf
    out = P.log(sum(P.exp(x - m), axes, keepdim=True)) + m
    return out if keepdim else squeeze(out, axes)


@pytorch_keywords
def log_softmax(input: Any, dim: int = -1, *, dtype: Any = None) -> Tensor:
    """(x - m) - log(sum(exp(x - m))), m the max (`core.ops.losses.log_softmax_parts`); `dtype`
    converts the input first, as PyTorch's."""
    x = as_tensor(input)
    x = x if dtype is None else astype(x, dtype)
    if not x.size:  # nothing to normalize, as PyTorch's (a max over no elements would raise)
        return P.positive(x)
    return P.log_softmax(x, axis=dim_tuple("log_softmax", dim, x.ndim))


@pytorch_keywords
def softmax(input: Any, dim: int = -1, *, dtype: Any = None) -> Tensor:
    """exp(x - m) / sum(exp(x - m)), m the max; `dtype` converts the input first."""
    x = as_tensor(input)
    x = x if dtype is None else astype(x, dtype)
    if not x._value.size:
        return P.positive(x)
    return P.softmax(x, axis=dim_tuple("softmax", dim, x._value.ndim))


@pytorch_keywords
def cumsum(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    """Running sums along `dim` (required: PyTorch does not flatten)."""
    x = as_tensor(input)
    x = x if dtype is None else astype(x, dtype)
    if x.ndim == 0:
        return reshape(P.cumsum(reshape(x, (1,)), axis=0), ())
    return P.cumsum(x, axis=one_dim("cumsum", dim, x.ndim))


@pytorch_keywords
def cumprod(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    """Running products along `dim`; the gradient is right at zeros too (an op of its own: the
    product of the others, not out / x)."""
    x = as_tensor(input)
    x = x if dtype is None else astype(x, dtype)
    if x.ndim == 0:
        return reshape(P.cumprod(reshape(x, (1,)), axis=0), ())
    return P.cumprod(x, axis=one_dim("cumprod", dim, x.ndim))


@pytorch_keywords
def logcumsumexp(input: Any, dim: int) -> Tensor:
    """log(cumsum(exp(x))) along `dim`, without overflow or underflow (NumPy's
    logaddexp.accumulate; its gradient is summed in log space too)."""
    x = as_tensor(input)
    if x.ndim == 0:
        return reshape(P.logcumsumexp(reshape(x, (1,)), axis=0), ())
    return P.logcumsumexp(x, axis=one_dim("logcumsumexp", dim, x.ndim))


CummaxResult, CumminResult = values_indices("cummax"), values_indices("cummin")


def _cumulative(name: str, input: Any, dim: int) -> Any:
    x = as_tensor(input)
    flat = reshape(x, (1,)) if x.ndim == 0 else x
    d = one_dim(name, dim, flat.ndim)
    idx = (P.argcummax if name == "cummax" else P.argcummin)(flat, axis=d)
    values = take_along(flat, idx, d, flat.shape)
    result = CummaxResult if name == "cummax" else CumminResult
    return result(values, idx) if x.ndim else result(reshape(values, ()), reshape(idx, ()))


@pytorch_keywords
def cummax(input: Any, dim: int) -> Any:
    """(values, indices) of the running maximum along `dim` (the last index of a tie, as
    PyTorch's); the values are gathered there, so the gradient goes to the maxima."""
    return _cumulative("cummax", input, dim)


@pytorch_keywords
def cummin(input: Any, dim: int) -> Any:
    """As `cummax`, for the running minimum."""
    return _cumulative("cummin", input, dim)


@pytorch_keywords
def count_nonzero(input: Any, dim: Any = None) -> Tensor:
    """The number of nonzero elements over `dim` (all by default), int64."""
    x = as_tensor(input)
    return sum(x != 0, dim)


@pytorch_keywords
def diff(input: Any, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    """The n-th forward difference along `dim`, after joining `prepend` and `append`."""
    x = as_tensor(input)
    d = one_dim("diff", dim, x.ndim)
    if prepend is not None or append is not None:
        x = cat([v for v in (prepend, x, append) if v is not None], d)
    for _ in range(n):  # booleans differ where they change (PyTorch's logical xor)
        ahead, behind = at(x, d, slice(1, None)), at(x, d, slice(None, -1))
        x = ahead != behind if x.dtype.kind == "b" else ahead - behind
    return x


def _trapezoids(name: str, y: Any, x: Any, dx: Any, dim: int) -> tuple[Tensor, int]:
    """The area of each trapezoid along `dim`, and dim: at spacing dx (1 by default) or between
    the points x (1-D along dim, or broadcast against y)."""
    yt = as_tensor(y)
    if x is not None and dx is not None:
        raise TypeError(f"{name}: give x or dx, not both")
    d = one_dim(name, dim, yt.ndim)
    mid = (at(yt, d, slice(1, None)) + at(yt, d, slice(None, -1))) * 0.5
    if x is None:
        return mid * (1.0 if dx is None else dx), d
    xs = as_tensor(x)
    xd = 0 if xs.ndim == 1 else d - (yt.ndim - xs.ndim)
    steps = at(xs, xd, slice(1, None)) - at(xs, xd, slice(None, -1))
    if xs.ndim == 1:
        steps = reshape(steps, (-1,) + (1,) * (yt.ndim - 1 - d))
    return mid * steps, d


@pytorch_keywords
def trapezoid(y: Any, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """The integral of y along `dim` by the trapezoid rule, at spacing dx or at points x."""
    areas, d = _trapezoids("trapezoid", y, x, dx, dim)
    return sum(areas, d)


@pytorch_keywords
def cumulative_trapezoid(y: Any, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """The running integrals of `trapezoid` (one fewer along `dim`)."""
    areas, d = _trapezoids("cumulative_trapezoid", y, x, dx, dim)
    return cumsum(areas, d)


@pytorch_keywords
def trapz(y: Any, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """PyTorch's older name of `trapezoid`."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cov(input: Any, *, correction: int = 1, fweights: Any = None,
        aweights: Any = None) -> Tensor:  # fmt: skip
    """The covariance matrix of the variables in input's rows (observations in its columns; a
    1-D input is one variable), with integer frequency and float observation weights, divided
    by the weights' sum less `correction` (NumPy's and PyTorch's formula)."""
    x = as_tensor(input)
    if x.ndim > 2:
        raise ValueError(f"cov: expects at most 2 dimensions, got {x.shape}")
    x = reshape(x, (1, -1)) if x.ndim < 2 else x
    x = x if x.dtype.kind in "fc" else astype(x, get_default_dtype())
    n = x.shape[1]
    w = None
    for given in (fweights, aweights):
        if given is not None:
            w = as_tensor(given) if w is None else w * as_tensor(given)
    if w is None:
        avg, norm = mean(x, 1, keepdim=True), float(n - correction)
    else:
        w = astype(w, x.dtype)
        total = sum(w)
        avg = sum(x * w, 1, keepdim=True) / total
        if aweights is None or correction == 0:
            norm = total - correction
        else:
            norm = total - correction * sum(w * as_tensor(aweights)) / total
    centered = x - avg
    weighted = centered if w is None else centered * w
    norm = P.maximum(norm, 0.0) if isinstance(norm, Tensor) else builtins.max(norm, 0.0)
    out = (weighted @ centered.mT) / norm
    return reshape(out, ()) if as_tensor(input).ndim < 2 else out


def corrcoef(input: Any) -> Tensor:
    """Pearson's correlation coefficients of input's rows (`cov` over the outer product of the
    standard deviations), clipped to [-1, 1] as NumPy's and PyTorch's."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = P.sqrt(at(reshape(c, (-1,)), 0, slice(None, None, c.shape[0] + 1)))
    out = c / reshape(d, (-1, 1)) / reshape(d, (1, -1))
    return P.minimum(P.maximum(out, -1.0), 1.0)


@pytorch_keywords
def gradient(
    input: Any, *, spacing: float = 1.0, dim: Any = None, edge_order: int = 1
) -> tuple[Tensor, ...]:
    """Central differences inside, one-sided at the edges, for each dim: a tuple, as PyTorch
    (NumPy's gradient, which gives one array for one axis, is `tracegrad.numpy.gradient`)."""
    if edge_order != 1:
        raise NotImplementedError("gradient: only edge_order=1")
    x = as_tensor(input)
    out = []
    for d in dim_tuple("gradient", dim, x.ndim):
        inner = (at(x, d, slice(2, None)) - at(x, d, slice(None, -2))) * 0.5
        first = at(x, d, slice(1, 2)) - at(x, d, slice(0, 1))
        last = at(x, d, slice(-1, None)) - at(x, d, slice(-2, -1))
        out.append(cat([first, inner, last], d) / spacing)
    return tuple(out)


@pytorch_keywords
def nansum(input: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The sum treating nan as 0 (their gradient is 0); integers have none to treat."""
    x = as_tensor(input)
    x = x if x.dtype.kind not in "fc" else P.where(x != x, 0.0, x)
    return sum(x, dim, keepdim, dtype=dtype)


@pytorch_keywords
def nanmean(input: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The mean of the values that are not nan (nan where all are)."""
    x = as_tensor(input)
    kept = (x == x).astype(x.dtype if dtype is None else dtype)
    return nansum(x, dim, keepdim, dtype=dtype) / sum(kept, dim, keepdim)


__all__ = [
    "all", "amax", "amin", "aminmax", "any", "argmax", "argmin", "corrcoef", "count_nonzero", "cov",
    "cummax", "cummin", "cumprod", "cumsum", "cumulative_trapezoid", "diff", "gradient",
    "log_softmax", "logcumsumexp", "logsumexp", "max", "mean", "min", "nanmean", "nansum",
    "prod", "softmax", "std", "sum", "trapezoid", "trapz", "var",
]  # fmt: skip

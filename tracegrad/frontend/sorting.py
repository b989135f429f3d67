"""Sorting and order statistics with PyTorch's meanings: `sort`, `topk`, `kthvalue` and
`median(dim)` give the named tuple (values, indices); the values are gathered at the indices,
so the gradient goes back to where each value came from."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.frontend.elementwise import isnan
from tracegrad.frontend.functions import (
    at,
    one_dim,
    pytorch_keywords,
    ravel,
    squeeze,
    stack,
    take_along,
)
from tracegrad.frontend.reductions import any, argmax, taken, values_indices
from tracegrad.frontend.tensor import Tensor, as_tensor

SortResult, TopkResult = values_indices("sort"), values_indices("topk")
KthvalueResult, MedianResult = values_indices("kthvalue"), values_indices("median")
NanmedianResult = values_indices("nanmedian")


def _flipped(x: Tensor, dim: int) -> Tensor:
    return at(x, dim, slice(None, None, -1))


def _order(x: Tensor, dim: int, descending: bool) -> Tensor:
    """The stable sorting permutation along `dim`. Descending: the ascending order of the
    reversed tensor, reversed, keeps equal elements in their order (and puts nan first, as
    PyTorch does)."""
    if x.ndim == 0:
        return P.argsort(ravel(x), axis=0)[0]
    if not descending:
        return P.argsort(x, axis=dim)
    return (x.shape[dim] - 1) - _flipped(P.argsort(_flipped(x, dim), axis=dim), dim)


@pytorch_keywords
def argsort(input: Any, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """The indices that sort `input` along `dim` (stably: equal elements keep their order)."""
    x = as_tensor(input)
    return _order(x, one_dim("argsort", dim, x.ndim), descending)


@pytorch_keywords
def sort(input: Any, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    """(values, indices) sorted along `dim` (stably)."""
    x = as_tensor(input)
    d = one_dim("sort", dim, x.ndim)
    return taken(x, _order(x, d, descending), d, True, SortResult)


@pytorch_keywords
def msort(input: Any) -> Tensor:
    """The values sorted along the first dimension."""
    return sort(input, 0).values


@pytorch_keywords
def topk(input: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """(values, indices) of the k largest (or smallest) elements along `dim`, in order."""
    x = as_tensor(input)
    d = one_dim("topk", dim, x.ndim)
    if not 0 <= k <= (x.shape[d] if x.ndim else 1):
        raise ValueError(f"topk: k={k} is out of range for dimension {d} of {x.shape}")
    order = _order(x, d, descending=largest)
    return taken(x, at(order, d, slice(0, k)) if x.ndim else order, d, True, TopkResult)


@pytorch_keywords
def kthvalue(input: Any, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    """(values, indices) of the k-th smallest element (k from 1) along `dim`."""
    x = as_tensor(input)
    d = one_dim("kthvalue", dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if not 1 <= k <= n:
        raise ValueError(f"kthvalue: k={k} is out of range for dimension {d} of {x.shape}")
    order = _order(x, d, descending=False)
    return taken(x, at(order, d, slice(k - 1, k)) if x.ndim else order, d, keepdim,
                 KthvalueResult)  # fmt: skip


def _empty_median(x: Tensor) -> Tensor:
    """The median of no elements: nan, as PyTorch's."""
    return Tensor._of(np.array(np.nan, x.dtype if x.dtype.kind in "fc" else np.float32))


@pytorch_keywords
def median(input: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    """The lower median (no mean of the middle two, as PyTorch): of all elements, or with a dim
    the named tuple (values, indices). A nan among them is the median, at its first index, as
    PyTorch's (`nanmedian` skips them)."""
    x = as_tensor(input)
    if dim is None:
        return median(ravel(x), 0).values if x.size else _empty_median(x)
    d = one_dim("median", dim, x.ndim)
    if not x.ndim:
        return MedianResult(*kthvalue(x, 1, d, keepdim))
    m = (x.shape[d] - 1) // 2
    middle = at(_order(x, d, descending=False), d, slice(m, m + 1))
    nan = isnan(x)
    idx = P.where(any(nan, d, keepdim=True), argmax(nan, d, keepdim=True), middle)
    return MedianResult(*taken(x, idx, d, keepdim, MedianResult))


@pytorch_keywords
def nanmedian(input: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    """`median` of the values that are not nan (the lower middle one; nan where all are): of
    all elements, or with a dim the named tuple (values, indices)."""
    x = as_tensor(input)
    if dim is None:
        return nanmedian(ravel(x), 0).values if x.size else _empty_median(x)
    d = one_dim("nanmedian", dim, x.ndim)
    flat = ravel(x) if x.ndim == 0 else x
    order = _order(flat, d, False)  # nan sorts last
    count = (~isnan(flat)).astype(np.int64).sum(d, keepdim=True)
    k = P.maximum((count - 1) // 2, 0)
    found = taken(flat, take_along(order, k, d, k.shape), d, keepdim or x.ndim == 0,
                  NanmedianResult)  # fmt: skip
    return NanmedianResult(*(squeeze(t, 0) for t in found)) if x.ndim == 0 else found


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


@pytorch_keywords
def quantile(input: Any, q: Any, dim: int | None = None, keepdim: bool = False, *,
             interpolation: str = "linear") -> Tensor:  # fmt: skip
    """The q-th quantiles along `dim` (of all elements without): between the sorted values at
    the ranks around q * (n - 1), as PyTorch interpolates; a 1-d `q` puts its axis first.
    Differentiable through the sorted values. A nan makes the result nan (`nanquantile`
    skips them)."""
    return _quantile("quantile", input, q, dim, keepdim, interpolation, skip_nan=False)


@pytorch_keywords
def nanquantile(input: Any, q: Any, dim: int | None = None, keepdim: bool = False, *,
                interpolation: str = "linear") -> Tensor:  # fmt: skip
    """`quantile` of the values that are not nan (nan where all are)."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, skip_nan=True)


def _quantile(op: str, input: Any, q: Any, dim: Any, keepdim: bool, interpolation: str,
              skip_nan: bool) -> Tensor:  # fmt: skip
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"{op}: interpolation must be one of {_INTERPOLATIONS}, not "
                         f"{interpolation!r}")  # fmt: skip
    x = as_tensor(input)
    qs = np.asarray(q.numpy() if isinstance(q, Tensor) else q, dtype=np.float64)
    if qs.ndim > 1 or ((qs < 0) | (qs > 1)).any():
        raise ValueError(f"{op}: q must be a number or a 1-d tensor of values in [0, 1], got {q}")
    if dim is None:
        x, d = ravel(x), 0
    else:
        d = one_dim(op, dim, x.ndim)
    values = P.where(isnan(x), math.inf, x) if skip_nan else x
    values = sort(values, d).values
    n = x.shape[d]
    counts = (n - isnan(x).astype(np.int64).sum(d, keepdim=True)) if skip_nan else n
    picks = [_pick(values, d, qk, counts, interpolation) for qk in qs.reshape(-1)]
    if skip_nan:  # a row of nans only has no quantile
        picks = [P.where(counts == 0, math.nan, p) for p in picks]
    else:  # a nan sorts last: any nan makes the quantile nan, as in PyTorch
        has_nan = isnan(at(values, d, slice(n - 1, n)))
        picks = [P.where(has_nan, math.nan, p) for p in picks]
    out = stack(picks) if qs.ndim else picks[0]
    if not keepdim:
        out = squeeze(out, d + (1 if qs.ndim else 0))
    elif dim is None:
        out = out.reshape((*qs.shape, *[1] * as_tensor(input).ndim))
    return out


def _pick(values: Tensor, d: int, q: float, counts: Any, interpolation: str) -> Tensor:
    """The quantile q from `values` sorted along d, `counts` of them valid (a number, or per
    row where nans were moved last)."""
    rank = q * (counts - 1) if isinstance(counts, int) else (counts - 1).astype(np.float64) * q
    lo = np.floor(rank) if isinstance(counts, int) else P.floor(rank)
    hi = np.ceil(rank) if isinstance(counts, int) else P.ceil(rank)
    if interpolation == "nearest":
        lo = hi = np.round(rank) if isinstance(counts, int) else P.rint(rank)  # half to even
    at_lo, at_hi = _gather(values, d, lo), _gather(values, d, hi)
    if interpolation in ("lower", "nearest"):
        return at_lo
    if interpolation == "higher":
        return at_hi
    if interpolation == "midpoint":
        return (at_lo + at_hi) / 2
    frac = rank - lo
    frac = frac if isinstance(counts, int) else frac.astype(values.dtype)
    return at_lo + (at_hi - at_lo) * frac


def _gather(values: Tensor, d: int, rank: Any) -> Tensor:
    """values[..., rank, ...] along d, keeping d: one rank, or one per row."""
    if not isinstance(rank, Tensor):
        i = int(max(rank, 0))
        return at(values, d, slice(i, i + 1))
    idx = P.maximum(rank, 0).astype(np.int64)
    return take_along(values, idx, d, idx.shape)


ModeResult = values_indices("mode")


@pytorch_keywords
def mode(input: Any, dim: int = -1, keepdim: bool = False) -> Any:
    """(values, indices): the most frequent value along `dim` (the smallest of equally frequent
    ones) and the last index where it occurs, as PyTorch's CPU mode gives them. The counting
    reads values, so it runs eagerly; the values are gathered, so the gradient flows."""
    x = as_tensor(input)
    d = one_dim("mode", dim, x.ndim)
    a = np.moveaxis(np.atleast_1d(x._concrete("mode")), d if x.ndim else 0, -1)
    rows = a.reshape(-1, a.shape[-1])
    picks = np.empty(len(rows), np.int64)
    for r, row in enumerate(rows):
        values, counts = np.unique(row, return_counts=True)
        best = values[np.argmax(counts)]
        picks[r] = np.flatnonzero((row == best) | ((row != row) & (best != best)))[-1]
    idx = np.expand_dims(picks.reshape(a.shape[:-1]), -1)
    idx = np.moveaxis(idx, -1, d) if x.ndim else idx.reshape(())
    return taken(x, Tensor._of(idx), d, keepdim, ModeResult)


__all__ = ["argsort", "kthvalue", "median", "mode", "msort", "nanmedian", "nanquantile", "quantile",
           "sort", "topk"]  # fmt: skip

"""Functions whose results are indices or counts, with PyTorch's meanings: `unique` (sorted,
with `return_inverse`/`return_counts`), `unique_consecutive`, `bincount`, `histc`,
`searchsorted`, `bucketize` and `isin`, `tril_indices`/`triu_indices`. None has a gradient (but
`bincount`'s weights, which are summed by a scatter).

Under `@tracegrad.trace` a result whose shape depends on the values (unique's, bincount's) is
refused for a traced input, as `nonzero` is, with an error naming the op; computed from a
constant it is a constant. searchsorted, bucketize and histc have shapes known from their
inputs' and are ops, so they trace."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError, TraceError, user_location
from tracegrad.frontend.functions import one_dim, pytorch_keywords, ravel, reshape, take_along_dim
from tracegrad.frontend.sorting import sort
from tracegrad.frontend.tensor import Tensor, as_tensor


def data_dependent_shape(op: str, *xs: Any, why: str = "its result's shape depends on the values"
                         ) -> None:  # fmt: skip
    """Refuse, naming the user's line, where a traced tensor would set a result's shape."""
    if any(isinstance(x, Tensor) and x.is_symbolic for x in xs):
        raise TraceError(
            f"{op}: {why} (a data-dependent shape), so it cannot be traced; compute it outside "
            f"the traced function and pass the result in (at {user_location()})"
        )


def _result(values: np.ndarray, inverse: np.ndarray | None, counts: np.ndarray | None,
            dtype: np.dtype) -> Any:  # fmt: skip
    """PyTorch's result: the values (in `dtype`: bfloat16's were compared as float32) alone, or
    a tuple with the inverse and/or the counts."""
    values = Tensor._of(values if values.dtype == dtype else bfloat16.cast(values, dtype))
    extra = [Tensor._of(a.astype(np.int64)) for a in (inverse, counts) if a is not None]
    return (values, *extra) if extra else values


@pytorch_keywords
def unique(input: Any, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None) -> Any:  # fmt: skip
    """The distinct elements (of the flattened tensor, or the distinct slices along `dim`),
    sorted; with return_inverse each element's (slice's) index among them, in input's shape
    (dim's length), with return_counts how often each occurs. Always sorted, as PyTorch's on
    the CPU."""
    x = as_tensor(input)
    data_dependent_shape("unique", x)
    a = bfloat16.readable(x.numpy())  # bfloat16's bits compared as their values
    if dim is None:
        values, inverse, counts = np.unique(
            a, return_inverse=True, return_counts=True, equal_nan=False
        )  # each nan its own, as PyTorch's
        inverse = inverse.reshape(a.shape)
    else:
        d = one_dim("unique", dim, a.ndim)
        values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True, axis=d)
        inverse = inverse.reshape(-1)
    return _result(
        values,
        inverse if return_inverse else None,
        counts if return_counts else None,
        x._value.dtype,
    )


@pytorch_keywords
def unique_consecutive(input: Any, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None) -> Any:  # fmt: skip
    """Each run of equal consecutive elements (slices along `dim`) kept once, in order; the
    inverse and counts as `unique`'s."""
    x = as_tensor(input)
    data_dependent_shape("unique_consecutive", x)
    a = bfloat16.readable(x.numpy())
    if dim is None:
        a, d = a.reshape(-1), 0
    else:
        d = one_dim("unique_consecutive", dim, a.ndim)
    moved = np.moveaxis(a, d, 0).reshape(a.shape[d], -1 if a.size else 0)
    n = moved.shape[0]
    changed = np.ones(n, bool)
    changed[1:] = np.any(moved[1:] != moved[:-1], axis=1) if n > 1 else changed[1:]
    starts = np.flatnonzero(changed)
    values = np.take(a, starts, axis=d)
    inverse = np.cumsum(changed) - 1
    inverse = inverse.reshape(x.shape) if dim is None else inverse
    counts = np.diff(np.append(starts, n))
    return _result(
        values,
        inverse if return_inverse else None,
        counts if return_counts else None,
        x._value.dtype,
    )


def bincount(input: Any, weights: Any = None, minlength: int = 0) -> Tensor:
    """How often each value 0, 1, ..., max occurs in a 1-D tensor of non-negative integers (at
    least `minlength` bins), int64; with `weights`, their sums per value instead (weights'
    float dtype, float64 for integers), differentiable in the weights."""
    x = as_tensor(input)
    data_dependent_shape("bincount", x, why="its length is the largest value plus one")
    a = x.numpy()
    if a.ndim != 1 or a.dtype.kind not in "iub":
        raise ValueError(f"bincount: expects a 1-D tensor of integers, got {a.dtype} {a.shape}")
    if a.size and a.min() < 0:
        raise ValueError(f"bincount: the values must be non-negative, found {a.min()}")
    n = max(int(a.max()) + 1 if a.size else 0, int(minlength))
    if weights is None:
        return Tensor._of(np.bincount(a, minlength=n).astype(np.int64))
    w = as_tensor(weights)
    if w.shape != a.shape:
        raise ShapeError(f"bincount: weights {w.shape} and input {a.shape} differ in shape")
    w = w if w.dtype.kind == "f" else w.astype(np.float64)
    return P.scatter_add(w, Tensor._of(a.astype(np.int64)), shape=(n,), template=("@",))


@pytorch_keywords
def histc(input: Any, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
    """Counts in `bins` equal bins over [min, max] (the data's range if both are 0), as floats
    of input's dtype; elements outside are not counted."""
    x = as_tensor(input)
    if bins <= 0:
        raise ValueError(f"histc: bins must be positive, got {bins}")
    if min > max:
        raise ValueError(f"histc: min {min} is larger than max {max}")
    return P.histc(ravel(x), bins=int(bins), lo=float(min), hi=float(max))


class HistogramResult(NamedTuple):
    hist: Tensor
    bin_edges: Tensor


@pytorch_keywords
def histogram(input: Any, bins: int = 100, *, range: tuple[float, float] | None = None,
              weight: Any = None, density: bool = False) -> HistogramResult:  # fmt: skip
    """Counts in `bins` equal bins over `range` (the data's if None, widened by 1/2 each way
    if it is one value, as NumPy's) and the bins' edges; with `density`, scaled to integrate
    to 1. A bin count only, without weights."""
    x = as_tensor(input)
    if not isinstance(bins, int | np.integer) or weight is not None:
        raise NotImplementedError("histogram: takes a number of bins, without weight (see histc)")
    lo, hi = (float(x.min()), float(x.max())) if range is None else map(float, range)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    hist = histc(x, int(bins), lo, hi)
    if density:
        hist = hist / (hist.sum() * ((hi - lo) / int(bins)))
    return HistogramResult(hist, Tensor._of(np.linspace(lo, hi, int(bins) + 1, dtype=x.dtype)))


@pytorch_keywords
def searchsorted(sorted_sequence: Any, input: Any, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Any = None) -> Tensor:  # fmt: skip
    """Where each value would be inserted into `sorted_sequence` (along its last dimension,
    whose leading dimensions input's match) to keep it sorted: before equal elements, or
    after them with right=True (side="right")."""
    seq, values = as_tensor(sorted_sequence), as_tensor(input)
    if side is not None and side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if side is not None and right and side == "left":
        raise ValueError("searchsorted: side='left' contradicts right=True")
    if sorter is not None:
        seq = take_along_dim(seq, as_tensor(sorter), -1)
    scalar = values.ndim == 0
    values = reshape(values, (1,)) if scalar else values
    out = P.searchsorted(seq, values, side="right" if right or side == "right" else "left")
    out = reshape(out, ()) if scalar else out
    return out.astype(np.int32) if out_int32 else out


@pytorch_keywords
def bucketize(input: Any, boundaries: Any, *, out_int32: bool = False,
              right: bool = False) -> Tensor:  # fmt: skip
    """The bucket of each element among 1-D `boundaries`: i with boundaries[i-1] < x <=
    boundaries[i] (right=False), or boundaries[i-1] <= x < boundaries[i] (right=True)."""
    b = as_tensor(boundaries)
    if b.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be 1-D, got {b.shape}")
    return searchsorted(b, input, out_int32=out_int32, right=right)


def isin(elements: Any, test_elements: Any, *, assume_unique: bool = False,
         invert: bool = False) -> Tensor:  # fmt: skip
    """Whether each element occurs among `test_elements` (either may be a number): a binary
    search in the sorted test elements, so it traces (and costs n log m, not n m)."""
    x, t = as_tensor(elements), ravel(as_tensor(test_elements))
    if t.shape[0] == 0:
        found = Tensor._of(np.zeros(x.shape, np.bool_))
    else:
        ordered = sort(t).values
        at = P.minimum(searchsorted(ordered, x), t.shape[0] - 1)
        found = ordered[at] == x
    return ~found if invert else found


def _triangle(op: str, row: int, col: int, offset: int, dtype: Any) -> Tensor:
    rows, cols = np.nonzero((np.tril if op == "tril" else np.triu)(np.ones((row, col)), offset))
    return Tensor._of(np.stack([rows, cols]).astype(np.dtype(dtype)))


def tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = np.int64,
                 device: Any = None, layout: Any = None) -> Tensor:  # fmt: skip
    """The (2, N) coordinates of the lower triangle of a row x col matrix (diagonal `offset`
    and below), row by row."""
    return _triangle("tril", row, col, offset, dtype)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = np.int64,
                 device: Any = None, layout: Any = None) -> Tensor:  # fmt: skip
    """The (2, N) coordinates of the upper triangle (diagonal `offset` and above)."""
    return _triangle("triu", row, col, offset, dtype)


__all__ = ["bincount", "bucketize", "histc", "histogram", "isin", "searchsorted", "tril_indices",
           "triu_indices", "unique", "unique_consecutive"]  # fmt: skip

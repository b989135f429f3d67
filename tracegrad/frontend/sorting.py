"""Sorting and order statistics with PyTorch's meanings: `sort`, `topk`, `kthvalue` and
`median(dim)` give the named tuple (values, indices); the values are gathered at the indices,
so the gradient goes back to where each value came from."""

from __future__ import annotations

from typing import Any

from tracegrad.core import primitives as P
from tracegrad.frontend.functions import at, one_dim, pytorch_keywords, ravel
from tracegrad.frontend.reductions import taken, values_indices
from tracegrad.frontend.tensor import Tensor, as_tensor

SortResult, TopkResult = values_indices("sort"), values_indices("topk")
KthvalueResult, MedianResult = values_indices("kthvalue"), values_indices("median")


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


@pytorch_keywords
def median(input: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    """The lower median (no mean of the middle two, as PyTorch): of all elements, or with a dim
    the named tuple (values, indices)."""
    x = as_tensor(input)
    if dim is None:
        return median(ravel(x), 0).values
    d = one_dim("median", dim, x.ndim)
    k = ((x.shape[d] if x.ndim else 1) - 1) // 2 + 1
    return MedianResult(*kthvalue(x, k, d, keepdim))


__all__ = ["argsort", "kthvalue", "median", "msort", "sort", "topk"]

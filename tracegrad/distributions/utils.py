"""What PyTorch's `torch.distributions.utils` gives beyond distribution.py's helpers, which
custom distributions (pyro's) import: `lazy_property`, a standard normal draw, and a
lower-triangular matrix to the vector of its entries and back."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tracegrad.frontend.autodiff import enable_grad
from tracegrad.frontend.creation import randn
from tracegrad.frontend.functions import cat, index_select, reshape
from tracegrad.frontend.tensor import Tensor


class lazy_property:  # noqa: N801 (PyTorch's name)
    """A property computed on first access and then stored on the instance (it is computed
    with gradients enabled, as PyTorch's, so a parameter made lazily still reaches its
    sources). On the class it is a property (`Distribution._check_parameters` skips it)."""

    def __init__(self, wrapped: Callable) -> None:
        self.wrapped = wrapped
        functools.update_wrapper(self, wrapped)  # type: ignore[arg-type]

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return _lazy_property_and_property(self.wrapped)
        with enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class _lazy_property_and_property(lazy_property, property):  # noqa: N801
    def __init__(self, wrapped: Callable) -> None:
        property.__init__(self, wrapped)


def standard_normal(shape: tuple, dtype: Any) -> Tensor:
    """Standard normal draws of `shape` and `dtype` (PyTorch's `_standard_normal`)."""
    return randn(tuple(shape), dtype=dtype)


def _tril_positions(n: int, diag: int) -> np.ndarray:
    """The flat positions (row-major) of the entries on or below diagonal `diag` of n x n."""
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    rows, cols = np.indices((n, n))
    return np.flatnonzero(cols < rows + diag + 1)


def tril_matrix_to_vec(mat: Tensor, diag: int = 0) -> Tensor:
    """The entries of `mat` on and below diagonal `diag`, row by row, as a vector."""
    n = mat.shape[-1]
    flat = reshape(mat, (*mat.shape[:-2], n * n))
    return index_select(flat, -1, Tensor._of(_tril_positions(n, diag)))


def vec_to_tril_matrix(vec: Tensor, diag: int = 0) -> Tensor:
    """The lower-triangular matrix whose entries on and below diagonal `diag` are `vec`'s, row
    by row (tril_matrix_to_vec's inverse); zeros elsewhere."""
    m, k = vec.shape[-1], 1 + 2 * diag
    n_float = (-k + (k * k + 8 * m + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    n = round(n_float)
    if abs(n - n_float) > 1e-9:
        raise ValueError(f"vec_to_tril_matrix: the size {m} of vec's last dimension is not the "
                         "number of entries of a triangular matrix")  # fmt: skip
    source = np.full(n * n, m)  # position m: the zero appended below
    source[_tril_positions(n, diag)] = np.arange(m)
    padded = cat([vec, Tensor._of(np.zeros((*vec.shape[:-1], 1), vec.dtype))], -1)
    flat = index_select(padded, -1, Tensor._of(source))
    return reshape(flat, (*vec.shape[:-1], n, n))


__all__ = ["lazy_property", "standard_normal", "tril_matrix_to_vec", "vec_to_tril_matrix"]

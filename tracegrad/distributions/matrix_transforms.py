"""The transforms onto structured sets, PyTorch's: the simplex (`SoftmaxTransform`,
`StickBreakingTransform`), lower Cholesky factors, correlation Cholesky factors and positive
definite matrices. `constraint_registry` maps unconstrained parameters into these sets with
them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import clipped
from tracegrad.distributions.transforms import Transform
from tracegrad.distributions.utils import tril_matrix_to_vec, vec_to_tril_matrix
from tracegrad.frontend import linalg
from tracegrad.frontend.functions import matmul, matrix_transpose, narrow
from tracegrad.frontend.rearrange import diag_embed, diagonal, tril
from tracegrad.frontend.reductions import cumprod, cumsum, softmax, sum
from tracegrad.frontend.tensor import Tensor


def _pad_last(x: Tensor, before: int, after: int, value: float) -> Tensor:
    """x with `value` put before and after its last dimension's entries."""
    width = ((0, 0),) * (x.ndim - 1) + ((before, after),)
    return P.pad(x, pad_width=width, value=float(value))


def _stick_offset(n: int, dtype: np.dtype) -> Tensor:
    """log(n - i) for i = 0..n-1: centres the stick-breaking map at the uniform simplex."""
    return Tensor._of(np.log(np.arange(n, 0, -1, dtype=dtype)))


def _at_least_1d(where: str, shape: Sequence[int]) -> tuple:
    if len(shape) < 1:
        raise ValueError(f"{where}: too few dimensions on input")
    return tuple(shape)


class SoftmaxTransform(Transform):
    """y = softmax(x) over the last dimension: not bijective (x + c has the same image); its
    `inv` is log y."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SoftmaxTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return softmax(x, -1)

    def _inverse(self, y: Tensor) -> Tensor:
        return P.log(y)

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        return _at_least_1d("SoftmaxTransform", shape)

    inverse_shape = forward_shape


class StickBreakingTransform(Transform):
    """R^(K-1) onto the K-simplex by breaking a stick: bijective, with a log-determinant (the
    map HMC samplers use for simplex-valued parameters)."""

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StickBreakingTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        z = clipped(P.sigmoid(x - _stick_offset(x.shape[-1], x.dtype)))
        z_cumprod = cumprod(1.0 - z, -1)
        return _pad_last(z, 0, 1, 1.0) * _pad_last(z_cumprod, 1, 0, 1.0)

    def _inverse(self, y: Tensor) -> Tensor:
        y_crop = narrow(y, -1, 0, y.shape[-1] - 1)
        sf = P.maximum(1.0 - cumsum(y_crop, -1), float(np.finfo(y.dtype).tiny))
        return P.log(y_crop) - P.log(sf) + _stick_offset(y_crop.shape[-1], y.dtype)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        x = x - _stick_offset(x.shape[-1], x.dtype)
        y_crop = narrow(y, -1, 0, y.shape[-1] - 1)
        return sum(-x - P.softplus(-x) + P.log(y_crop), -1)  # log sigmoid(x) = -softplus(-x)

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        shape = _at_least_1d("StickBreakingTransform", shape)
        return shape[:-1] + (shape[-1] + 1,)

    def inverse_shape(self, shape: Sequence[int]) -> tuple:
        shape = _at_least_1d("StickBreakingTransform", shape)
        return shape[:-1] + (shape[-1] - 1,)


def _diagonal(x: Tensor) -> Tensor:
    return diagonal(x, 0, -2, -1)


class LowerCholeskyTransform(Transform):
    """Square matrices onto lower Cholesky factors: the strict lower triangle kept, the
    diagonal exponentiated (not bijective: the upper triangle is dropped)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LowerCholeskyTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return tril(x, -1) + diag_embed(P.exp(_diagonal(x)))

    def _inverse(self, y: Tensor) -> Tensor:
        return tril(y, -1) + diag_embed(P.log(_diagonal(y)))


class PositiveDefiniteTransform(Transform):
    """Square matrices onto positive definite ones: L L^T, L = LowerCholeskyTransform(x)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PositiveDefiniteTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        L = LowerCholeskyTransform()(x)
        return matmul(L, matrix_transpose(L))

    def _inverse(self, y: Tensor) -> Tensor:
        return LowerCholeskyTransform().inv(linalg.cholesky(y))


class CorrCholeskyTransform(Transform):
    """Vectors of D(D-1)/2 reals onto Cholesky factors of D x D correlation matrices: tanh
    into (-1, 1), then each row's entries placed by breaking a stick of unit squared norm
    (the LKJ distribution's coordinates)."""

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CorrCholeskyTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        eps = float(np.finfo(x.dtype).eps)
        x = P.minimum(P.maximum(P.tanh(x), -1.0 + eps), 1.0 - eps)
        r = vec_to_tril_matrix(x, diag=-1)
        z1m_cumprod_sqrt = cumprod(P.sqrt(1.0 - r * r), -1)
        r = r + Tensor._of(np.eye(r.shape[-1], dtype=r.dtype))
        return r * _pad_last(narrow(z1m_cumprod_sqrt, -1, 0, r.shape[-1] - 1), 1, 0, 1.0)

    def _inverse(self, y: Tensor) -> Tensor:
        y_cumsum = 1.0 - cumsum(y * y, -1)
        shifted = _pad_last(narrow(y_cumsum, -1, 0, y.shape[-1] - 1), 1, 0, 1.0)
        t = tril_matrix_to_vec(y, diag=-1) / P.sqrt(tril_matrix_to_vec(shifted, diag=-1))
        return (P.log1p(t) - P.log1p(-t)) * 0.5

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        y1m_cumsum = 1.0 - cumsum(y * y, -1)
        stick_breaking = sum(P.log(tril_matrix_to_vec(y1m_cumsum, diag=-2)), -1) * 0.5
        tanh = sum(x + P.softplus(x * -2.0) - math.log(2.0), -1) * -2.0
        return stick_breaking + tanh

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        shape = _at_least_1d("CorrCholeskyTransform", shape)
        n = shape[-1]
        d = round((0.25 + 2 * n) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != n:
            raise ValueError(f"CorrCholeskyTransform: {n} is not a number D(D-1)/2 of entries "
                             "below a diagonal")  # fmt: skip
        return shape[:-1] + (d, d)

    def inverse_shape(self, shape: Sequence[int]) -> tuple:
        if len(shape) < 2 or shape[-2] != shape[-1]:
            raise ValueError(f"CorrCholeskyTransform: shape {tuple(shape)} is not square")
        d = shape[-1]
        return tuple(shape[:-2]) + (d * (d - 1) // 2,)


__all__ = [
    "CorrCholeskyTransform", "LowerCholeskyTransform", "PositiveDefiniteTransform",
    "SoftmaxTransform", "StickBreakingTransform",
]  # fmt: skip

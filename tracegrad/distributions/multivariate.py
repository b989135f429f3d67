"""`MultivariateNormal`, made from a covariance matrix, a precision matrix or the lower
Cholesky factor of the covariance (`scale_tril`). Everything is computed from the factor L:
`rsample` is loc + L eps, `log_prob` solves with L (through L's inverse, `linalg.solve` against
the identity: differentiable, and computed once per distribution, not per value)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    Distribution,
    broadcast_shapes,
    float_tensor,
    shape_of,
)
from tracegrad.frontend import linalg
from tracegrad.frontend.creation import randn
from tracegrad.frontend.functions import broadcast_to, matmul, matrix_transpose, reshape
from tracegrad.frontend.rearrange import diagonal, flip, tril
from tracegrad.frontend.reductions import sum
from tracegrad.frontend.tensor import Tensor

_MATRICES = ("covariance_matrix", "precision_matrix", "scale_tril")


def mv(matrix: Tensor, vector: Tensor) -> Tensor:
    """matrix @ vector over broadcast batch dimensions."""
    out = matmul(matrix, reshape(vector, (*vector.shape, 1)))
    return reshape(out, out.shape[:-1])


def tril_inverse(L: Tensor) -> Tensor:
    """The inverse of lower-triangular L (lower-triangular: what rounds above the diagonal is
    dropped)."""
    eye = Tensor._of(np.eye(L.shape[-1], dtype=L.dtype))
    return tril(linalg.solve(L, broadcast_to(eye, L.shape)))


def half_log_det(L: Tensor) -> Tensor:
    """log det(L L^T) / 2 = sum log diag(L)."""
    return sum(P.log(diagonal(L, 0, -2, -1)), -1)


def mahalanobis(L_inverse: Tensor, x: Tensor) -> Tensor:
    """|L^-1 x|^2, over broadcast batch dimensions."""
    y = mv(L_inverse, x)
    return sum(y * y, -1)


def scale_tril_of(name: str, matrix: Tensor) -> Tensor:
    """The lower Cholesky factor of the covariance given as `name` ("scale_tril",
    "covariance_matrix" or "precision_matrix")."""
    if name == "scale_tril":
        return matrix
    if name == "covariance_matrix":
        return linalg.cholesky(matrix)
    return precision_to_scale_tril(matrix)


def precision_to_scale_tril(precision: Tensor) -> Tensor:
    """The lower Cholesky factor of the precision's inverse, as PyTorch's: the flipped
    precision's factor, flipped back and transposed, is L^-1."""
    Lf = linalg.cholesky(flip(precision, (-2, -1)))
    return tril_inverse(matrix_transpose(flip(Lf, (-2, -1))))


class MultivariateNormal(Distribution):
    """N(loc, Sigma) over vectors (event_shape (n,)): exactly one of `covariance_matrix`,
    `precision_matrix` and `scale_tril` (lower-triangular, positive diagonal); batch_shape is
    the broadcast of loc's and the matrix's batch dimensions."""

    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}  # fmt: skip
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc: Any, covariance_matrix: Any = None, precision_matrix: Any = None,
                 scale_tril: Any = None, validate_args: bool | None = None) -> None:  # fmt: skip
        matrices = (covariance_matrix, precision_matrix, scale_tril)
        given = {k: v for k, v in zip(_MATRICES, matrices, strict=True) if v is not None}
        if len(given) != 1:
            raise ValueError(
                "MultivariateNormal: exactly one of covariance_matrix, precision_matrix or "
                f"scale_tril may be specified, got {list(given)}"
            )
        loc = float_tensor(loc)
        ((name, matrix),) = given.items()
        matrix = float_tensor(matrix, loc.dtype)
        if loc.ndim < 1:
            raise ShapeError(f"MultivariateNormal: loc must be at least one-dimensional, got "
                             f"shape {loc.shape}")  # fmt: skip
        n = loc.shape[-1]
        if matrix.ndim < 2 or matrix.shape[-2:] != (n, n):
            raise ShapeError(f"MultivariateNormal: {name} must be a batch of {n}x{n} matrices "
                             f"(loc has shape {loc.shape}), got shape {matrix.shape}")  # fmt: skip
        batch = broadcast_shapes("MultivariateNormal", loc=loc.shape[:-1],
                                 **{name: matrix.shape[:-2]})  # fmt: skip
        self.loc = broadcast_to(loc, (*batch, n)) if loc.shape[:-1] != batch else loc
        full = matrix if matrix.shape[:-2] == batch else broadcast_to(matrix, (*batch, n, n))
        setattr(self, name, full)
        self._given = name
        super().__init__(batch, (n,), validate_args)
        self._unbroadcasted_scale_tril = scale_tril_of(name, matrix)

    @functools.cached_property
    def _scale_tril_inverse(self) -> Tensor:
        return tril_inverse(self._unbroadcasted_scale_tril)

    def _full(self, matrix: Tensor) -> Tensor:
        shape = self._batch_shape + self._event_shape * 2
        return matrix if matrix.shape == shape else broadcast_to(matrix, shape)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        batch, n = shape_of(batch_shape), self._event_shape[0]
        matrix = broadcast_to(self.__dict__[self._given], (*batch, n, n))
        new = self._get_checked_instance(MultivariateNormal, _instance)
        MultivariateNormal.__init__(new, broadcast_to(self.loc, (*batch, n)),
                                    **{self._given: matrix}, validate_args=False)  # fmt: skip
        return new

    @functools.cached_property
    def scale_tril(self) -> Tensor:
        return self._full(self._unbroadcasted_scale_tril)

    @functools.cached_property
    def covariance_matrix(self) -> Tensor:
        L = self._unbroadcasted_scale_tril
        return self._full(matmul(L, matrix_transpose(L)))

    @functools.cached_property
    def precision_matrix(self) -> Tensor:
        L_inverse = self._scale_tril_inverse
        return self._full(matmul(matrix_transpose(L_inverse), L_inverse))

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        L = self._unbroadcasted_scale_tril
        return broadcast_to(sum(L * L, -1), self._batch_shape + self._event_shape)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        eps = randn(self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.loc + mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        M = mahalanobis(self._scale_tril_inverse, value - self.loc)
        n = self._event_shape[0]
        return (M + n * math.log(2 * math.pi)) * -0.5 - half_log_det(self._unbroadcasted_scale_tril)

    def entropy(self) -> Tensor:
        n = self._event_shape[0]
        H = half_log_det(self._unbroadcasted_scale_tril) + 0.5 * n * (1.0 + math.log(2 * math.pi))
        return H if H.shape == self._batch_shape else broadcast_to(H, self._batch_shape)

    def __repr__(self) -> str:
        matrix = self.__dict__[self._given]
        return f"MultivariateNormal(loc: {self.loc.shape}, {self._given}: {matrix.shape})"


__all__ = ["MultivariateNormal"]

"""`LowRankMultivariateNormal`, PyTorch's: N(loc, W W^T + diag(D)) with W an n x m factor,
m << n (a VAE's or a GP's structured posterior). Everything goes through the m x m capacitance
matrix C = I + W^T D^-1 W (Woodbury's identity and the matrix determinant lemma), so a
log density costs O(n m^2), not O(n^3)."""

from __future__ import annotations

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
from tracegrad.distributions.multivariate import half_log_det, mahalanobis, mv, tril_inverse
from tracegrad.distributions.utils import lazy_property
from tracegrad.frontend import linalg
from tracegrad.frontend.creation import randn
from tracegrad.frontend.functions import broadcast_to, matmul, matrix_transpose, reshape
from tracegrad.frontend.rearrange import diag_embed
from tracegrad.frontend.reductions import sum
from tracegrad.frontend.tensor import Tensor


def _unsqueeze(x: Tensor, dim: int) -> Tensor:
    d = dim % (x.ndim + 1)
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def _eye(n: int, dtype: np.dtype) -> Tensor:
    return Tensor._of(np.eye(n, dtype=dtype))


def capacitance_tril(W: Tensor, D: Tensor) -> Tensor:
    """The Cholesky factor of C = I + W^T D^-1 W."""
    Wt_Dinv = matrix_transpose(W) / _unsqueeze(D, -2)
    return linalg.cholesky(matmul(Wt_Dinv, W) + _eye(W.shape[-1], W.dtype))


def lowrank_logdet(D: Tensor, cap_tril: Tensor) -> Tensor:
    """log det(W W^T + D) = log det C + log det D."""
    return half_log_det(cap_tril) * 2.0 + sum(P.log(D), -1)


def lowrank_mahalanobis(W: Tensor, D: Tensor, x: Tensor, cap_tril: Tensor) -> Tensor:
    """x^T (W W^T + D)^-1 x = x^T D^-1 x - |L_C^-1 W^T D^-1 x|^2."""
    Wt_Dinv_x = mv(matrix_transpose(W) / _unsqueeze(D, -2), x)
    return sum(x * x / D, -1) - mahalanobis(tril_inverse(cap_tril), Wt_Dinv_x)


class LowRankMultivariateNormal(Distribution):
    """N(loc, cov_factor cov_factor^T + diag(cov_diag)) over vectors of loc's last size."""

    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}  # fmt: skip
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc: Any, cov_factor: Any, cov_diag: Any,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        loc = float_tensor(loc)
        cov_factor, cov_diag = (
            float_tensor(cov_factor, loc.dtype),
            float_tensor(cov_diag, loc.dtype),
        )
        self._check_shapes(loc, cov_factor, cov_diag)
        n, m = loc.shape[-1], cov_factor.shape[-1]
        batch = broadcast_shapes("LowRankMultivariateNormal", loc=loc.shape[:-1],
                                 cov_factor=cov_factor.shape[:-2],
                                 cov_diag=cov_diag.shape[:-1])  # fmt: skip
        self.loc = broadcast_to(loc, (*batch, n))
        self.cov_factor = broadcast_to(cov_factor, (*batch, n, m))
        self.cov_diag = broadcast_to(cov_diag, (*batch, n))
        self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag = cov_factor, cov_diag
        self._capacitance_tril = capacitance_tril(cov_factor, cov_diag)
        super().__init__(batch, (n,), validate_args)

    @staticmethod
    def _check_shapes(loc: Tensor, cov_factor: Tensor, cov_diag: Tensor) -> None:
        where = "LowRankMultivariateNormal"
        if loc.ndim < 1:
            raise ShapeError(f"{where}: loc must be at least one-dimensional, got {loc.shape}")
        n = loc.shape[-1]
        if cov_factor.ndim < 2 or cov_factor.shape[-2] != n:
            raise ShapeError(f"{where}: cov_factor must be a batch of {n} x m matrices (loc has "
                             f"shape {loc.shape}), got shape {cov_factor.shape}")  # fmt: skip
        if cov_diag.ndim < 1 or cov_diag.shape[-1] != n:
            raise ShapeError(f"{where}: cov_diag must be a batch of vectors of size {n}, got "
                             f"shape {cov_diag.shape}")  # fmt: skip

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        shape = shape_of(batch_shape) + self._event_shape
        new.loc = broadcast_to(self.loc, shape)
        new.cov_diag = broadcast_to(self.cov_diag, shape)
        new.cov_factor = broadcast_to(self.cov_factor, shape + self.cov_factor.shape[-1:])
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        Distribution.__init__(new, shape_of(batch_shape), self._event_shape, False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @lazy_property
    def variance(self) -> Tensor:  # type: ignore[override]
        W = self._unbroadcasted_cov_factor
        return broadcast_to(sum(W * W, -1) + self._unbroadcasted_cov_diag,
                            self._batch_shape + self._event_shape)  # fmt: skip

    @lazy_property
    def scale_tril(self) -> Tensor:
        n = self._event_shape[0]
        d_sqrt = _unsqueeze(P.sqrt(self._unbroadcasted_cov_diag), -1)
        Dinvsqrt_W = self._unbroadcasted_cov_factor / d_sqrt
        K = matmul(Dinvsqrt_W, matrix_transpose(Dinvsqrt_W)) + _eye(n, d_sqrt.dtype)
        return broadcast_to(d_sqrt * linalg.cholesky(K), self._batch_shape + (n, n))

    @lazy_property
    def covariance_matrix(self) -> Tensor:
        W, n = self._unbroadcasted_cov_factor, self._event_shape[0]
        cov = matmul(W, matrix_transpose(W)) + diag_embed(self._unbroadcasted_cov_diag)
        return broadcast_to(cov, self._batch_shape + (n, n))

    @lazy_property
    def precision_matrix(self) -> Tensor:
        W, D, n = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, self._event_shape[0]
        Wt_Dinv = matrix_transpose(W) / _unsqueeze(D, -2)
        A = linalg.solve_triangular(self._capacitance_tril, Wt_Dinv, upper=False)
        precision = diag_embed(1.0 / D) - matmul(matrix_transpose(A), A)
        return broadcast_to(precision, self._batch_shape + (n, n))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps_W = randn(shape[:-1] + self.cov_factor.shape[-1:], dtype=self.loc.dtype)
        eps_D = randn(shape, dtype=self.loc.dtype)
        return (self.loc + mv(self._unbroadcasted_cov_factor, eps_W)
                + P.sqrt(self._unbroadcasted_cov_diag) * eps_D)  # fmt: skip

    def _log_det(self) -> Tensor:
        return lowrank_logdet(self._unbroadcasted_cov_diag, self._capacitance_tril)

    def log_prob(self, value: Any) -> Tensor:
        diff = self._value(value) - self.loc
        M = lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                diff, self._capacitance_tril)  # fmt: skip
        return (self._log_det() + M + self._event_shape[0] * math.log(2 * math.pi)) * -0.5

    def entropy(self) -> Tensor:
        H = (self._log_det() + self._event_shape[0] * (1.0 + math.log(2 * math.pi))) * 0.5
        return H if H.shape == self._batch_shape else broadcast_to(H, self._batch_shape)

    def __repr__(self) -> str:
        return (f"LowRankMultivariateNormal(loc: {self.loc.shape}, cov_factor: "
                f"{self.cov_factor.shape}, cov_diag: {self.cov_diag.shape})")  # fmt: skip


__all__ = ["LowRankMultivariateNormal"]

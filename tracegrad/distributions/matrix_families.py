"""The distributions over matrices, PyTorch's: `LKJCholesky` (Cholesky factors of correlation
matrices: a prior for a covariance's correlations) and `Wishart` (positive definite matrices: a
covariance's conjugate prior). LKJ draws are the onion method's (Beta draws, without gradient);
Wishart draws are Bartlett's decomposition, reparameterized in the scale (not in df: chi-squared
draws, whose gradient in the degrees of freedom is not provided, `gamma`)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    Distribution,
    ExponentialFamily,
    broadcast_all,
    broadcast_shapes,
    float_tensor,
    shape_of,
)
from tracegrad.distributions.gamma import Beta, Chi2
from tracegrad.distributions.multivariate import half_log_det, scale_tril_of
from tracegrad.distributions.utils import lazy_property
from tracegrad.frontend import linalg
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.creation import randn
from tracegrad.frontend.functions import broadcast_to, matmul, matrix_transpose, reshape
from tracegrad.frontend.rearrange import diag_embed, diagonal, tril
from tracegrad.frontend.reductions import sum
from tracegrad.frontend.special import mvlgamma
from tracegrad.frontend.tensor import Tensor

LOG_2 = math.log(2)


def _unsqueeze_last(x: Tensor) -> Tensor:
    return reshape(x, (*x.shape, 1))


class LKJCholesky(Distribution):
    """The LKJ distribution of `concentration` over the lower Cholesky factors of `dim` x `dim`
    correlation matrices."""

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration: Any = 1.0,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        if dim < 2:
            raise ValueError(f"LKJCholesky: expected dim to be an integer greater than or equal "
                             f"to 2, found dim={dim}")  # fmt: skip
        self.dim = int(dim)
        (self.concentration,) = broadcast_all("LKJCholesky", concentration=concentration)
        self._beta = self._onion_betas()
        shape = self.concentration.shape
        super().__init__(shape, (self.dim, self.dim), validate_args)

    def _onion_betas(self) -> Beta:
        """Row i's squared norm below the diagonal is Beta(i / 2, eta + (dim - 2) / 2 - (i - 1)
        / 2) (row 0 has none: its Beta is unused). PyTorch draws Beta(i - 1/2, ...), which is
        that only for i = 1: its draws' correlations beyond the second row are too spread."""
        dtype = self.concentration.dtype
        offset = np.concatenate([[0.0], np.arange(self.dim - 1)]).astype(dtype)  # i - 1
        conc1 = np.concatenate([[0.5], np.arange(1, self.dim) / 2]).astype(dtype)
        marginal = self.concentration + 0.5 * (self.dim - 2)
        conc0 = _unsqueeze_last(marginal) - Tensor._of(offset * 0.5)
        return Beta(Tensor._of(conc1), conc0, validate_args=False)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = shape_of(batch_shape)
        new.dim = self.dim
        new.concentration = broadcast_to(self.concentration, batch_shape)
        new._beta = self._beta.expand(batch_shape + (self.dim,))
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape: Any = ()) -> Tensor:
        """The onion method (Lewandowski, Kurowicka and Joe, 2009), as PyTorch draws it but
        for the Betas (`_onion_betas`)."""
        with no_grad():
            y = _unsqueeze_last(self._beta.sample(sample_shape))
            u = tril(randn(self._extended_shape(sample_shape), dtype=y.dtype), -1)
            norm = P.sqrt(sum(u * u, -1, keepdim=True))
            u = u / P.where(norm == 0.0, 1.0, norm)  # the first row is all zeros
            w = P.sqrt(y) * u
            tiny = float(np.finfo(w.dtype).tiny)
            diag = P.sqrt(P.maximum(1.0 - sum(w * w, -1), tiny))
            return w + diag_embed(diag)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        diag = diagonal(value, 0, -1, -2)[..., 1:]
        order = Tensor._of(self.dim - np.arange(2, self.dim + 1, dtype=value.dtype))
        order = _unsqueeze_last(self.concentration - 1.0) * 2.0 + order
        unnormalized = sum(order * P.log(diag), -1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        normalizer = 0.5 * dm1 * math.log(math.pi) + mvlgamma(alpha - 0.5, dm1)
        return unnormalized - (normalizer - P.lgamma(alpha) * dm1)


def _mvdigamma(x: Tensor, p: int) -> Tensor:
    """The multivariate digamma function: sum_i digamma(x - i/2), i < p."""
    return sum(P.digamma(_unsqueeze_last(x) - Tensor._of(np.arange(p, dtype=x.dtype) / 2)), -1)


_MATRICES = ("covariance_matrix", "precision_matrix", "scale_tril")


class Wishart(ExponentialFamily):
    """The Wishart distribution of `df` degrees of freedom and scale given as exactly one of
    `covariance_matrix`, `precision_matrix` and `scale_tril`."""

    support = constraints.positive_definite
    has_rsample = True

    @property
    def arg_constraints(self) -> dict[str, constraints.Constraint]:  # type: ignore[override]
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self._event_shape[-1] - 1)}  # fmt: skip

    def __init__(self, df: Any, covariance_matrix: Any = None, precision_matrix: Any = None,
                 scale_tril: Any = None, validate_args: bool | None = None) -> None:  # fmt: skip
        matrices = (covariance_matrix, precision_matrix, scale_tril)
        given = {k: v for k, v in zip(_MATRICES, matrices, strict=True) if v is not None}
        if len(given) != 1:
            raise ValueError("Wishart: exactly one of covariance_matrix, precision_matrix or "
                             f"scale_tril may be specified, got {list(given)}")  # fmt: skip
        ((name, matrix),) = given.items()
        matrix = float_tensor(matrix)
        if matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2]:
            raise ShapeError(f"Wishart: {name} must be a batch of square matrices, got shape "
                             f"{matrix.shape}")  # fmt: skip
        df = float_tensor(df, matrix.dtype)
        batch = broadcast_shapes("Wishart", df=df.shape, **{name: matrix.shape[:-2]})
        n = matrix.shape[-1]
        self.df = broadcast_to(df, batch)
        self._check_df(n)
        setattr(self, name, broadcast_to(matrix, (*batch, n, n)))
        self._event_shape = (n, n)  # arg_constraints reads it
        super().__init__(batch, (n, n), validate_args)
        self._unbroadcasted_scale_tril = scale_tril_of(name, matrix)
        self._dist_chi2 = self._chi2()

    def _check_df(self, n: int) -> None:
        if self.df.is_symbolic:
            return
        df = self.df.numpy()
        if np.any(df <= n - 1):
            raise ValueError(f"Wishart: df expected to be greater than ndim - 1 = {n - 1}, got "
                             f"{df}")  # fmt: skip
        if np.any(df < n):
            warnings.warn("Wishart: low df values detected; singular samples are highly likely "
                          "to occur for ndim - 1 < df < ndim.", stacklevel=3)  # fmt: skip

    def _chi2(self) -> Chi2:
        """The diagonal's chi-squareds of Bartlett's decomposition: df - i degrees, i < n."""
        n = self._event_shape[-1]
        df = _unsqueeze_last(self.df) - Tensor._of(np.arange(n, dtype=self.df.dtype))
        return Chi2(df, validate_args=False)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = shape_of(batch_shape)
        cov_shape = batch_shape + self._event_shape
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        new.df = broadcast_to(self.df, batch_shape)
        for name in _MATRICES:
            if name in self.__dict__:
                setattr(new, name, broadcast_to(self.__dict__[name], cov_shape))
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._dist_chi2 = new._chi2()
        new._validate_args = self._validate_args
        return new

    def _full(self, matrix: Tensor) -> Tensor:
        return broadcast_to(matrix, self._batch_shape + self._event_shape)

    @lazy_property
    def scale_tril(self) -> Tensor:
        return self._full(self._unbroadcasted_scale_tril)

    @lazy_property
    def covariance_matrix(self) -> Tensor:
        L = self._unbroadcasted_scale_tril
        return self._full(matmul(L, matrix_transpose(L)))

    @lazy_property
    def precision_matrix(self) -> Tensor:
        L = self._unbroadcasted_scale_tril
        eye = Tensor._of(np.eye(self._event_shape[-1], dtype=L.dtype))
        return self._full(linalg.cholesky_solve(broadcast_to(eye, L.shape), L))

    def _df_matrix(self) -> Tensor:
        return reshape(self.df, self._batch_shape + (1, 1))

    @property
    def mean(self) -> Tensor:
        return self._df_matrix() * self.covariance_matrix

    @property
    def mode(self) -> Tensor:
        factor = self.df - float(self._event_shape[-1] + 1)
        factor = P.where(factor <= 0, math.nan, factor)
        return reshape(factor, self._batch_shape + (1, 1)) * self.covariance_matrix

    @property
    def variance(self) -> Tensor:
        V = self.covariance_matrix
        d = diagonal(V, 0, -2, -1)
        outer = _unsqueeze_last(d) * reshape(d, d.shape[:-1] + (1, d.shape[-1]))
        return self._df_matrix() * (V * V + outer)

    def _bartlett_sampling(self, sample_shape: tuple) -> Tensor:
        """L A A^T L^T, A lower-triangular: sqrt(chi2) on the diagonal, normals below."""
        n = self._event_shape[-1]
        eps = float(np.finfo(self.df.dtype).eps)
        diag = P.maximum(P.sqrt(self._dist_chi2.rsample(sample_shape)), eps)
        below = tril(randn(sample_shape + self._batch_shape + (n, n), dtype=diag.dtype), -1)
        chol = matmul(self._unbroadcasted_scale_tril, below + diag_embed(diag))
        return matmul(chol, matrix_transpose(chol))

    def rsample(self, sample_shape: Any = (), max_try_correction: Any = None) -> Tensor:
        """Reparameterized in the scale and in df (through the chi-squared draws). (PyTorch
        redraws singular draws; with df > n - 1 they have probability zero, and here are left
        as drawn.)"""
        return self._bartlett_sampling(shape_of(sample_shape))

    def _log_det_scale(self) -> Tensor:
        return half_log_det(self._unbroadcasted_scale_tril)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        nu, p = self.df, self._event_shape[-1]
        trace = sum(diagonal(linalg.cholesky_solve(value, self._unbroadcasted_scale_tril),
                             0, -2, -1), -1)  # fmt: skip
        return (-nu * (p * LOG_2 / 2 + self._log_det_scale()) - mvlgamma(nu / 2, p)
                + (nu - p - 1.0) / 2 * linalg.slogdet(value).logabsdet - trace / 2)  # fmt: skip

    def entropy(self) -> Tensor:
        nu, p = self.df, self._event_shape[-1]
        return ((p + 1) * (p * LOG_2 / 2 + self._log_det_scale()) + mvlgamma(nu / 2, p)
                - (nu - p - 1.0) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2)  # fmt: skip


__all__ = ["LKJCholesky", "Wishart"]

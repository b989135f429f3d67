"""The ratios of gamma draws, PyTorch's: `StudentT` (a normal over the root of a chi-squared
per degree of freedom: heavy-tailed likelihoods, robust regression) and `FisherSnedecor` (a
ratio of chi-squareds). Their draws are reparameterized in loc and scale, and in the degrees
of freedom through the gamma draws' implicit gradient in their concentration (`gamma`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import Distribution, broadcast_all, shape_of
from tracegrad.distributions.gamma import Chi2, Gamma
from tracegrad.frontend.creation import randn
from tracegrad.frontend.tensor import Tensor


class StudentT(Distribution):
    """loc + scale * X / sqrt(Z / df), X standard normal, Z ~ Chi2(df)."""

    arg_constraints = {"df": constraints.positive, "loc": constraints.real,
                       "scale": constraints.positive}  # fmt: skip
    support = constraints.real
    has_rsample = True

    def __init__(self, df: Any, loc: Any = 0.0, scale: Any = 1.0,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self.df, self.loc, self.scale = broadcast_all("StudentT", df=df, loc=loc, scale=scale)
        self._chi2 = Chi2(self.df, validate_args=False)
        super().__init__(self.df.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return P.where(self.df <= 1, math.nan, self.loc)

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        df = self.df
        finite = self.scale * self.scale * df / P.where(df > 2, df - 2.0, 1.0)
        return P.where(df > 2, finite, P.where(df > 1, math.inf, math.nan))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        x = randn(self._extended_shape(sample_shape), dtype=self.df.dtype)
        z = self._chi2.rsample(sample_shape)
        return self.loc + self.scale * x / P.sqrt(z / self.df)

    def log_prob(self, value: Any) -> Tensor:
        y = (self._value(value) - self.loc) / self.scale
        df = self.df
        z = (P.log(self.scale) + P.log(df) * 0.5 + 0.5 * math.log(math.pi)
             + P.lgamma(df * 0.5) - P.lgamma((df + 1.0) * 0.5))  # fmt: skip
        return (df + 1.0) * -0.5 * P.log1p(y * y / df) - z

    def entropy(self) -> Tensor:
        df = self.df
        lbeta = P.lgamma(df * 0.5) + math.lgamma(0.5) - P.lgamma((df + 1.0) * 0.5)
        spread = P.digamma((df + 1.0) * 0.5) - P.digamma(df * 0.5)
        return P.log(self.scale) + (df + 1.0) * 0.5 * spread + P.log(df) * 0.5 + lbeta


class FisherSnedecor(Distribution):
    """(X1 / df1) / (X2 / df2) for X1 ~ Chi2(df1), X2 ~ Chi2(df2)."""

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1: Any, df2: Any, validate_args: bool | None = None) -> None:
        self.df1, self.df2 = broadcast_all("FisherSnedecor", df1=df1, df2=df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1, validate_args=False)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2, validate_args=False)
        super().__init__(self.df1.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        df2 = P.where(self.df2 <= 2, math.nan, self.df2)
        return df2 / (df2 - 2.0)

    @property
    def mode(self) -> Tensor:
        mode = (self.df1 - 2.0) / self.df1 * self.df2 / (self.df2 + 2.0)
        return P.where(self.df1 <= 2, math.nan, mode)

    @property
    def variance(self) -> Tensor:
        df1, df2 = self.df1, P.where(self.df2 <= 4, math.nan, self.df2)
        return df2 * df2 * 2.0 * (df1 + df2 - 2.0) / (df1 * (df2 - 2.0) ** 2 * (df2 - 4.0))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        tiny = float(np.finfo(self.df1.dtype).tiny)
        x1 = self._gamma1.rsample(shape_of(sample_shape))
        x2 = P.maximum(self._gamma2.rsample(shape_of(sample_shape)), tiny)
        return P.maximum(x1 / x2, tiny)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        ct1, ct2, ct3 = self.df1 * 0.5, self.df2 * 0.5, self.df1 / self.df2
        t1 = P.lgamma(ct1 + ct2) - P.lgamma(ct1) - P.lgamma(ct2)
        t2 = ct1 * P.log(ct3) + (ct1 - 1.0) * P.log(value)
        t3 = (ct1 + ct2) * P.log1p(ct3 * value)
        return t1 + t2 - t3


__all__ = ["FisherSnedecor", "StudentT"]

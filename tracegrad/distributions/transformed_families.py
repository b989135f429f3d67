"""The families PyTorch defines as transformed distributions, defined so here too (so a
subclass may call `TransformedDistribution.__init__(self, base, transforms)`, as pyro's
LogNormal does): `LogNormal` (exp of a normal), `HalfNormal` and `HalfCauchy` (|X|), `Gumbel`
and `Weibull` and `Kumaraswamy` (maps of uniform or exponential draws), `Pareto` (scale e^X),
`InverseGamma` (1 / X),
`LogisticNormal` (a normal broken onto the simplex). Their densities are the change of
variables; the moments and entropies are the closed forms (PyTorch's)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.continuous import Cauchy, Exponential, Normal, Uniform
from tracegrad.distributions.distribution import Distribution, broadcast_all, float_tensor
from tracegrad.distributions.gamma import Gamma
from tracegrad.distributions.matrix_transforms import StickBreakingTransform
from tracegrad.distributions.transformed import TransformedDistribution
from tracegrad.distributions.transforms import (
    AbsTransform,
    AffineTransform,
    ExpTransform,
    PowerTransform,
)
from tracegrad.frontend.functions import broadcast_to
from tracegrad.frontend.tensor import Tensor

EULER = 0.57721566490153286060  # the Euler-Mascheroni constant


def _full(like: Tensor, value: float) -> Tensor:
    return Tensor._of(np.full(like.shape, value, like.dtype))


def _inf_below_zero(value: Tensor, log_prob: Tensor) -> Tensor:
    return P.where(value >= 0, log_prob, -math.inf)


class LogNormal(TransformedDistribution):
    """exp(X) for X ~ Normal(loc, scale)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        base = Normal(loc, scale, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(LogNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    loc = property(lambda self: self.base_dist.loc)
    scale = property(lambda self: self.base_dist.scale)

    @property
    def mean(self) -> Tensor:
        return P.exp(self.loc + self.scale * self.scale * 0.5)

    @property
    def mode(self) -> Tensor:
        return P.exp(self.loc - self.scale * self.scale)

    @property
    def variance(self) -> Tensor:
        s2 = self.scale * self.scale
        return P.expm1(s2) * P.exp(self.loc * 2.0 + s2)

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() + self.loc


class _Folded(TransformedDistribution):
    """|X| for X of a distribution symmetric about 0 (HalfNormal, HalfCauchy): the density is
    twice X's on [0, inf)."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    scale = property(lambda self: self.base_dist.scale)

    @property
    def mode(self) -> Tensor:
        return self.scale * 0.0

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        return _inf_below_zero(value, self.base_dist.log_prob(value) + math.log(2))

    def cdf(self, value: Any) -> Tensor:
        return self.base_dist.cdf(self._value(value, "cdf")) * 2.0 - 1.0

    def icdf(self, prob: Any) -> Tensor:
        return self.base_dist.icdf((float_tensor(prob, self.scale.dtype) + 1.0) * 0.5)

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() - math.log(2)


class HalfNormal(_Folded):
    """|X| for X ~ Normal(0, scale)."""

    def __init__(self, scale: Any, validate_args: bool | None = None) -> None:
        (scale,) = broadcast_all("HalfNormal", scale=scale)
        base = Normal(_full(scale, 0.0), scale, validate_args=False)
        super().__init__(base, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(HalfNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self) -> Tensor:
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale * (1 - 2 / math.pi)


class HalfCauchy(_Folded):
    """|X| for X ~ Cauchy(0, scale): mean and variance infinite."""

    def __init__(self, scale: Any, validate_args: bool | None = None) -> None:
        (scale,) = broadcast_all("HalfCauchy", scale=scale)
        base = Cauchy(_full(scale, 0.0), scale, validate_args=False)
        super().__init__(base, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(HalfCauchy, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self) -> Tensor:
        return _full(self.scale, math.inf)

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance


class Gumbel(TransformedDistribution):
    """loc - scale log(-log U) for U uniform: the distribution of a maximum."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all("Gumbel", loc=loc, scale=scale)
        info = np.finfo(self.loc.dtype)
        base = Uniform(_full(self.loc, float(info.tiny)), _full(self.loc, 1.0 - float(info.eps)),
                       validate_args=validate_args)  # fmt: skip
        transforms = [ExpTransform().inv, AffineTransform(0.0, -_full(self.scale, 1.0)),
                      ExpTransform().inv, AffineTransform(self.loc, -self.scale)]  # fmt: skip
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(Gumbel, _instance)
        Gumbel.__init__(new, *(_expanded(p, batch_shape) for p in (self.loc, self.scale)),
                        validate_args=False)  # fmt: skip
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value: Any) -> Tensor:
        y = (self.loc - self._value(value)) / self.scale
        return (y - P.exp(y)) - P.log(self.scale)

    @property
    def mean(self) -> Tensor:
        return self.loc + self.scale * EULER

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale * (math.pi / math.sqrt(6))

    @property
    def variance(self) -> Tensor:
        return self.stddev * self.stddev

    def entropy(self) -> Tensor:
        return P.log(self.scale) + (1 + EULER)


def _expanded(param: Tensor, batch_shape: Any) -> Tensor:
    return broadcast_to(param, tuple(batch_shape))


class Weibull(TransformedDistribution):
    """scale * E^(1 / concentration) for E ~ Exponential(1)."""

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale: Any, concentration: Any, validate_args: bool | None = None) -> None:
        self.scale, self.concentration = broadcast_all("Weibull", scale=scale,
                                                       concentration=concentration)  # fmt: skip
        self.concentration_reciprocal = 1.0 / self.concentration
        base = Exponential(_full(self.scale, 1.0), validate_args=validate_args)
        transforms = [PowerTransform(self.concentration_reciprocal),
                      AffineTransform(0.0, self.scale)]  # fmt: skip
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(Weibull, _instance)
        params = (_expanded(p, batch_shape) for p in (self.scale, self.concentration))
        Weibull.__init__(new, *params, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return self.scale * P.exp(P.lgamma(1.0 + self.concentration_reciprocal))

    @property
    def mode(self) -> Tensor:
        k = self.concentration
        return self.scale * ((k - 1.0) / k) ** (1.0 / k)

    @property
    def variance(self) -> Tensor:
        r = self.concentration_reciprocal
        moments = P.exp(P.lgamma(1.0 + 2.0 * r)) - P.exp(2.0 * P.lgamma(1.0 + r))
        return self.scale * self.scale * moments

    def entropy(self) -> Tensor:
        r = self.concentration_reciprocal
        return EULER * (1.0 - r) + P.log(self.scale * r) + 1.0


class Pareto(TransformedDistribution):
    """scale * e^E for E ~ Exponential(alpha): support [scale, inf)."""

    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale: Any, alpha: Any, validate_args: bool | None = None) -> None:
        self.scale, self.alpha = broadcast_all("Pareto", scale=scale, alpha=alpha)
        base = Exponential(self.alpha, validate_args=validate_args)
        transforms = [ExpTransform(), AffineTransform(0.0, self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(Pareto, _instance)
        params = (_expanded(p, batch_shape) for p in (self.scale, self.alpha))
        Pareto.__init__(new, *params, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        a = P.maximum(self.alpha, 1.0)
        return a * self.scale / (a - 1.0)

    @property
    def mode(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        a = P.maximum(self.alpha, 2.0)
        return self.scale * self.scale * a / ((a - 1.0) * (a - 1.0) * (a - 2.0))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.greater_than_eq(self.scale)

    def entropy(self) -> Tensor:
        return P.log(self.scale / self.alpha) + (1.0 + 1.0 / self.alpha)


class InverseGamma(TransformedDistribution):
    """1 / X for X ~ Gamma(concentration, rate)."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration: Any, rate: Any, validate_args: bool | None = None) -> None:
        base = Gamma(concentration, rate, validate_args=validate_args)
        minus_one = Tensor._of(np.array(-1.0, base.rate.dtype))
        super().__init__(base, PowerTransform(minus_one), validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    concentration = property(lambda self: self.base_dist.concentration)
    rate = property(lambda self: self.base_dist.rate)

    @property
    def mean(self) -> Tensor:
        a = self.concentration
        return P.where(a > 1, self.rate / (a - 1.0), math.inf)

    @property
    def mode(self) -> Tensor:
        return self.rate / (self.concentration + 1.0)

    @property
    def variance(self) -> Tensor:
        a = self.concentration
        return P.where(a > 2, self.rate * self.rate / ((a - 1.0) ** 2 * (a - 2.0)), math.inf)

    def entropy(self) -> Tensor:
        a = self.concentration
        return a + P.log(self.rate) + P.lgamma(a) - (a + 1.0) * P.digamma(a)


class LogisticNormal(TransformedDistribution):
    """A normal vector of K - 1 entries broken onto the K-simplex (`StickBreakingTransform`)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand([1])
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(LogisticNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    loc = property(lambda self: self.base_dist.base_dist.loc)
    scale = property(lambda self: self.base_dist.base_dist.scale)


class Kumaraswamy(TransformedDistribution):
    """(1 - U^(1/b))^(1/a) for U uniform on (0, 1), a = concentration1, b = concentration0: a
    Beta-like family on the unit interval with a closed-form cdf, so its draws are
    reparameterized in both parameters."""

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}  # fmt: skip
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1: Any, concentration0: Any,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self.concentration1, self.concentration0 = broadcast_all(
            "Kumaraswamy", concentration1=concentration1, concentration0=concentration0
        )
        c = self.concentration0
        base = Uniform(_full(c, 0.0), _full(c, 1.0), validate_args=validate_args)
        transforms = [PowerTransform(1.0 / self.concentration0), AffineTransform(1.0, -1.0),
                      PowerTransform(1.0 / self.concentration1)]  # fmt: skip
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(Kumaraswamy, _instance)
        params = (_expanded(p, batch_shape) for p in (self.concentration1, self.concentration0))
        Kumaraswamy.__init__(new, *params, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _moment(self, n: int) -> Tensor:
        """E[X^n] = b B(1 + n/a, b)."""
        a, b = self.concentration1, self.concentration0
        arg = 1.0 + n / a
        return b * P.exp(P.lgamma(arg) + P.lgamma(b) - P.lgamma(arg + b))

    @property
    def mean(self) -> Tensor:
        return self._moment(1)

    @property
    def mode(self) -> Tensor:
        """((a - 1) / (ab - 1))^(1/a) where a, b >= 1 (not both 1); nan elsewhere. (PyTorch's
        formula, (1/b) log(1 - b) - log(1 - ab), is nan wherever b > 1.)"""
        a, b = self.concentration1, self.concentration0
        mode = ((a - 1.0) / P.maximum(a * b - 1.0, 1e-300)) ** (1.0 / a)
        return P.where((a < 1) | (b < 1) | ((a == 1) & (b == 1)), math.nan, mode)

    @property
    def variance(self) -> Tensor:
        mean = self.mean
        return self._moment(2) - mean * mean

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        t1, t0 = 1.0 - 1.0 / a, 1.0 - 1.0 / b
        h0 = P.digamma(b + 1.0) + EULER
        return t0 + t1 * h0 - P.log(a) - P.log(b)


__all__ = ["Gumbel", "HalfCauchy", "HalfNormal", "InverseGamma", "Kumaraswamy", "LogNormal",
           "LogisticNormal", "Pareto", "Weibull"]  # fmt: skip

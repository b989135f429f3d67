"""The univariate continuous families: `Normal`, `Uniform`, `Laplace`, `Exponential`,
`Cauchy` (PyTorch's formulas; each draw is reparameterized: `rsample` is the
parameters' differentiable function of standard draws from tracegrad's random state)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    LOG_SQRT_2PI,
    Distribution,
    ExponentialFamily,
    broadcast_all,
    float_tensor,
    nan_like,
)
from tracegrad.frontend.creation import rand, randn
from tracegrad.frontend.tensor import Tensor


def _rand(d: Distribution, param: Tensor, sample_shape: Any) -> Tensor:
    return rand(d._extended_shape(sample_shape), dtype=param.dtype)


class Normal(ExponentialFamily):
    """The normal distribution N(loc, scale**2); `rsample` is loc + scale * eps."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all("Normal", loc=loc, scale=scale)
        super().__init__(self.loc.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        eps = randn(self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        z = (value - self.loc) / self.scale
        return z * z * -0.5 - P.log(self.scale) - LOG_SQRT_2PI

    def entropy(self) -> Tensor:
        return P.log(self.scale) + (0.5 + LOG_SQRT_2PI)

    def cdf(self, value: Any) -> Tensor:
        value = self._value(value, "cdf")
        return (P.erf((value - self.loc) / self.scale * (1 / math.sqrt(2))) + 1.0) * 0.5

    def icdf(self, value: Any) -> Tensor:
        u = float_tensor(value, self.loc.dtype)
        return self.loc + self.scale * P.erfinv(u * 2.0 - 1.0) * math.sqrt(2)


class Uniform(Distribution):
    """Uniform on [low, high); `rsample` is low + (high - low) * u."""

    arg_constraints = {"low": constraints.dependent, "high": constraints.dependent}
    has_rsample = True

    def __init__(self, low: Any, high: Any, validate_args: bool | None = None) -> None:
        self.low, self.high = broadcast_all("Uniform", low=low, high=high)
        super().__init__(self.low.shape, (), validate_args)
        if self._validate_args and not self.low.is_symbolic and not self.high.is_symbolic:
            if not bool(np.all(self.low.numpy() < self.high.numpy())):
                raise ValueError(
                    f"Expected parameter low (a tensor of shape {self.low.shape}) of "
                    f"distribution {self!r} to be below high everywhere, but found invalid "
                    f"values:\nlow {self.low.numpy()}\nhigh {self.high.numpy()}"
                )

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.half_open_interval(self.low, self.high)

    @property
    def mean(self) -> Tensor:
        return (self.high + self.low) * 0.5

    @property
    def mode(self) -> Tensor:
        return nan_like(self.high, self._batch_shape)

    @property
    def stddev(self) -> Tensor:
        return (self.high - self.low) * (1 / math.sqrt(12))

    @property
    def variance(self) -> Tensor:
        width = self.high - self.low
        return width * width * (1 / 12)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return self.low + _rand(self, self.low, sample_shape) * (self.high - self.low)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        inside = P.where(self.low <= value, self.high > value, False)
        return P.where(inside, -P.log(self.high - self.low), -math.inf)

    def cdf(self, value: Any) -> Tensor:
        value = self._value(value, "cdf")
        fraction = (value - self.low) / (self.high - self.low)
        return P.minimum(P.maximum(fraction, 0.0), 1.0)

    def icdf(self, value: Any) -> Tensor:
        return float_tensor(value, self.low.dtype) * (self.high - self.low) + self.low

    def entropy(self) -> Tensor:
        return P.log(self.high - self.low)

    def __repr__(self) -> str:
        return f"Uniform(low: {self.low.shape}, high: {self.high.shape})"


class Laplace(Distribution):
    """The Laplace distribution (density exp(-|x - loc| / scale) / (2 scale))."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all("Laplace", loc=loc, scale=scale)
        super().__init__(self.loc.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale * math.sqrt(2)

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale * 2.0

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        # u uniform on (-1, 1), as PyTorch's: loc - scale sign(u) log(1 - |u|)
        eps = float(np.finfo(self.loc.dtype).eps)
        u = _rand(self, self.loc, sample_shape) * (2.0 - eps) + (eps - 1.0)
        return self.loc - self.scale * P.sign(u) * P.log1p(-P.abs(u))

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        return -P.log(self.scale * 2.0) - P.abs(value - self.loc) / self.scale

    def cdf(self, value: Any) -> Tensor:
        d = self._value(value, "cdf") - self.loc
        return 0.5 - P.sign(d) * P.expm1(-P.abs(d) / self.scale) * 0.5

    def icdf(self, value: Any) -> Tensor:
        term = float_tensor(value, self.loc.dtype) - 0.5
        return self.loc - self.scale * P.sign(term) * P.log1p(P.abs(term) * -2.0)

    def entropy(self) -> Tensor:
        return P.log(self.scale * 2.0) + 1.0


class Exponential(ExponentialFamily):
    """The exponential distribution of `rate` (density rate exp(-rate x), x >= 0)."""

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate: Any, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all("Exponential", rate=rate)
        super().__init__(self.rate.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return 1.0 / self.rate

    @property
    def mode(self) -> Tensor:
        return self.rate * 0.0

    @property
    def stddev(self) -> Tensor:
        return 1.0 / self.rate

    @property
    def variance(self) -> Tensor:
        return 1.0 / (self.rate * self.rate)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return -P.log1p(-_rand(self, self.rate, sample_shape)) / self.rate

    def log_prob(self, value: Any) -> Tensor:
        return P.log(self.rate) - self.rate * self._value(value)

    def cdf(self, value: Any) -> Tensor:
        return 1.0 - P.exp(-self.rate * self._value(value, "cdf"))

    def icdf(self, value: Any) -> Tensor:
        return -P.log1p(-float_tensor(value, self.rate.dtype)) / self.rate

    def entropy(self) -> Tensor:
        return 1.0 - P.log(self.rate)


class Cauchy(Distribution):
    """The Cauchy distribution (mean undefined: nan; variance infinite)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all("Cauchy", loc=loc, scale=scale)
        super().__init__(self.loc.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return nan_like(self.loc, self._batch_shape)

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return Tensor._of(np.full(self._batch_shape, np.inf, self.loc.dtype))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        u = _rand(self, self.loc, sample_shape)
        return self.loc + self.scale * P.tan((u - 0.5) * math.pi)

    def log_prob(self, value: Any) -> Tensor:
        z = (self._value(value) - self.loc) / self.scale
        return -P.log1p(z * z) - P.log(self.scale) - math.log(math.pi)

    def cdf(self, value: Any) -> Tensor:
        return P.arctan((self._value(value, "cdf") - self.loc) / self.scale) * (1 / math.pi) + 0.5

    def icdf(self, value: Any) -> Tensor:
        u = float_tensor(value, self.loc.dtype)
        return self.loc + self.scale * P.tan((u - 0.5) * math.pi)

    def entropy(self) -> Tensor:
        return P.log(self.scale) + math.log(4 * math.pi)


class GeneralizedPareto(Distribution):
    """The generalized Pareto distribution of `loc`, `scale` and `concentration` xi (survival
    (1 + xi z)^(-1/xi), z = (x - loc) / scale; exp(-z) at xi = 0), PyTorch's (after
    TensorFlow Probability's): the tails of other distributions. Draws invert the cdf, so
    `rsample` is reparameterized in all three."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive,
                       "concentration": constraints.real}  # fmt: skip
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, concentration: Any,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self.loc, self.scale, self.concentration = broadcast_all(
            "GeneralizedPareto", loc=loc, scale=scale, concentration=concentration
        )
        super().__init__(self.loc.shape, (), validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        """[loc, inf), or [loc, loc - scale / xi] for xi < 0."""
        xi = self.concentration
        upper = P.where(xi < 0, self.loc - self.scale / P.where(xi < 0, xi, -1.0), math.inf)
        return constraints.interval(self.loc, upper)

    def _safe(self) -> tuple[Tensor, Tensor]:
        """Whether xi is 0 (PyTorch's isclose), and xi with 1 in its place there."""
        zero = P.abs(self.concentration) <= 1e-8
        return zero, P.where(zero, 1.0, self.concentration)

    @property
    def mean(self) -> Tensor:
        valid = self.concentration < 1
        return P.where(valid, self.loc + self.scale / (1 - P.where(valid, self.concentration,
                                                                   0.5)), math.nan)  # fmt: skip

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        valid = self.concentration < 0.5
        xi = P.where(valid, self.concentration, 0.25)
        return P.where(valid, self.scale**2 / ((1 - xi) ** 2 * (1 - 2 * xi)), math.nan)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return self.icdf(_rand(self, self.loc, sample_shape))

    def log_prob(self, value: Any) -> Tensor:
        z = (self._value(value) - self.loc) / self.scale
        zero, xi = self._safe()
        y = 1 / xi + 1.0
        nonzero = P.where(y == 0, y, y * P.log1p(xi * z))
        return -P.log(self.scale) - P.where(zero, z, nonzero)

    def log_survival_function(self, value: Any) -> Tensor:
        z = (self._value(value, "log_survival_function") - self.loc) / self.scale
        zero, xi = self._safe()
        return P.where(zero, -z, -P.log1p(xi * z) / xi)

    def log_cdf(self, value: Any) -> Tensor:
        return P.log1p(-P.exp(self.log_survival_function(value)))

    def cdf(self, value: Any) -> Tensor:
        return P.exp(self.log_cdf(value))

    def icdf(self, value: Any) -> Tensor:
        log_u = P.log1p(-float_tensor(value, self.loc.dtype))
        zero, xi = self._safe()
        nonzero = self.loc + self.scale / xi * P.expm1(-xi * log_u)
        return P.where(zero, self.loc - self.scale * log_u, nonzero)

    def entropy(self) -> Tensor:
        return P.log(self.scale) + self.concentration + 1


__all__ = ["Cauchy", "Exponential", "GeneralizedPareto", "Laplace", "Normal", "Uniform"]

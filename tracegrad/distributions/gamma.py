"""The gamma family: `Gamma`, `Beta` (X / (X + Y) of two gammas) and `Dirichlet` (gammas
normalized), PyTorch's formulas. Draws come from tracegrad's random state (counter-based, so
traced steps draw them too) by Marsaglia and Tsang's method, vectorized: each value takes the
first accepted of CANDIDATES proposals (each accepted with probability 0.95 or more).

`Chi2` is Gamma(df / 2, 1 / 2). `rsample` is reparameterized in the rates and, implicitly, in
the concentrations (Figurnov et al., 2018): a draw x of Gamma(a, 1) held at its quantile
moves by dx/da = -(dP(a, x)/da) / density(x) (`core.ops.special.gamma_draw_slope`, to 1e-8
relative; PyTorch's approximation is within 3e-4). So Beta, Dirichlet, Chi2, StudentT's and
Wishart's df, and FisherSnedecor are differentiable in every parameter, as PyTorch's."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    ExponentialFamily,
    broadcast_all,
    float_tensor,
)
from tracegrad.frontend import random
from tracegrad.frontend.autodiff import is_grad_enabled, no_grad
from tracegrad.frontend.creation import randn
from tracegrad.frontend.functions import broadcast_to, take_along_dim
from tracegrad.frontend.reductions import argmax, sum
from tracegrad.frontend.tensor import Tensor

CANDIDATES = 16  # a value is left unaccepted with probability below 0.05 ** 16


def standard_gamma(concentration: Tensor, shape: tuple[int, ...] | None = None) -> Tensor:
    """Draws of Gamma(concentration, 1) of `shape` (default: the concentration's), differentiable
    in the concentration (implicitly: `reparameterized`). Below 1 a concentration is boosted:
    Gamma(a) = Gamma(a + 1) U^(1 / a)."""
    shape = tuple(concentration.shape if shape is None else shape)
    x = _drawn(concentration, shape)
    if not (is_grad_enabled() and concentration.requires_grad):
        return x
    alpha = broadcast_to(concentration, shape)
    # the value x, the gradient dx/da: (a - a) is 0, with a's gradient
    return x + (alpha - alpha.detach()) * P.gamma_draw_slope(x, alpha.detach())


def _drawn(concentration: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Marsaglia and Tsang's draws, without gradient."""
    with no_grad():
        alpha = broadcast_to(concentration.detach(), shape)
        boosted = alpha + (alpha < 1).astype(alpha.dtype)
        d = boosted - 1.0 / 3.0
        c = 1.0 / P.sqrt(d * 9.0)
        z = randn((CANDIDATES, *shape), dtype=alpha.dtype)
        u = random.uniform((CANDIDATES, *shape), alpha.dtype)
        v = (z * c + 1.0) ** 3
        positive = v > 0
        v_safe = P.where(positive, v, 1.0)
        accepted = positive & (P.log(u) < z * z * 0.5 + d - d * v_safe + d * P.log(v_safe))
        first = argmax(accepted.astype(alpha.dtype), dim=0, keepdim=True)  # the last if none
        x = take_along_dim(d * v_safe, first, dim=0)[0]
        boost = random.uniform(shape, alpha.dtype) ** (1.0 / alpha)
        return P.where(alpha < 1, x * boost, x)


class Gamma(ExponentialFamily):
    """The gamma distribution of `concentration` a and `rate` b (density b^a x^(a-1) e^(-bx) /
    Gamma(a))."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, concentration: Any, rate: Any, validate_args: bool | None = None) -> None:
        self.concentration, self.rate = broadcast_all("Gamma", concentration=concentration,
                                                      rate=rate)  # fmt: skip
        super().__init__(self.rate.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate

    @property
    def mode(self) -> Tensor:
        return P.maximum((self.concentration - 1.0) / self.rate, 0.0)

    @property
    def variance(self) -> Tensor:
        return self.concentration / (self.rate * self.rate)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        x = standard_gamma(self.concentration, self._extended_shape(sample_shape))
        return P.maximum(x / self.rate, _tiny(x))  # PyTorch's clamp away from 0

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        a, b = self.concentration, self.rate
        return a * P.log(b) + (a - 1.0) * P.log(value) - b * value - P.lgamma(a)

    def entropy(self) -> Tensor:
        a = self.concentration
        return a - P.log(self.rate) + P.lgamma(a) + (1.0 - a) * P.digamma(a)

    def cdf(self, value: Any) -> Tensor:
        """P(a, b x), the regularized incomplete gamma function (PyTorch's: differentiable in
        the rate and the value, not in the concentration)."""
        value = self._value(value, "cdf")
        return P.igamma(self.concentration, self.rate * value)


class Chi2(Gamma):
    """The chi-squared distribution of `df` degrees of freedom: Gamma(df / 2, 1 / 2)."""

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df: Any, validate_args: bool | None = None) -> None:
        (df,) = broadcast_all("Chi2", df=df)
        super().__init__(df * 0.5, 0.5, validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Any:
        new = self._get_checked_instance(Chi2, _instance)
        Chi2.__init__(new, broadcast_to(self.df, tuple(batch_shape)), validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def df(self) -> Tensor:
        return self.concentration * 2.0


def _tiny(x: Tensor) -> float:
    return float(np.finfo(x.dtype).tiny)


class Beta(ExponentialFamily):
    """The beta distribution on (0, 1) of `concentration1` a and `concentration0` b: X / (X + Y)
    for X ~ Gamma(a), Y ~ Gamma(b)."""

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}  # fmt: skip
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1: Any, concentration0: Any,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self.concentration1, self.concentration0 = broadcast_all(
            "Beta", concentration1=concentration1, concentration0=concentration0
        )
        super().__init__(self.concentration1.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self) -> Tensor:
        return (self.concentration1 - 1.0) / (self.concentration1 + self.concentration0 - 2.0)

    @property
    def variance(self) -> Tensor:
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total * total * (total + 1.0))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x, y = (
            standard_gamma(self.concentration1, shape),
            standard_gamma(self.concentration0, shape),
        )
        eps = float(np.finfo(x.dtype).eps) / 2
        return P.minimum(P.maximum(x / (x + y), _tiny(x)), 1.0 - eps)  # PyTorch's clamp

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        a, b = self.concentration1, self.concentration0
        return ((a - 1.0) * P.log(value) + (b - 1.0) * P.log1p(-value)
                + P.lgamma(a + b) - P.lgamma(a) - P.lgamma(b))  # fmt: skip

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return (P.lgamma(a) + P.lgamma(b) - P.lgamma(total) - (a - 1.0) * P.digamma(a)
                - (b - 1.0) * P.digamma(b) + (total - 2.0) * P.digamma(total))  # fmt: skip


class Dirichlet(ExponentialFamily):
    """The Dirichlet distribution over the simplex of its last axis, of `concentration`: gammas
    of those concentrations, normalized."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration: Any, validate_args: bool | None = None) -> None:
        self.concentration = float_tensor(concentration)
        if self.concentration.ndim < 1:
            raise ValueError("Dirichlet: the concentration must have at least one dimension, "
                             f"got shape {self.concentration.shape}")  # fmt: skip
        shape = self.concentration.shape
        super().__init__(shape[:-1], shape[-1:], validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration / sum(self.concentration, -1, keepdim=True)

    @property
    def mode(self) -> Tensor:
        shifted = P.maximum(self.concentration - 1.0, 0.0)
        return shifted / sum(shifted, -1, keepdim=True)

    @property
    def variance(self) -> Tensor:
        total = sum(self.concentration, -1, keepdim=True)
        return self.concentration * (total - self.concentration) / (total * total * (total + 1))

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        x = standard_gamma(self.concentration, self._extended_shape(sample_shape))
        x = P.maximum(x, _tiny(x))
        return x / sum(x, -1, keepdim=True)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        c = self.concentration
        return (sum((c - 1.0) * P.log(value), -1) + P.lgamma(sum(c, -1))
                - sum(P.lgamma(c), -1))  # fmt: skip

    def entropy(self) -> Tensor:
        c = self.concentration
        k, total = c.shape[-1], sum(c, -1)
        return (sum(P.lgamma(c), -1) - P.lgamma(total) + (total - k) * P.digamma(total)
                - sum((c - 1.0) * P.digamma(c), -1))  # fmt: skip

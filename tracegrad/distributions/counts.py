"""The count families, PyTorch's: `Poisson`, `Binomial`, `Geometric`, `NegativeBinomial` (a
gamma mixture of Poissons) and `Multinomial`, with PyTorch's formulas. Draws have no gradient.

Draws come from tracegrad's counter-based random state, vectorized so a traced step draws them
too: a small mean by inversion over the first TERMS values (the mass beyond is below 1e-15),
a large one by transformed rejection (Hormann's PTRS for the Poisson, BTRS for the binomial),
each value taking the first accepted of CANDIDATES proposals (each accepted with probability
above 0.75, so one is left unaccepted with probability below 1e-14)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.discrete import Categorical
from tracegrad.distributions.distribution import (
    Distribution,
    ExponentialFamily,
    broadcast_all,
    float_tensor,
    logits_to_probs,
    probs_to_logits,
    shape_of,
)
from tracegrad.distributions.gamma import Gamma
from tracegrad.distributions.utils import lazy_property
from tracegrad.frontend import random
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import broadcast_to, reshape, take_along_dim
from tracegrad.frontend.reductions import argmax, cumsum, sum
from tracegrad.frontend.special import xlogy
from tracegrad.frontend.tensor import Tensor

TERMS = 64  # inversion's values 0..63: used below a mean of INVERSION_MAX
INVERSION_MAX = 10.0
CANDIDATES = 24


def _counted(log_pmf: Tensor, shape: tuple, dtype: np.dtype, state: Tensor | None) -> Tensor:
    """Inversion: the number of the values' cumulative probabilities (log_pmf over a leading
    axis of TERMS) below a uniform draw."""
    cdf = cumsum(P.exp(log_pmf), 0)
    u = random.uniform(shape, dtype, state)
    return sum((u >= cdf).astype(dtype), 0)


def _first_accepted(accepted: Tensor, values: Tensor) -> Tensor:
    """Along the leading (candidates') axis, the first accepted value (the last if none)."""
    first = argmax(accepted.astype(values.dtype), dim=0, keepdim=True)
    return take_along_dim(values, first, dim=0)[0]


def _terms(dtype: np.dtype, ndim: int) -> Tensor:
    return Tensor._of(np.arange(TERMS, dtype=dtype).reshape((TERMS,) + (1,) * ndim))


def poisson_draws(rate: Tensor, state: Tensor | None = None) -> Tensor:
    """Poisson draws of the rates (any shape), without gradient (from a generator's `state`,
    or the global one)."""
    with no_grad():
        rate = rate.detach()
        shape, dtype = rate.shape, rate.dtype
        small = P.minimum(P.maximum(rate, float(np.finfo(dtype).tiny)), INVERSION_MAX)
        k = _terms(dtype, rate.ndim)
        log_pmf = xlogy(k, small) - small - P.lgamma(k + 1.0)
        inverted = _counted(log_pmf, shape, dtype, state)
        return P.where(rate < INVERSION_MAX, inverted, _ptrs(P.maximum(rate, INVERSION_MAX), state))


def _ptrs(lam: Tensor, state: Tensor | None) -> Tensor:
    """Hormann's transformed rejection with squeeze (PTRS), for rates of 10 and above."""
    shape, dtype = (CANDIDATES, *lam.shape), lam.dtype
    slam, loglam = P.sqrt(lam), P.log(lam)
    b = slam * 2.53 + 0.931
    a = b * 0.02483 - 0.059
    inv_alpha = 1.1328 / (b - 3.4) + 1.1239
    v_r = 0.9277 - 3.6224 / (b - 2.0)
    u = random.uniform(shape, dtype, state) - 0.5
    v = random.uniform(shape, dtype, state)
    us = 0.5 - P.abs(u)
    k = P.floor((a * 2.0 / us + b) * u + lam + 0.43)
    quick = (us >= 0.07) & (v <= v_r)
    k_safe = P.maximum(k, 0.0)
    bound = -lam + k_safe * loglam - P.lgamma(k_safe + 1.0)
    test = P.log(v) + P.log(inv_alpha) - P.log(a / (us * us) + b) <= bound
    accepted = quick | ((k >= 0) & ~((us < 0.013) & (v > us)) & test)
    return _first_accepted(accepted, k_safe)


def binomial_draws(total_count: Tensor, probs: Tensor, state: Tensor | None = None) -> Tensor:
    """Binomial draws (any broadcast shape), without gradient: the smaller of p and 1 - p is
    drawn, the count mirrored when p > 1/2."""
    with no_grad():
        n, p = (x.detach() for x in broadcast_all("binomial", n=total_count, p=probs))
        flip = p > 0.5
        q = P.where(flip, 1.0 - p, p)
        mean = n * q
        k = _terms(n.dtype, n.ndim)
        q_safe = P.maximum(q, float(np.finfo(n.dtype).tiny))  # log 0 avoided: q = 0 draws 0s
        log_pmf = (P.lgamma(n + 1.0) - P.lgamma(k + 1.0) - P.lgamma(P.maximum(n - k, -0.5) + 1.0)
                   + xlogy(k, q_safe) + xlogy(P.maximum(n - k, 0.0), 1.0 - q_safe))  # fmt: skip
        log_pmf = P.where(k > n, -math.inf, log_pmf)
        inverted = _counted(log_pmf, n.shape, n.dtype, state)
        large = mean >= INVERSION_MAX
        btrs = _btrs(P.where(large, n, 100.0), P.where(large, q, 0.25), state)
        x = P.where(large, btrs, inverted)
        return P.where(flip, n - x, x)


def _btrs(n: Tensor, p: Tensor, state: Tensor | None) -> Tensor:
    """Hormann's transformed rejection (BTRS), for n p >= 10 and p <= 1/2."""
    shape, dtype = (CANDIDATES, *n.shape), n.dtype
    q = 1.0 - p
    m = P.floor((n + 1.0) * p)
    spq = P.sqrt(n * p * q)
    b = spq * 2.53 + 1.15
    a = b * 0.0248 + p * 0.01 - 0.0873
    c = n * p + 0.5
    v_r = 0.92 - 4.2 / b
    alpha = (5.1 / b + 2.83) * spq
    lpq = P.log(p / q)
    h = P.lgamma(m + 1.0) + P.lgamma(n - m + 1.0)
    u = random.uniform(shape, dtype, state) - 0.5
    v = random.uniform(shape, dtype, state)
    us = 0.5 - P.abs(u)
    k = P.floor((a * 2.0 / us + b) * u + c)
    inside = (k >= 0) & (k <= n)
    k_safe = P.minimum(P.maximum(k, 0.0), n)
    quick = (us >= 0.07) & (v <= v_r)
    bound = h - P.lgamma(k_safe + 1.0) - P.lgamma(n - k_safe + 1.0) + (k_safe - m) * lpq
    test = P.log(v * alpha / (a / (us * us) + b)) <= bound
    return _first_accepted(inside & (quick | test), k_safe)


def _probs_or_logits(where: str, probs: Any, logits: Any) -> str:
    if (probs is None) == (logits is None):
        raise ValueError(f"{where}: either probs or logits must be specified, but not both")
    return "probs" if logits is None else "logits"


class _BinaryParametrized(Distribution):
    """A family made from a success probability `probs` or its `logits` (the other computed
    when asked), beside an optional `total_count`."""

    def _set_param(self, name: str, value: Tensor) -> None:
        setattr(self, name, value)
        self._param, self._param_name = value, name

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self) -> tuple:
        return self._param.shape

    def _parameters(self) -> dict[str, Tensor]:
        out = {self._param_name: self._param}
        return {"total_count": self.total_count, **out} if "total_count" in self.__dict__ else out

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}: {v.shape}" for k, v in self._parameters().items())
        return f"{type(self).__name__}({shown})"


class Poisson(ExponentialFamily):
    """Counts of events at `rate` (mean and variance both the rate)."""

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate: Any, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all("Poisson", rate=rate)
        super().__init__(self.rate.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.rate

    @property
    def mode(self) -> Tensor:
        return P.floor(self.rate)

    @property
    def variance(self) -> Tensor:
        return self.rate

    def sample(self, sample_shape: Any = ()) -> Tensor:
        return poisson_draws(broadcast_to(self.rate, self._extended_shape(sample_shape)))

    def log_prob(self, value: Any) -> Tensor:
        rate, value = broadcast_all("Poisson.log_prob", rate=self.rate, value=self._value(value))
        return xlogy(value, rate) - rate - P.lgamma(value + 1.0)


class Binomial(_BinaryParametrized):
    """Successes in `total_count` trials of success probability `probs` (or sigmoid(logits))."""

    arg_constraints = {"total_count": constraints.nonnegative_integer,
                       "probs": constraints.unit_interval, "logits": constraints.real}  # fmt: skip
    has_enumerate_support = True

    def __init__(self, total_count: Any = 1, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        name = _probs_or_logits("Binomial", probs, logits)
        value = probs if name == "probs" else logits
        count, param = broadcast_all("Binomial", total_count=total_count, **{name: value})
        self.total_count = count
        self._set_param(name, param)
        super().__init__(param.shape, (), validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.probs

    @property
    def mode(self) -> Tensor:
        return P.minimum(P.floor((self.total_count + 1.0) * self.probs), self.total_count)

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1.0 - self.probs)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        return binomial_draws(broadcast_to(self.total_count, shape),
                              broadcast_to(self.probs, shape))  # fmt: skip

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        n, x = self.total_count, self.logits
        clamped = (P.maximum(x, 0.0) + x - P.minimum(x, 0.0)) * 0.5  # PyTorch's _clamp_by_zero
        normalizer = n * clamped + n * P.log1p(P.exp(-P.abs(x))) - P.lgamma(n + 1.0)
        return (value * x - P.lgamma(value + 1.0) - P.lgamma(n - value + 1.0)
                - normalizer)  # fmt: skip

    def _homogeneous_count(self, where: str) -> int:
        counts = self.total_count.numpy()
        if counts.size and counts.min() != counts.max():
            raise NotImplementedError(f"Binomial.{where}: an inhomogeneous total_count is not "
                                      "supported")  # fmt: skip
        return int(counts.max()) if counts.size else 0

    def entropy(self) -> Tensor:
        self._homogeneous_count("entropy")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -sum(P.exp(log_prob) * log_prob, 0)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        n = self._homogeneous_count("enumerate_support")
        values = np.arange(n + 1, dtype=self._param.dtype)
        out = Tensor._of(values.reshape((-1,) + (1,) * len(self._batch_shape)))
        return broadcast_to(out, (n + 1, *self._batch_shape)) if expand else out


class Geometric(_BinaryParametrized):
    """The number of failures before the first success of probability `probs`."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        name = _probs_or_logits("Geometric", probs, logits)
        (param,) = broadcast_all("Geometric", **{name: probs if name == "probs" else logits})
        self._set_param(name, param)
        super().__init__(param.shape, (), validate_args)
        if self._validate_args and name == "probs" and not param.is_symbolic:
            if not bool(np.all(param.numpy() > 0)):
                raise ValueError(f"Expected parameter probs (a tensor of shape {param.shape}) "
                                 f"of distribution {self!r} to be positive but found invalid "
                                 f"values:\n{param.numpy()}")  # fmt: skip

    @property
    def mean(self) -> Tensor:
        return 1.0 / self.probs - 1.0

    @property
    def mode(self) -> Tensor:
        return self.probs * 0.0

    @property
    def variance(self) -> Tensor:
        return (1.0 / self.probs - 1.0) / self.probs

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            p = self.probs.detach()
            u = P.maximum(random.uniform(shape, p.dtype), float(np.finfo(p.dtype).tiny))
            return P.floor(P.log(u) / P.log1p(-p))

    def log_prob(self, value: Any) -> Tensor:
        value, probs = broadcast_all("Geometric.log_prob", value=self._value(value),
                                     probs=self.probs)  # fmt: skip
        probs = P.where((probs == 1.0) & (value == 0.0), 0.0, probs)
        return value * P.log1p(-probs) + P.log(self.probs)

    def entropy(self) -> Tensor:
        x, p = self.logits, self.probs
        return (P.softplus(x) - x * p) / p  # binary cross-entropy with logits, over p


class NegativeBinomial(_BinaryParametrized):
    """Successes (of probability `probs`) before `total_count` failures: a Poisson whose rate
    is Gamma(total_count, exp(-logits)) distributed."""

    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}  # fmt: skip
    support = constraints.nonnegative_integer

    def __init__(self, total_count: Any, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        name = _probs_or_logits("NegativeBinomial", probs, logits)
        value = probs if name == "probs" else logits
        count, param = broadcast_all("NegativeBinomial", total_count=total_count,
                                     **{name: value})  # fmt: skip
        self.total_count = count
        self._set_param(name, param)
        super().__init__(param.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.total_count * P.exp(self.logits)

    @property
    def mode(self) -> Tensor:
        return P.maximum(P.floor((self.total_count - 1.0) * P.exp(self.logits)), 0.0)

    @property
    def variance(self) -> Tensor:
        return self.mean / P.sigmoid(-self.logits)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            rate = Gamma(self.total_count, P.exp(-self.logits), validate_args=False)
            return poisson_draws(rate.sample(sample_shape))

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        n, x = self.total_count, self.logits
        unnormalized = n * -P.softplus(x) + value * -P.softplus(-x)  # log sigmoid(-x), (x)
        normalization = -P.lgamma(n + value) + P.lgamma(value + 1.0) + P.lgamma(n)
        return unnormalized - P.where(n + value == 0.0, 0.0, normalization)


class Multinomial(Distribution):
    """Counts of `total_count` (an int) categorical draws over the last dimension's
    categories."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count: int = 1, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        if not isinstance(total_count, int | np.integer):
            raise NotImplementedError(
                "Multinomial: an inhomogeneous total_count (a tensor) is not supported, got "
                f"{type(total_count).__name__}"
            )
        self.total_count = int(total_count)
        self._categorical = Categorical(probs=probs, logits=logits)
        param_shape = self._categorical.param_shape
        super().__init__(param_shape[:-1], param_shape[-1:], validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(Multinomial, _instance)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, shape_of(batch_shape), self._event_shape, False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self) -> constraints.Constraint:
        return constraints.multinomial(self.total_count)

    logits = property(lambda self: self._categorical.logits)
    probs = property(lambda self: self._categorical.probs)
    param_shape = property(lambda self: self._categorical.param_shape)

    @property
    def mean(self) -> Tensor:
        return self.probs * float(self.total_count)

    @property
    def variance(self) -> Tensor:
        return self.probs * (1.0 - self.probs) * float(self.total_count)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        sample_shape = shape_of(sample_shape)
        with no_grad():
            drawn = self._categorical.sample((self.total_count, *sample_shape))
            k = self._event_shape[0]
            classes = Tensor._of(np.arange(k, dtype=np.int64))
            one_hot = (reshape(drawn, (*drawn.shape, 1)) == classes).astype(self.probs.dtype)
            return sum(one_hot, 0)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        logits, value = broadcast_all("Multinomial.log_prob", logits=self.logits, value=value)
        logits = P.where((value == 0.0) & (logits == -math.inf), 0.0, logits)
        log_factorial_n = P.lgamma(sum(value, -1) + 1.0)
        log_factorial_xs = sum(P.lgamma(value + 1.0), -1)
        return log_factorial_n - log_factorial_xs + sum(logits * value, -1)

    def entropy(self) -> Tensor:
        n = float(self.total_count)
        binomial = Binomial(float_tensor(n, self.probs.dtype), probs=self.probs,
                            validate_args=False)  # fmt: skip
        support = binomial.enumerate_support(expand=False)[1:]  # 1..n, then ones
        binomial_probs = P.exp(binomial.log_prob(support))
        weights = P.lgamma(support + 1.0)
        term2 = sum(binomial_probs * weights, (0, -1))
        return self._categorical.entropy() * n - math.lgamma(n + 1.0) + term2


__all__ = ["Binomial", "Geometric", "Multinomial", "NegativeBinomial", "Poisson"]

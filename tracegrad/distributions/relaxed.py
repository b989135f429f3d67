"""The Gumbel-softmax (concrete) relaxations: `RelaxedOneHotCategorical` and `RelaxedBernoulli`
draw points of the simplex (of [0, 1]) that approach one-hot vectors (0 or 1) as the
temperature falls, reparameterized, so gradients reach the logits through the draws."""

from __future__ import annotations

import math
from typing import Any

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.discrete import Bernoulli, Categorical
from tracegrad.distributions.distribution import (
    Distribution,
    clamp_probs,
    clipped,
    float_tensor,
    shape_of,
)
from tracegrad.frontend.creation import rand
from tracegrad.frontend.functions import broadcast_to
from tracegrad.frontend.reductions import logsumexp, sum
from tracegrad.frontend.tensor import Tensor


class RelaxedOneHotCategorical(Distribution):
    """softmax((logits + Gumbel noise) / temperature): event_shape (K,). `log_prob` is the
    concrete distribution's density on the simplex (PyTorch's)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        param = self._categorical._param
        self.temperature = float_tensor(temperature, param.dtype)
        super().__init__(param.shape[:-1], param.shape[-1:], validate_args)

    probs = property(lambda self: self._categorical.probs)
    logits = property(lambda self: self._categorical.logits)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        k = self._event_shape[0]
        logits = broadcast_to(self.logits, shape_of(batch_shape) + (k,))
        new = self._get_checked_instance(RelaxedOneHotCategorical, _instance)
        RelaxedOneHotCategorical.__init__(new, self.temperature, logits=logits, validate_args=False)
        return new

    def _log_rsample(self, sample_shape: Any) -> Tensor:
        """log of a draw: (logits + Gumbel) / temperature, normalized."""
        logits = self.logits
        u = clamp_probs(rand(self._extended_shape(sample_shape), dtype=logits.dtype))
        gumbels = -P.log(-P.log(u))
        scores = (logits + gumbels) / self.temperature
        return scores - logsumexp(scores, -1, keepdim=True)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return P.exp(self._log_rsample(sample_shape))

    def log_prob(self, value: Any) -> Tensor:
        log_value = P.log(self._value(value))
        k = self._event_shape[0]
        t = self.temperature
        log_scale = P.log(t) * float(k - 1) + math.lgamma(k)
        score = self.logits - log_value * t
        score = sum(score - logsumexp(score, -1, keepdim=True), -1)
        return score + log_scale - sum(log_value, -1)  # the density of exp(x): minus log|dy/dx|


class RelaxedBernoulli(Distribution):
    """sigmoid((logits + Logistic noise) / temperature), in (0, 1)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self._bernoulli = Bernoulli(probs, logits, validate_args=validate_args)
        param = self._bernoulli._param
        self.temperature = float_tensor(temperature, param.dtype)
        super().__init__(param.shape, (), validate_args)

    probs = property(lambda self: self._bernoulli.probs)
    logits = property(lambda self: self._bernoulli.logits)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        logits = broadcast_to(self.logits, shape_of(batch_shape))
        new = self._get_checked_instance(RelaxedBernoulli, _instance)
        RelaxedBernoulli.__init__(new, self.temperature, logits=logits, validate_args=False)
        return new

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        logits = self.logits
        u = clamp_probs(rand(self._extended_shape(sample_shape), dtype=logits.dtype))
        x = (P.log(u) - P.log1p(-u) + logits) / self.temperature
        return clipped(P.sigmoid(x))

    def log_prob(self, value: Any) -> Tensor:
        y = clipped(self._value(value))
        x = P.log(y) - P.log1p(-y)  # the logit the sigmoid took to y
        t = self.temperature
        diff = self.logits - x * t
        logistic = P.log(t) + diff - P.softplus(diff) * 2.0
        return logistic + P.softplus(-x) + P.softplus(x)  # minus log sigmoid'(x)


__all__ = ["RelaxedBernoulli", "RelaxedOneHotCategorical"]

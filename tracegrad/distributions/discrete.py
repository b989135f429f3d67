"""The discrete families: `Bernoulli`, `Categorical` (a policy's actions, a language model's
tokens) and `OneHotCategorical`, each made from `probs` or from `logits` (unnormalized log
probabilities); the other is computed when asked. Draws have no gradient (`has_rsample` is
False): policy gradients go through `log_prob`."""

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
    ExponentialFamily,
    broadcast_shapes,
    float_tensor,
    logits_to_probs,
    nan_like,
    probs_to_logits,
    shape_of,
)
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import broadcast_to, gather, permute, reshape, squeeze
from tracegrad.frontend.reductions import argmax, logsumexp, sum
from tracegrad.frontend.sampling import bernoulli, multinomial
from tracegrad.frontend.tensor import Tensor


def _probs_or_logits(where: str, probs: Any, logits: Any) -> tuple[str, Tensor]:
    if (probs is None) == (logits is None):
        raise ValueError(f"{where}: either probs or logits must be specified, but not both")
    return ("probs", float_tensor(probs)) if logits is None else ("logits", float_tensor(logits))


class Bernoulli(ExponentialFamily):
    """1 with probability `probs` (or sigmoid(`logits`)), else 0; samples in the parameter's
    dtype. `log_prob` is minus binary cross-entropy with logits, so it is stable at any
    logit."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        name, value = _probs_or_logits("Bernoulli", probs, logits)
        setattr(self, name, value)
        self._param, self._param_name = value, name
        super().__init__(value.shape, (), validate_args)

    @functools.cached_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits, is_binary=True)

    def _parameters(self) -> dict[str, Tensor]:
        return {self._param_name: self._param}

    @functools.cached_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs, is_binary=True)

    @property
    def param_shape(self) -> tuple:
        return self._batch_shape

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        p = self.probs
        return P.where(p == 0.5, math.nan, (p > 0.5).astype(p.dtype))

    @property
    def variance(self) -> Tensor:
        return self.probs * (1.0 - self.probs)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            return bernoulli(broadcast_to(self.probs, self._extended_shape(sample_shape)))

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        x = self.logits
        shape = broadcast_shapes("Bernoulli.log_prob", logits=x.shape, value=value.shape)
        x, t = broadcast_to(x, shape), broadcast_to(value.astype(x.dtype), shape)
        return -((1.0 - t) * x + P.softplus(-x))  # minus BCE with logits

    def entropy(self) -> Tensor:
        x, p = self.logits, self.probs
        return (1.0 - p) * x + P.softplus(-x)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        shape = (2,) + (1,) * len(self._batch_shape)
        values = Tensor._of(np.arange(2, dtype=self._param.dtype).reshape(shape))
        return broadcast_to(values, (2, *self._batch_shape)) if expand else values


class Categorical(Distribution):
    """Categories 0..K-1 with probabilities `probs` (normalized over the last dimension) or
    softmax(`logits`): batch_shape is the parameter's shape without its last dimension;
    samples and `log_prob`'s values are int64 indices. Draws come from `tracegrad.multinomial`
    (the counter-based random state)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        name, value = _probs_or_logits(type(self).__name__, probs, logits)
        if value.ndim < 1:
            raise ShapeError(
                f"{type(self).__name__}: {name} must be at least one-dimensional (the "
                f"categories along the last), got shape {value.shape}"
            )
        if name == "probs":
            self.probs = value / sum(value, -1, keepdim=True)
        else:
            self.logits = value - logsumexp(value, -1, keepdim=True)
        self._param, self._param_name = value, name
        self._num_events = value.shape[-1]
        super().__init__(value.shape[:-1], (), validate_args)

    @functools.cached_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits)

    def _parameters(self) -> dict[str, Tensor]:
        return {self._param_name: self._param}

    @functools.cached_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def param_shape(self) -> tuple:
        return self._param.shape

    @property
    def mean(self) -> Tensor:
        return nan_like(self._param, self._batch_shape)

    @property
    def mode(self) -> Tensor:
        return argmax(self.probs, -1)

    @property
    def variance(self) -> Tensor:
        return nan_like(self._param, self._batch_shape)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        sample_shape = shape_of(sample_shape)
        n = math.prod(sample_shape)
        with no_grad():
            probs_2d = reshape(self.probs, (-1, self._num_events))
            drawn = multinomial(probs_2d, n, replacement=True)  # (batch, n)
            return reshape(permute(drawn, (1, 0)), sample_shape + self._batch_shape)

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        if value.dtype.kind == "f":
            value = value.astype(np.int64)
        index = reshape(value, (*value.shape, 1))
        shape = broadcast_shapes(f"{type(self).__name__}.log_prob", value=index.shape,
                                 logits=self.logits.shape[:-1] + (1,))  # fmt: skip
        index = broadcast_to(index, shape)
        log_pmf = broadcast_to(self.logits, shape[:-1] + (self._num_events,))
        return squeeze(gather(log_pmf, -1, index), -1)

    def entropy(self) -> Tensor:
        logits = P.maximum(self.logits, float(np.finfo(self.logits.dtype).min))
        return -sum(logits * self.probs, -1)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        shape = (self._num_events,) + (1,) * len(self._batch_shape)
        values = Tensor._of(np.arange(self._num_events, dtype=np.int64).reshape(shape))
        return broadcast_to(values, (self._num_events, *self._batch_shape)) if expand else values

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._param_name}: {self._param.shape})"


class OneHotCategorical(Distribution):
    """A `Categorical` whose values are one-hot vectors (event_shape (K,)), in the parameter's
    dtype."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        param = self._categorical._param
        super().__init__(param.shape[:-1], param.shape[-1:], validate_args)

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def param_shape(self) -> tuple:
        return self._categorical.param_shape

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        return self._one_hot(argmax(self.probs, -1))

    @property
    def variance(self) -> Tensor:
        return self.probs * (1.0 - self.probs)

    def _one_hot(self, index: Tensor) -> Tensor:
        k = self._event_shape[0]
        classes = Tensor._of(np.arange(k, dtype=np.int64))
        return (reshape(index, (*index.shape, 1)) == classes).astype(self.probs.dtype)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        out = self._get_checked_instance(OneHotCategorical, _instance)
        out._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(out, shape_of(batch_shape), self._event_shape, False)
        return out

    def sample(self, sample_shape: Any = ()) -> Tensor:
        return self._one_hot(self._categorical.sample(sample_shape))

    def log_prob(self, value: Any) -> Tensor:
        value = self._value(value)
        return self._categorical.log_prob(argmax(value, -1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True) -> Tensor:
        k = self._event_shape[0]
        eye = np.eye(k, dtype=self.probs.dtype)
        values = Tensor._of(eye.reshape((k,) + (1,) * len(self._batch_shape) + (k,)))
        return broadcast_to(values, (k, *self._batch_shape, k)) if expand else values

    def __repr__(self) -> str:
        return f"OneHotCategorical({self._categorical!r})"


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """A `OneHotCategorical` whose `rsample` is the straight-through estimator (Bengio et al.,
    2013): the one-hot draw's value, the probabilities' gradient."""

    has_rsample = True

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(OneHotCategoricalStraightThrough, _instance)
        return super().expand(batch_shape, _instance=new)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        probs = self._categorical.probs
        return self.sample(sample_shape) + (probs - probs.detach())


__all__ = ["Bernoulli", "Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough"]

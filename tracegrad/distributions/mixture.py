"""`MixtureSameFamily`, PyTorch's: a mixture whose components are the last batch dimension of
one distribution (a Gaussian mixture is `MixtureSameFamily(Categorical(logits),
Independent(Normal(mu, sigma), 1))`). Its log density is a log-sum-exp over the components,
differentiable in the weights and in the components' parameters; its draws have no
gradient."""

from __future__ import annotations

from typing import Any

from tracegrad.distributions import constraints
from tracegrad.distributions.discrete import Categorical
from tracegrad.distributions.distribution import Distribution, shape_of
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import broadcast_to, reshape, squeeze, take_along_dim
from tracegrad.frontend.reductions import log_softmax, logsumexp, sum
from tracegrad.frontend.tensor import Tensor


class MixtureSameFamily(Distribution):
    """Components `component_distribution` (batch_shape (..., K)) mixed with the weights of
    `mixture_distribution` (a Categorical over K); batch_shape is the components' without K."""

    arg_constraints: dict[str, constraints.Constraint] = {}
    has_rsample = False

    def __init__(self, mixture_distribution: Categorical, component_distribution: Distribution,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError("MixtureSameFamily: mixture_distribution must be a Categorical, "
                             f"got {type(mixture_distribution).__name__}")  # fmt: skip
        if not isinstance(component_distribution, Distribution):
            name = type(component_distribution).__name__
            raise ValueError(f"MixtureSameFamily: component_distribution must be a "
                             f"Distribution, got {name}")  # fmt: skip
        mdbs, cdbs = mixture_distribution.batch_shape, component_distribution.batch_shape[:-1]
        for a, b in zip(reversed(mdbs), reversed(cdbs), strict=False):
            if a != 1 and b != 1 and a != b:
                raise ValueError(f"MixtureSameFamily: mixture_distribution.batch_shape {mdbs} "
                                 f"does not broadcast with component_distribution.batch_shape"
                                 f"[:-1] {cdbs}")  # fmt: skip
        km = mixture_distribution.logits.shape[-1]
        kc = component_distribution.batch_shape[-1] if component_distribution.batch_shape else 0
        if km != kc:
            raise ValueError(f"MixtureSameFamily: the mixture's {km} components are not the "
                             f"component_distribution's batch_shape[-1] ({kc})")  # fmt: skip
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        self._num_component = km
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(cdbs, component_distribution.event_shape, validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        batch_shape = shape_of(batch_shape)
        new = self._get_checked_instance(MixtureSameFamily, _instance)
        new._component_distribution = self._component_distribution.expand(
            batch_shape + (self._num_component,)
        )
        new._mixture_distribution = self._mixture_distribution.expand(batch_shape)
        new._num_component, new._event_ndims = self._num_component, self._event_ndims
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property
    def support(self) -> constraints.Constraint:
        return constraints.MixtureSameFamilyConstraint(self._component_distribution.support)

    mixture_distribution = property(lambda self: self._mixture_distribution)
    component_distribution = property(lambda self: self._component_distribution)

    @property
    def mean(self) -> Tensor:
        probs = self._pad_mixture_dimensions(self._mixture_distribution.probs)
        return sum(probs * self._component_distribution.mean, -1 - self._event_ndims)

    @property
    def variance(self) -> Tensor:
        probs = self._pad_mixture_dimensions(self._mixture_distribution.probs)
        components = self._component_distribution
        mean_cond_var = sum(probs * components.variance, -1 - self._event_ndims)
        spread = components.mean - self._pad(self.mean)
        return mean_cond_var + sum(probs * spread * spread, -1 - self._event_ndims)

    def cdf(self, x: Any) -> Tensor:
        cdf_x = self._component_distribution.cdf(self._pad(self._value(x, "cdf")))
        return sum(cdf_x * self._mixture_distribution.probs, -1)

    def log_prob(self, x: Any) -> Tensor:
        log_prob_x = self._component_distribution.log_prob(self._pad(self._value(x)))
        log_mix_prob = log_softmax(self._mixture_distribution.logits, -1)
        return logsumexp(log_prob_x + log_mix_prob, -1)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        sample_shape = shape_of(sample_shape)
        with no_grad():
            gather_dim = len(sample_shape) + len(self._batch_shape)
            es = self._event_shape
            mix = self._mixture_distribution.sample(sample_shape)
            mix_batch = self._mixture_distribution.batch_shape  # may broadcast to the batch
            ones = (1,) * (len(self._batch_shape) - len(mix_batch))
            mix = reshape(mix, sample_shape + ones + mix_batch)
            mix = broadcast_to(mix, sample_shape + self._batch_shape)
            components = self._component_distribution.sample(sample_shape)
            index = reshape(mix, mix.shape + (1,) * (len(es) + 1))
            index = broadcast_to(index, mix.shape + (1,) + es)
            return squeeze(take_along_dim(components, index, gather_dim), gather_dim)

    def _pad(self, x: Tensor) -> Tensor:
        """x with the component dimension put back (size 1) before the event."""
        d = x.ndim - self._event_ndims
        return reshape(x, x.shape[:d] + (1,) + x.shape[d:])

    def _pad_mixture_dimensions(self, x: Tensor) -> Tensor:
        dist_batch_ndims = len(self._batch_shape)
        cat_batch_ndims = len(self._mixture_distribution.batch_shape)
        pad_ndims = 0 if cat_batch_ndims == 1 else dist_batch_ndims - cat_batch_ndims
        xs = x.shape
        return reshape(x, xs[:-1] + (1,) * pad_ndims + xs[-1:] + (1,) * self._event_ndims)

    def __repr__(self) -> str:
        return (f"MixtureSameFamily(\n  {self._mixture_distribution!r},\n  "
                f"{self._component_distribution!r})")  # fmt: skip


__all__ = ["MixtureSameFamily"]

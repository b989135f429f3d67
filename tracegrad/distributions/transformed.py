"""`TransformedDistribution`: the distribution of f(X) for X of a base distribution and f a
chain of transforms, as PyTorch's. A tanh-squashed Gaussian policy (SAC) is
`TransformedDistribution(Normal(mu, std), [TanhTransform(cache_size=1)])`. PyTorch defines
several families this way (LogNormal, Gumbel, ...: `transformed_families`), and their
subclasses (pyro's) call `TransformedDistribution.__init__(self, base, transforms)`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    Distribution,
    Independent,
    float_tensor,
    shape_of,
    sum_rightmost,
)
from tracegrad.distributions.transforms import ComposeTransform, Transform
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.tensor import Tensor


class TransformedDistribution(Distribution):
    """The distribution of transforms(X), X ~ base_distribution: `rsample` transforms the
    base's draws (reparameterized when the base's are), `log_prob(y)` is the base's at x =
    inv(y) minus the log-determinants of the Jacobians. The base is expanded (or made
    Independent) when the transforms need more of its dimensions."""

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(self, base_distribution: Distribution, transforms: Any,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        if isinstance(transforms, Transform):
            transforms = [transforms]
        if not isinstance(transforms, list | tuple) or not all(
            isinstance(t, Transform) for t in transforms
        ):
            raise ValueError(
                "TransformedDistribution: transforms must be a Transform or a list of "
                f"Transforms, got {transforms!r}"
            )
        self.transforms = list(transforms)
        base_shape = base_distribution.batch_shape + base_distribution.event_shape
        base_event_dim = len(base_distribution.event_shape)
        transform = ComposeTransform(self.transforms)
        domain_dim, codomain_dim = transform.domain.event_dim, transform.codomain.event_dim
        if len(base_shape) < domain_dim:
            raise ValueError(f"TransformedDistribution: base_distribution needs a shape of at "
                             f"least {domain_dim} dimensions, got {base_shape}")  # fmt: skip
        forward_shape = transform.forward_shape(base_shape)
        expanded = transform.inverse_shape(forward_shape)
        if base_shape != expanded:
            base_distribution = base_distribution.expand(expanded[: len(expanded)
                                                                  - base_event_dim])  # fmt: skip
        if domain_dim > base_event_dim:
            base_distribution = Independent(base_distribution, domain_dim - base_event_dim)
        self.base_dist = base_distribution
        event_dim = max(codomain_dim, base_event_dim + codomain_dim - domain_dim)
        cut = len(forward_shape) - event_dim
        super().__init__(forward_shape[:cut], forward_shape[cut:], validate_args)

    def expand(self, batch_shape: Sequence[int], _instance: Any = None) -> Distribution:
        new = self._get_checked_instance(TransformedDistribution, _instance)
        batch_shape = shape_of(batch_shape)
        shape = batch_shape + self._event_shape
        for t in reversed(self.transforms):
            shape = t.inverse_shape(shape)
        base_batch = shape[: len(shape) - len(self.base_dist.event_shape)]
        new.base_dist = self.base_dist.expand(base_batch)
        new.transforms = self.transforms
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=False)
    def support(self) -> Any:
        if not self.transforms:
            return self.base_dist.support
        support = self.transforms[-1].codomain
        extra = len(self._event_shape) - support.event_dim
        return constraints.independent(support, extra) if extra > 0 else support

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for t in self.transforms:
                x = t(x)
            return x

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def log_prob(self, value: Any) -> Tensor:
        y = self._value(value)
        event_dim = len(self._event_shape)
        log_prob: Any = 0.0
        for t in reversed(self.transforms):
            x = t.inv(y)
            event_dim += t.domain.event_dim - t.codomain.event_dim
            term = t.log_abs_det_jacobian(x, y)
            log_prob = log_prob - sum_rightmost(term, event_dim - t.domain.event_dim)
            y = x
        base = self.base_dist.log_prob(y)
        return log_prob + sum_rightmost(base, event_dim - len(self.base_dist.event_shape))

    def _monotonize_cdf(self, value: Tensor) -> Tensor:
        """The cdf of a decreasing map is one minus the base's."""
        sign: Any = 1
        for t in self.transforms:
            sign = sign * t.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return (value - 0.5) * sign + 0.5

    def cdf(self, value: Any) -> Tensor:
        value = self._value(value, "cdf")
        for t in reversed(self.transforms):
            value = t.inv(value)
        return self._monotonize_cdf(self.base_dist.cdf(value))

    def icdf(self, value: Any) -> Tensor:
        value = value if isinstance(value, Tensor) else float_tensor(value)
        value = self.base_dist.icdf(self._monotonize_cdf(value))
        for t in self.transforms:
            value = t(value)
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_dist!r}, {self.transforms})"


__all__ = ["TransformedDistribution"]

"""Transforms and `TransformedDistribution`: the distribution of f(X) for X of a base
distribution and f a chain of invertible elementwise maps (`ExpTransform`,
`AffineTransform`, `SigmoidTransform`, `TanhTransform`, `ComposeTransform`), as PyTorch's.
A tanh-squashed Gaussian policy (SAC) is
`TransformedDistribution(Normal(mu, std), [TanhTransform(cache_size=1)])`: with the cache,
`log_prob` of the value `rsample` returned inverts nothing (atanh(+-1) would be infinite)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    Distribution,
    clipped,
    float_tensor,
    sum_rightmost,
)
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.tensor import Tensor


class Transform:
    """An invertible map y = t(x), `t.inv(y)` and log|dy/dx| (`log_abs_det_jacobian(x, y)`),
    elementwise over the last `event_dim` dimensions. `cache_size=1` remembers the last pair,
    so inverting the value just computed gives back its x exactly."""

    event_dim = 0
    bijective = True
    sign = 1
    domain: constraints.Constraint = constraints.real
    codomain: constraints.Constraint = constraints.real

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError(f"{type(self).__name__}: cache_size must be 0 or 1, not {cache_size}")
        self._cache_size = cache_size
        self._cached: tuple[Any, Any] | None = None

    def __call__(self, x: Tensor) -> Tensor:
        if self._cache_size and self._cached is not None and self._cached[0] is x:
            return self._cached[1]
        y = self._call(x)
        if self._cache_size:
            self._cached = (x, y)
        return y

    def _inv_call(self, y: Tensor) -> Tensor:
        if self._cache_size and self._cached is not None and self._cached[1] is y:
            return self._cached[0]
        x = self._inverse(y)
        if self._cache_size:
            self._cached = (x, y)
        return x

    @property
    def inv(self) -> _InverseTransform:
        return _InverseTransform(self)

    def _call(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _inverse(self, y: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no inverse")

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    def __init__(self, transform: Transform) -> None:
        super().__init__()
        self._inv = transform
        self.event_dim = transform.event_dim
        self.domain, self.codomain = transform.codomain, transform.domain

    def __call__(self, y: Tensor) -> Tensor:
        return self._inv._inv_call(y)

    def _inv_call(self, x: Tensor) -> Tensor:
        return self._inv(x)

    @property
    def inv(self) -> Transform:  # type: ignore[override]
        return self._inv

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -self._inv.log_abs_det_jacobian(y, x)


class ExpTransform(Transform):
    codomain = constraints.positive

    def _call(self, x: Tensor) -> Tensor:
        return P.exp(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return P.log(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return x


class AffineTransform(Transform):
    """y = loc + scale * x (`event_dim` dimensions of one event)."""

    def __init__(self, loc: Any, scale: Any, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.loc, self.scale, self.event_dim = loc, scale, event_dim

    def _call(self, x: Tensor) -> Tensor:
        return x * self.scale + self.loc

    def _inverse(self, y: Tensor) -> Tensor:
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        scale = float_tensor(self.scale, x.dtype)
        out = P.log(P.abs(scale)) + x * 0.0  # broadcast to x's shape
        return sum_rightmost(out, self.event_dim)

    def __repr__(self) -> str:
        return f"AffineTransform(event_dim={self.event_dim})"


class SigmoidTransform(Transform):
    """y = sigmoid(x), kept in [tiny, 1 - eps] as PyTorch's."""

    codomain = constraints.unit_interval

    def _call(self, x: Tensor) -> Tensor:
        return clipped(P.sigmoid(x))

    def _inverse(self, y: Tensor) -> Tensor:
        y = clipped(y)
        return P.log(y) - P.log1p(-y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -P.softplus(-x) - P.softplus(x)


class TanhTransform(Transform):
    """y = tanh(x); log|dy/dx| = 2 (log 2 - x - softplus(-2x)), stable for large |x|."""

    codomain = constraints.interval(-1.0, 1.0)

    def _call(self, x: Tensor) -> Tensor:
        return P.tanh(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return P.arctanh(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return (math.log(2.0) - x - P.softplus(x * -2.0)) * 2.0


class ComposeTransform(Transform):
    """The transforms applied in order: parts[0] first."""

    def __init__(self, parts: Sequence[Transform], cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.parts = list(parts)
        self.event_dim = max((t.event_dim for t in self.parts), default=0)

    def _call(self, x: Tensor) -> Tensor:
        for t in self.parts:
            x = t(x)
        return x

    def _inverse(self, y: Tensor) -> Tensor:
        for t in reversed(self.parts):
            y = t.inv(y)
        return y

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        total: Any = 0.0
        for t in self.parts:
            z = t(x)
            total = total + sum_rightmost(t.log_abs_det_jacobian(x, z),
                                          self.event_dim - t.event_dim)  # fmt: skip
            x = z
        return total


class TransformedDistribution(Distribution):
    """The distribution of transforms(X), X ~ base_distribution: `rsample` transforms the
    base's draws (reparameterized when the base's are), `log_prob(y)` is the base's at x =
    inv(y) minus the log-determinants of the Jacobians."""

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(self, base_distribution: Distribution, transforms: Any,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self.base_dist = base_distribution
        self.transforms = [transforms] if isinstance(transforms, Transform) else list(transforms)
        if not all(isinstance(t, Transform) for t in self.transforms):
            raise TypeError("TransformedDistribution: transforms must be Transforms, got "
                            f"{[type(t).__name__ for t in self.transforms]}")  # fmt: skip
        shape = base_distribution.batch_shape + base_distribution.event_shape
        event_dim = max([len(base_distribution.event_shape),
                         *(t.event_dim for t in self.transforms)])  # fmt: skip
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def support(self) -> Any:  # type: ignore[override]
        return self.transforms[-1].codomain if self.transforms else self.base_dist.support

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for t in self.transforms:
                x = t(x)
            return x

    def log_prob(self, value: Any) -> Tensor:
        y = value if isinstance(value, Tensor) else self._value(value)
        event_dim = len(self._event_shape)
        log_prob: Any = 0.0
        for t in reversed(self.transforms):
            x = t.inv(y)
            log_prob = log_prob - sum_rightmost(t.log_abs_det_jacobian(x, y),
                                                event_dim - t.event_dim)  # fmt: skip
            y = x
        base = self.base_dist.log_prob(y)
        return log_prob + sum_rightmost(base, event_dim - len(self.base_dist.event_shape))

    def __repr__(self) -> str:
        return f"TransformedDistribution({self.base_dist!r}, {self.transforms})"


__all__ = ["AffineTransform", "ComposeTransform", "ExpTransform", "SigmoidTransform",
           "TanhTransform", "Transform", "TransformedDistribution"]  # fmt: skip

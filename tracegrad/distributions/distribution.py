"""`Distribution`, the base of PyTorch's distributions, `Independent`, and what the families
share: parameters broadcast together (Python numbers take the tensors' dtype), the shape a draw
has, the checks `validate_args` asks for, probabilities to logits and back.

Everything is tensor ops, so gradients flow to the parameters (`log_prob`, `entropy`, `rsample`)
and a traced step computes the same; draws come from tracegrad's counter-based random state,
so a traced step draws afresh at every call and draws what an eager run with the same seed
draws."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.distributions import constraints
from tracegrad.distributions.utils import lazy_property
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import astype, broadcast_to
from tracegrad.frontend.reductions import softmax, sum
from tracegrad.frontend.tensor import Size, Tensor, get_default_dtype


def float_tensor(value: Any, dtype: Any = None) -> Tensor:
    """`value` as a float tensor: a tensor or a float ndarray keeps its float dtype (ints become
    `dtype`), a Python number or list becomes `dtype` (the default dtype when None)."""
    dtype = np.dtype(get_default_dtype() if dtype is None else dtype)
    if isinstance(value, np.ndarray):
        value = Tensor._of(value)
    if isinstance(value, Tensor):
        return value if value.dtype.kind == "f" else astype(value, dtype)
    return Tensor._of(np.asarray(value, dtype))


def broadcast_shapes(where: str, **shapes: tuple) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        named = [f"{name} {shape}" for name, shape in shapes.items()]
        listed = ", ".join(named[:-1]) + " and " + named[-1]
        raise ShapeError(f"{where}: the shapes of {listed} do not broadcast") from None


def broadcast_all(where: str, **values: Any) -> list[Tensor]:
    """The parameters as float tensors of one shape: Python numbers take the first tensor's
    dtype (the default dtype if none is a tensor), as PyTorch's."""
    values = {k: Tensor._of(v) if isinstance(v, np.ndarray) else v for k, v in values.items()}
    first = next((v for v in values.values() if isinstance(v, Tensor) and v.dtype.kind == "f"),
                 None)  # fmt: skip
    dtype = None if first is None else first.dtype
    tensors = {name: float_tensor(v, dtype) for name, v in values.items()}
    shape = broadcast_shapes(where, **{name: t.shape for name, t in tensors.items()})
    return [t if t.shape == shape else broadcast_to(t, shape) for t in tensors.values()]


def sum_rightmost(x: Tensor, n: int) -> Tensor:
    """x summed over its last n dimensions."""
    return sum(x, tuple(range(-n, 0))) if n > 0 else x


def clamp_probs(probs: Tensor) -> Tensor:
    """Probabilities kept eps (the dtype's) away from 0 and 1."""
    eps = float(np.finfo(probs.dtype).eps)
    return P.minimum(P.maximum(probs, eps), 1.0 - eps)


def clipped(y: Tensor) -> Tensor:
    """y in [tiny, 1 - eps] (the bounds of PyTorch's sigmoid transform)."""
    info = np.finfo(y.dtype)
    return P.minimum(P.maximum(y, float(info.tiny)), 1.0 - float(info.eps))


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    p = clamp_probs(probs)
    return P.log(p) - P.log1p(-p) if is_binary else P.log(p)


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    return P.sigmoid(logits) if is_binary else softmax(logits, -1)


def shape_of(sample_shape: Any) -> tuple:
    if isinstance(sample_shape, int | np.integer):
        return (int(sample_shape),)
    return tuple(int(d) for d in sample_shape)


def nan_like(x: Tensor, shape: Sequence[int]) -> Tensor:
    return Tensor._of(np.full(tuple(shape), np.nan, x.dtype))


class Distribution:
    """PyTorch's `torch.distributions.Distribution`: a batch of distributions (`batch_shape`)
    over events of `event_shape`. `sample(sample_shape)` draws sample_shape + batch_shape +
    event_shape values without gradient; `rsample` draws them reparameterized (differentiable in
    the parameters) where `has_rsample`. `validate_args` (default on, as PyTorch's; see
    `set_default_validate_args`) checks the parameters on construction and `log_prob`'s value,
    where they are concrete (not inside a traced step)."""

    has_rsample = False
    has_enumerate_support = False
    arg_constraints: dict[str, constraints.Constraint] = {}
    support: Any = None
    _validate_args = True

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        if value not in (True, False):
            raise ValueError(f"set_default_validate_args: expected True or False, got {value!r}")
        Distribution._validate_args = value

    def __init__(self, batch_shape: Sequence[int] = (), event_shape: Sequence[int] = (),
                 validate_args: bool | None = None) -> None:  # fmt: skip
        self._batch_shape = tuple(batch_shape)
        self._event_shape = tuple(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            self._check_parameters()

    def _check_parameters(self) -> None:
        for name, constraint in self.arg_constraints.items():
            value = self._parameter(name)
            if constraints.is_dependent(constraint) or not isinstance(value, Tensor):
                continue
            if value.is_symbolic:
                continue
            if not bool(np.all(constraint.test(value.numpy()))):
                raise ValueError(
                    f"Expected parameter {name} (a tensor of shape {value.shape}) of "
                    f"distribution {self!r} to satisfy the constraint {constraint}, but found "
                    f"invalid values:\n{value.numpy()}"
                )

    @property
    def batch_shape(self) -> Size:  # torch.Size, as PyTorch's (gpytorch: `.numel()`)
        return Size(self._batch_shape)

    @property
    def event_shape(self) -> Size:
        return Size(self._event_shape)

    def _extended_shape(self, sample_shape: Any = ()) -> Size:
        return Size(shape_of(sample_shape) + self._batch_shape + self._event_shape)

    def expand(self, batch_shape: Sequence[int], _instance: Any = None) -> Distribution:
        """The distribution with its parameters broadcast to `batch_shape` (the parameters it
        was made from, each keeping its event dimensions). A subclass's `expand` passes the
        bare instance to fill as `_instance` (PyTorch's protocol, which pyro's classes use)."""
        batch_shape, cut = shape_of(batch_shape), len(self._batch_shape)
        params = {name: broadcast_to(value, batch_shape + value.shape[cut:])
                  for name, value in self._parameters().items()}  # fmt: skip
        cls = _constructor(type(self))
        new = self._get_checked_instance(cls, _instance)
        cls.__init__(new, **params, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _get_checked_instance(self, cls: type, _instance: Any = None) -> Any:
        """`_instance`, or a bare instance of type(self) for `expand` to fill: refused for a
        subclass of `cls` with its own __init__ (its expand must be its own), as PyTorch's."""
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {type(self).__name__} of {cls.__name__} that defines a custom "
                "__init__ method must also define a custom .expand() method."
            )
        return self.__new__(type(self)) if _instance is None else _instance

    def _validate_sample(self, value: Any) -> None:
        """PyTorch's check of a value's shape and support (raises when it fails)."""
        self._value(value)

    def _parameters(self) -> dict[str, Tensor]:
        """The parameters it was made from, by the constructor's keywords."""
        return {name: value for name in self.arg_constraints
                if isinstance(value := self._parameter(name), Tensor)}  # fmt: skip

    def _parameter(self, name: str) -> Any:
        """The parameter `name`: stored, or a property (LogNormal's loc is its base's); None
        when it would be computed lazily from another (probs from logits)."""
        if name in self.__dict__:
            return self.__dict__[name]
        lazy = (functools.cached_property, lazy_property)
        if isinstance(getattr(type(self), name, None), lazy):
            return None
        return getattr(self, name, None)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        raise NotImplementedError(
            f"{type(self).__name__} has no reparameterized sample (rsample): use sample()"
        )

    def sample_n(self, n: int) -> Tensor:
        return self.sample((n,))

    def log_prob(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.log_prob")

    def cdf(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.cdf is not provided by tracegrad")

    def icdf(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.icdf is not provided by tracegrad")

    def entropy(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.entropy")

    def enumerate_support(self, expand: bool = True) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no finite support to enumerate")

    def perplexity(self) -> Tensor:
        return P.exp(self.entropy())

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.mean")

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.mode")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.variance")

    @property
    def stddev(self) -> Tensor:
        return P.sqrt(self.variance)

    def _value(self, value: Any, where: str = "log_prob") -> Tensor:
        """`log_prob`'s (or `where`'s) argument as a tensor (a Python number in the parameters'
        dtype), checked when validating: its shape must broadcast with batch_shape +
        event_shape, and (when concrete) it must lie in the support."""
        dtype = next((v.dtype for v in vars(self).values() if isinstance(v, Tensor)
                      and v.dtype.kind == "f"), None)  # fmt: skip
        value = value if isinstance(value, Tensor) else float_tensor(value, dtype)
        if not self._validate_args:
            return value
        name, n = type(self).__name__, len(self._event_shape)
        if n and value.shape[value.ndim - n :] != self._event_shape:
            raise ShapeError(f"{name}.{where}: the rightmost dimensions of value {value.shape} "
                             f"must be the event shape {self._event_shape}")  # fmt: skip
        expected = self._batch_shape + self._event_shape
        for i, j in zip(reversed(value.shape), reversed(expected), strict=False):
            if i != 1 and j != 1 and i != j:
                raise ShapeError(f"{name}.{where}: value {value.shape} does not broadcast with "
                                 f"batch_shape + event_shape {expected}")  # fmt: skip
        support = self.support
        if support is not None and not value.is_symbolic and not constraints.is_dependent(support):
            if not bool(np.all(support.test(value.numpy()))):
                raise ValueError(
                    f"{name}.{where}: expected value argument (a tensor of shape "
                    f"{value.shape}) to be within the support ({support}) of {self!r}, but "
                    f"found invalid values:\n{value.numpy()}"
                )
        return value

    def __repr__(self) -> str:
        args = ", ".join(f"{k}: {v.shape}" if v.ndim or v.is_symbolic else f"{k}: {v.numpy()}"
                         for k, v in self._parameters().items())  # fmt: skip
        return f"{type(self).__name__}({args})"


def _constructor(cls: type) -> type:
    """The nearest of tracegrad's classes in cls's bases: the one whose __init__ takes the
    parameters `_parameters` names (cls may be a user's subclass, with its own __init__)."""
    return next(c for c in cls.__mro__ if c.__module__.startswith("tracegrad.distributions."))


class ExponentialFamily(Distribution):
    """PyTorch's base of the exponential families (a marker here: entropies are each family's
    own closed form)."""


class Independent(Distribution):
    """The last `reinterpreted_batch_ndims` batch dimensions of `base_distribution` taken as
    event dimensions: `log_prob` and `entropy` sum over them (a diagonal Gaussian is
    `Independent(Normal(mu, std), 1)`)."""

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int,
                 validate_args: bool | None = None) -> None:  # fmt: skip
        n = int(reinterpreted_batch_ndims)
        batch = base_distribution.batch_shape
        if n > len(batch):
            raise ShapeError(
                f"Independent: reinterpreted_batch_ndims {n} is more than the base "
                f"distribution's batch dimensions {batch}"
            )
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = n
        cut = len(batch) - n
        super().__init__(batch[:cut], batch[cut:] + base_distribution.event_shape, validate_args)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def has_enumerate_support(self) -> bool:  # type: ignore[override]
        return False if self.reinterpreted_batch_ndims else self.base_dist.has_enumerate_support

    @property
    def support(self) -> Any:  # type: ignore[override]
        base = self.base_dist.support
        n = self.reinterpreted_batch_ndims
        return constraints.independent(base, n) if n and base is not None else base

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    def expand(self, batch_shape: Sequence[int], _instance: Any = None) -> Distribution:
        event = self._event_shape[: self.reinterpreted_batch_ndims]
        base = self.base_dist.expand(shape_of(batch_shape) + event)
        new = self._get_checked_instance(Independent, _instance)
        Independent.__init__(new, base, self.reinterpreted_batch_ndims, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape: Any = ()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        return sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        if self.reinterpreted_batch_ndims:
            raise NotImplementedError("Independent: enumerating over an event is not provided")
        return self.base_dist.enumerate_support(expand)

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

__all__ = ["Distribution", "ExponentialFamily", "Independent"]

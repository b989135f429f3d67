"""PyTorch's `torch.distributions.transforms`: invertible maps y = t(x) with log|det dy/dx|,
which `TransformedDistribution` pushes a base distribution through, and which
`constraint_registry` uses to map unconstrained parameters into a constraint's set.

Each transform says which set it maps (`domain`, `codomain`, with their `event_dim`s), whether it
is `bijective`, the `sign` of its derivative (the elementwise ones), and how it changes a shape
(`forward_shape`, `inverse_shape`). `cache_size=1` remembers the last (x, y) pair, so inverting a
value just computed gives back its x exactly: a tanh-squashed Gaussian policy (SAC) scores its
saturated draws this way (atanh(+-1) would be infinite). The matrix and simplex transforms are
in `matrix_transforms`."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    broadcast_all,
    broadcast_shapes,
    clipped,
    float_tensor,
    shape_of,
    sum_rightmost,
)
from tracegrad.distributions.utils import lazy_property
from tracegrad.frontend.functions import broadcast_to, cat, narrow, reshape, select, stack
from tracegrad.frontend.tensor import Tensor


class Transform:
    """An invertible map y = t(x), `t.inv` and log|dy/dx| (`log_abs_det_jacobian(x, y)`), over
    events of `domain.event_dim` dimensions. Subclasses give `_call`, `_inverse` and the
    log-determinant; `cache_size=1` remembers the last pair."""

    bijective = False
    domain: constraints.Constraint = constraints.real
    codomain: constraints.Constraint = constraints.real

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError(f"{type(self).__name__}: cache_size must be 0 or 1, not {cache_size}")
        self._cache_size = cache_size
        self._inv: Transform | None = None
        self._cached_x_y: tuple[Any, Any] = (None, None)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_inv": None}

    @property
    def event_dim(self) -> int:
        if self.domain.event_dim == self.codomain.event_dim:
            return self.domain.event_dim
        raise ValueError("Please use either .domain.event_dim or .codomain.event_dim")

    @property
    def inv(self) -> Transform:
        """The inverse transform (`t.inv.inv is t`)."""
        if self._inv is None:
            self._inv = _InverseTransform(self)
        return self._inv

    @property
    def sign(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.sign")

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        if type(self).__init__ is Transform.__init__:
            return type(self)(cache_size=cache_size)
        raise NotImplementedError(f"{type(self).__name__}.with_cache is not implemented")

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __call__(self, x: Tensor) -> Tensor:
        if not self._cache_size:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old
        y = self._call(x)
        self._cached_x_y = (x, y)
        return y

    def _inv_call(self, y: Tensor) -> Tensor:
        if not self._cache_size:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old
        x = self._inverse(y)
        self._cached_x_y = (x, y)
        return x

    def _call(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}._call")

    def _inverse(self, y: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no inverse")

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.log_abs_det_jacobian")

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        return tuple(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple:
        return tuple(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    """t.inv: t's maps swapped (sharing t's cache)."""

    def __init__(self, transform: Transform) -> None:
        super().__init__(cache_size=transform._cache_size)
        self._inv = transform

    domain = property(lambda self: self._inv.codomain)  # type: ignore[assignment]
    codomain = property(lambda self: self._inv.domain)  # type: ignore[assignment]
    bijective = property(lambda self: self._inv.bijective)  # type: ignore[assignment]
    sign = property(lambda self: self._inv.sign)  # type: ignore[assignment]

    @property
    def inv(self) -> Transform:
        return self._inv

    def with_cache(self, cache_size: int = 1) -> Transform:
        return self._inv.with_cache(cache_size).inv

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    __hash__ = object.__hash__

    def __call__(self, x: Tensor) -> Tensor:
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -self._inv.log_abs_det_jacobian(y, x)

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple:
        return self._inv.forward_shape(shape)

    def __repr__(self) -> str:
        return f"_InverseTransform({self._inv!r})"


def _lifted(constraint: constraints.Constraint, event_dim: int) -> constraints.Constraint:
    """constraint over event_dim dimensions (independent over the extra ones)."""
    extra = event_dim - constraint.event_dim
    return constraints.independent(constraint, extra) if extra > 0 else constraint


class ComposeTransform(Transform):
    """The transforms applied in order: parts[0] first. `ComposeTransform([])` is the
    identity."""

    def __init__(self, parts: Sequence[Transform], cache_size: int = 0) -> None:
        parts = list(parts)
        if cache_size:
            parts = [p.with_cache(cache_size) for p in parts]
        super().__init__(cache_size)
        self.parts = parts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        if not self.parts:
            return constraints.real
        event_dim = self.parts[-1].codomain.event_dim
        for part in reversed(self.parts):
            event_dim += part.domain.event_dim - part.codomain.event_dim
            event_dim = max(event_dim, part.domain.event_dim)
        return _lifted(self.parts[0].domain, event_dim)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        if not self.parts:
            return constraints.real
        event_dim = self.parts[0].domain.event_dim
        for part in self.parts:
            event_dim += part.codomain.event_dim - part.domain.event_dim
            event_dim = max(event_dim, part.codomain.event_dim)
        return _lifted(self.parts[-1].codomain, event_dim)

    @lazy_property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(p.bijective for p in self.parts)

    @lazy_property
    def sign(self) -> Any:  # type: ignore[override]
        sign: Any = 1
        for p in self.parts:
            sign = sign * p.sign
        return sign

    @property
    def inv(self) -> Transform:
        if self._inv is None:
            inverse = ComposeTransform([p.inv for p in reversed(self.parts)])
            inverse._inv = self
            self._inv = inverse
        return self._inv

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ComposeTransform(self.parts, cache_size=cache_size)

    def __call__(self, x: Tensor) -> Tensor:
        for part in self.parts:
            x = part(x)
        return x

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        if not self.parts:
            return x * 0.0
        xs = [x]
        for part in self.parts[:-1]:
            xs.append(part(xs[-1]))
        xs.append(y)
        total: Any = 0.0
        event_dim = self.domain.event_dim
        for part, a, b in zip(self.parts, xs[:-1], xs[1:], strict=True):
            term = part.log_abs_det_jacobian(a, b)
            total = total + sum_rightmost(term, event_dim - part.domain.event_dim)
            event_dim += part.codomain.event_dim - part.domain.event_dim
        return total

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        for part in self.parts:
            shape = part.forward_shape(shape)
        return tuple(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple:
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return tuple(shape)

    def __repr__(self) -> str:
        return "ComposeTransform(\n    " + ",\n    ".join(map(repr, self.parts)) + "\n)"


identity_transform = ComposeTransform([])


class IndependentTransform(Transform):
    """`base_transform` with its last `reinterpreted_batch_ndims` batch dimensions taken into
    the event: the log-determinant sums over them."""

    def __init__(self, base_transform: Transform, reinterpreted_batch_ndims: int,
                 cache_size: int = 0) -> None:  # fmt: skip
        super().__init__(cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return IndependentTransform(self.base_transform, self.reinterpreted_batch_ndims,
                                    cache_size=cache_size)  # fmt: skip

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.independent(self.base_transform.domain,
                                       self.reinterpreted_batch_ndims)  # fmt: skip

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.independent(self.base_transform.codomain,
                                       self.reinterpreted_batch_ndims)  # fmt: skip

    bijective = property(lambda self: self.base_transform.bijective)  # type: ignore[assignment]
    sign = property(lambda self: self.base_transform.sign)  # type: ignore[assignment]

    def _call(self, x: Tensor) -> Tensor:
        if x.ndim < self.domain.event_dim:
            raise ValueError("IndependentTransform: too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y: Tensor) -> Tensor:
        if y.ndim < self.codomain.event_dim:
            raise ValueError("IndependentTransform: too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        term = self.base_transform.log_abs_det_jacobian(x, y)
        return sum_rightmost(term, self.reinterpreted_batch_ndims)

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple:
        return self.base_transform.inverse_shape(shape)

    def __repr__(self) -> str:
        return f"IndependentTransform({self.base_transform!r}, {self.reinterpreted_batch_ndims})"


class ReshapeTransform(Transform):
    """Events of `in_shape` reshaped to `out_shape` (the same number of elements); volume is
    kept, so the log-determinant is 0."""

    bijective = True

    def __init__(self, in_shape: Sequence[int], out_shape: Sequence[int],
                 cache_size: int = 0) -> None:  # fmt: skip
        self.in_shape, self.out_shape = shape_of(in_shape), shape_of(out_shape)
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            raise ValueError(f"ReshapeTransform: in_shape {self.in_shape} and out_shape "
                             f"{self.out_shape} have different numbers of elements")  # fmt: skip
        super().__init__(cache_size)

    domain = property(lambda self: constraints.independent(constraints.real, len(self.in_shape)))
    codomain = property(lambda self: constraints.independent(constraints.real,
                                                             len(self.out_shape)))  # fmt: skip

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ReshapeTransform(self.in_shape, self.out_shape, cache_size=cache_size)

    def _call(self, x: Tensor) -> Tensor:
        return reshape(x, x.shape[: x.ndim - len(self.in_shape)] + self.out_shape)

    def _inverse(self, y: Tensor) -> Tensor:
        return reshape(y, y.shape[: y.ndim - len(self.out_shape)] + self.in_shape)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        batch = x.shape[: x.ndim - len(self.in_shape)]
        return Tensor._of(np.zeros(batch, x.dtype))

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        return _reshaped(tuple(shape), self.in_shape, self.out_shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple:
        return _reshaped(tuple(shape), self.out_shape, self.in_shape)


def _reshaped(shape: tuple, event: tuple, new_event: tuple) -> tuple:
    cut = len(shape) - len(event)
    if cut < 0 or shape[cut:] != event:
        raise ValueError(f"ReshapeTransform: shape {shape} does not end with {event}")
    return shape[:cut] + new_event


class ExpTransform(Transform):
    codomain = constraints.positive
    bijective = True
    sign = 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExpTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return P.exp(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return P.log(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return x


class PowerTransform(Transform):
    """y = x ** exponent on the positive reals."""

    domain = constraints.positive
    codomain = constraints.positive
    bijective = True

    def __init__(self, exponent: Any, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        (self.exponent,) = broadcast_all("PowerTransform", exponent=exponent)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return PowerTransform(self.exponent, cache_size=cache_size)

    @lazy_property
    def sign(self) -> Tensor:  # type: ignore[override]
        return P.sign(self.exponent)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PowerTransform):
            return False
        return bool(np.all(self.exponent.numpy() == other.exponent.numpy()))

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return x**self.exponent

    def _inverse(self, y: Tensor) -> Tensor:
        return y ** (1.0 / self.exponent)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return P.log(P.abs(self.exponent * y / x))

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        return broadcast_shapes("PowerTransform", x=tuple(shape), exponent=self.exponent.shape)

    inverse_shape = forward_shape


class SigmoidTransform(Transform):
    """y = sigmoid(x), kept in [tiny, 1 - eps] as PyTorch's."""

    codomain = constraints.unit_interval
    bijective = True
    sign = 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SigmoidTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return clipped(P.sigmoid(x))

    def _inverse(self, y: Tensor) -> Tensor:
        y = clipped(y)
        return P.log(y) - P.log1p(-y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -P.softplus(-x) - P.softplus(x)


class SoftplusTransform(Transform):
    """y = log(1 + exp(x)); the inverse is x = y + log(1 - exp(-y)), stable for large y."""

    codomain = constraints.positive
    bijective = True
    sign = 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SoftplusTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return P.softplus(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return P.log(-P.expm1(-y)) + y

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -P.softplus(-x)


class TanhTransform(Transform):
    """y = tanh(x); log|dy/dx| = 2 (log 2 - x - softplus(-2x)), stable for large |x|."""

    codomain = constraints.interval(-1.0, 1.0)
    bijective = True
    sign = 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TanhTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return P.tanh(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return P.arctanh(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return (math.log(2.0) - x - P.softplus(x * -2.0)) * 2.0


class AbsTransform(Transform):
    """y = |x|: not bijective; its `inv` is the identity (a pseudo-inverse)."""

    codomain = constraints.positive

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AbsTransform)

    __hash__ = object.__hash__

    def _call(self, x: Tensor) -> Tensor:
        return P.abs(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return y


class AffineTransform(Transform):
    """y = loc + scale * x, over events of `event_dim` dimensions."""

    bijective = True

    def __init__(self, loc: Any, scale: Any, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.loc, self.scale, self._event_dim = loc, scale, event_dim

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return self._event_dim

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return _lifted(constraints.real, self._event_dim)

    codomain = domain  # type: ignore[assignment]

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return AffineTransform(self.loc, self.scale, self._event_dim, cache_size=cache_size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AffineTransform):
            return False
        same = [np.all(_array(a) == _array(b))
                for a, b in ((self.loc, other.loc), (self.scale, other.scale))]  # fmt: skip
        return bool(all(same))

    __hash__ = object.__hash__

    @property
    def sign(self) -> Any:  # type: ignore[override]
        if isinstance(self.scale, numbers.Real):
            return 1 if self.scale > 0 else -1 if self.scale < 0 else 0
        return P.sign(self.scale)

    def _call(self, x: Tensor) -> Tensor:
        return x * self.scale + self.loc

    def _inverse(self, y: Tensor) -> Tensor:
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        scale = float_tensor(self.scale, x.dtype)
        out = P.log(P.abs(scale))
        shape = broadcast_shapes("AffineTransform", x=x.shape, scale=scale.shape)
        return sum_rightmost(broadcast_to(out, shape), self._event_dim)

    def forward_shape(self, shape: Sequence[int]) -> tuple:
        return broadcast_shapes("AffineTransform", x=tuple(shape), loc=np.shape(_array(self.loc)),
                                scale=np.shape(_array(self.scale)))  # fmt: skip

    inverse_shape = forward_shape

    def __repr__(self) -> str:
        return f"AffineTransform(event_dim={self._event_dim})"


def _array(value: Any) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


class CumulativeDistributionTransform(Transform):
    """y = distribution.cdf(x), onto the unit interval (a copula's marginal); the
    log-determinant is the density."""

    bijective = True
    codomain = constraints.unit_interval
    sign = 1

    def __init__(self, distribution: Any, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.distribution = distribution

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return self.distribution.support

    def _call(self, x: Tensor) -> Tensor:
        return self.distribution.cdf(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return self.distribution.log_prob(x)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CumulativeDistributionTransform(self.distribution, cache_size=cache_size)


def _check_dim(where: str, x: Tensor, dim: int, size: int) -> None:
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"{where}: dim {dim} is out of range for a tensor of {x.ndim} dims")
    if x.shape[dim] != size:
        raise ValueError(f"{where}: size {x.shape[dim]} along dim {dim} should be {size}")


class CatTransform(Transform):
    """`tseq[i]` applied to the i-th piece of `lengths[i]` entries along `dim` (as torch.cat
    joins them)."""

    def __init__(self, tseq: Sequence[Transform], dim: int = 0,
                 lengths: Sequence[int] | None = None, cache_size: int = 0) -> None:  # fmt: skip
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("CatTransform: every element of tseq must be a Transform")
        tseq = [t.with_cache(cache_size) for t in tseq] if cache_size else list(tseq)
        super().__init__(cache_size)
        self.transforms, self.dim = tseq, dim
        self.lengths = [1] * len(tseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise ValueError(f"CatTransform: {len(self.lengths)} lengths for "
                             f"{len(self.transforms)} transforms")  # fmt: skip

    @lazy_property
    def event_dim(self) -> int:  # type: ignore[override]
        return max(t.event_dim for t in self.transforms)

    @lazy_property
    def length(self) -> int:
        return sum(self.lengths)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    def _pieces(self, x: Tensor) -> list[Tensor]:
        _check_dim("CatTransform", x, self.dim, self.length)
        starts = np.cumsum([0, *self.lengths[:-1]])
        return [narrow(x, self.dim, int(s), n) for s, n in zip(starts, self.lengths, strict=True)]

    def _call(self, x: Tensor) -> Tensor:
        return cat([t(p) for t, p in zip(self.transforms, self._pieces(x), strict=True)], self.dim)

    def _inverse(self, y: Tensor) -> Tensor:
        pieces = self._pieces(y)
        return cat([t.inv(p) for t, p in zip(self.transforms, pieces, strict=True)], self.dim)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        terms = [sum_rightmost(t.log_abs_det_jacobian(a, b), self.event_dim - t.event_dim)
                 for t, a, b in zip(self.transforms, self._pieces(x), self._pieces(y),
                                    strict=True)]  # fmt: skip
        dim = (self.dim - x.ndim if self.dim >= 0 else self.dim) + self.event_dim
        if dim < 0:
            return cat(terms, dim)
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total

    bijective = property(lambda self: all(t.bijective for t in self.transforms))  # type: ignore
    domain = property(lambda self: constraints.cat([t.domain for t in self.transforms],
                                                   self.dim, self.lengths))  # fmt: skip
    codomain = property(lambda self: constraints.cat([t.codomain for t in self.transforms],
                                                     self.dim, self.lengths))  # fmt: skip


class StackTransform(Transform):
    """`tseq[i]` applied to the i-th slice along `dim` (as torch.stack joins them)."""

    def __init__(self, tseq: Sequence[Transform], dim: int = 0, cache_size: int = 0) -> None:
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("StackTransform: every element of tseq must be a Transform")
        tseq = [t.with_cache(cache_size) for t in tseq] if cache_size else list(tseq)
        super().__init__(cache_size)
        self.transforms, self.dim = tseq, dim

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return StackTransform(self.transforms, self.dim, cache_size)

    def _slices(self, z: Tensor) -> list[Tensor]:
        _check_dim("StackTransform", z, self.dim, len(self.transforms))
        return [select(z, self.dim, i) for i in range(z.shape[self.dim])]

    def _call(self, x: Tensor) -> Tensor:
        return stack([t(s) for t, s in zip(self.transforms, self._slices(x), strict=True)],
                     self.dim)  # fmt: skip

    def _inverse(self, y: Tensor) -> Tensor:
        return stack([t.inv(s) for t, s in zip(self.transforms, self._slices(y), strict=True)],
                     self.dim)  # fmt: skip

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        pairs = zip(self.transforms, self._slices(x), self._slices(y), strict=True)
        return stack([t.log_abs_det_jacobian(a, b) for t, a, b in pairs], self.dim)

    bijective = property(lambda self: all(t.bijective for t in self.transforms))  # type: ignore
    domain = property(lambda self: constraints.stack([t.domain for t in self.transforms],
                                                     self.dim))  # fmt: skip
    codomain = property(lambda self: constraints.stack([t.codomain for t in self.transforms],
                                                       self.dim))  # fmt: skip


__all__ = [
    "AbsTransform", "AffineTransform", "CatTransform", "ComposeTransform",
    "CumulativeDistributionTransform", "ExpTransform", "IndependentTransform", "PowerTransform",
    "ReshapeTransform", "SigmoidTransform", "SoftplusTransform", "StackTransform",
    "TanhTransform", "Transform", "identity_transform",
]  # fmt: skip

"""PyTorch's `torch.distributions.constraints`: the sets a distribution's parameters and samples
live in (`positive`, `simplex`, `lower_cholesky`, ...). `validate_args` checks parameters and
`log_prob`'s values against them. A check reads concrete values (NumPy): inside a traced step the
values are symbolic and the distributions skip it.

As in PyTorch, the parametrized constraints are their classes (`greater_than`, `interval`,
`independent`, `cat`, ...), so `biject_to.register(constraints.greater_than)` registers a
transform for every lower bound. A constraint defined outside (pyro's) may give `check(value)`
in tensor ops instead of `test(array)`: each is made from the other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core.errors import TraceError
from tracegrad.frontend.tensor import Tensor


def _array(value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        if value.is_symbolic:
            raise TraceError("constraints: a check reads concrete values, not a traced tensor's")
        return value.numpy()
    return np.asarray(value)


class Constraint:
    """A set of values: `check(value)` is a bool tensor, one element per event (the last
    `event_dim` dimensions of value are one event); `test` is the same over NumPy arrays."""

    is_discrete = False
    event_dim = 0

    def test(self, v: np.ndarray) -> np.ndarray:
        if type(self).check is Constraint.check:
            raise NotImplementedError(f"{type(self).__name__} defines neither check nor test")
        return _array(self.check(Tensor._of(np.asarray(v))))

    def check(self, value: Any) -> Tensor:
        if type(self).test is Constraint.test:
            raise NotImplementedError(f"{type(self).__name__} defines neither check nor test")
        return Tensor._of(np.asarray(self.test(_array(value)), dtype=np.bool_))

    def __repr__(self) -> str:
        return type(self).__name__[1:] + "()"


class _Dependent(Constraint):
    """A support or parameter that depends on other values: never checked. Its `is_discrete`
    and `event_dim` are known only when given (`dependent(is_discrete=True, event_dim=1)`)."""

    def __init__(self, *, is_discrete: Any = NotImplemented, event_dim: Any = NotImplemented):
        self._is_discrete, self._event_dim = is_discrete, event_dim

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete: Any = NotImplemented,
                 event_dim: Any = NotImplemented) -> _Dependent:  # fmt: skip
        is_discrete = self._is_discrete if is_discrete is NotImplemented else is_discrete
        event_dim = self._event_dim if event_dim is NotImplemented else event_dim
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, value: Any) -> Tensor:
        raise ValueError("Cannot determine validity of dependent constraint")


class _DependentProperty(property, _Dependent):
    """`@constraints.dependent_property(is_discrete=False, event_dim=0) def support(self)`: a
    property on an instance, a dependent constraint on the class."""

    def __init__(self, fn: Callable | None = None, *, is_discrete: Any = NotImplemented,
                 event_dim: Any = NotImplemented) -> None:  # fmt: skip
        property.__init__(self, fn)
        self._is_discrete, self._event_dim = is_discrete, event_dim

    def __call__(self, fn: Callable) -> _DependentProperty:  # type: ignore[override]
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


def is_dependent(constraint: Any) -> bool:
    return isinstance(constraint, _Dependent)


class _Real(Constraint):
    def test(self, v: np.ndarray) -> np.ndarray:
        return v == v  # not nan


class _Boolean(Constraint):
    is_discrete = True

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v == 0) | (v == 1)


class _Bounded(Constraint):
    """A constraint by bounds (numbers or tensors), shown as PyTorch shows them."""

    _bounds: tuple[str, ...] = ()

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)}" for name in self._bounds)
        return f"{type(self).__name__[1:]}({args})"


class _GreaterThan(_Bounded):
    _bounds = ("lower_bound",)

    def __init__(self, lower_bound: Any) -> None:
        self.lower_bound = lower_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return v > _array(self.lower_bound)


class _GreaterThanEq(_Bounded):
    _bounds = ("lower_bound",)

    def __init__(self, lower_bound: Any) -> None:
        self.lower_bound = lower_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return v >= _array(self.lower_bound)


class _LessThan(_Bounded):
    _bounds = ("upper_bound",)

    def __init__(self, upper_bound: Any) -> None:
        self.upper_bound = upper_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return v < _array(self.upper_bound)


class _Interval(_Bounded):
    """[lower_bound, upper_bound]."""

    _bounds = ("lower_bound", "upper_bound")

    def __init__(self, lower_bound: Any, upper_bound: Any) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return (_array(self.lower_bound) <= v) & (v <= _array(self.upper_bound))


class _HalfOpenInterval(_Bounded):
    """[lower_bound, upper_bound)."""

    _bounds = ("lower_bound", "upper_bound")

    def __init__(self, lower_bound: Any, upper_bound: Any) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return (_array(self.lower_bound) <= v) & (v < _array(self.upper_bound))


class _IntegerInterval(_Bounded):
    is_discrete = True
    _bounds = ("lower_bound", "upper_bound")

    def __init__(self, lower_bound: Any, upper_bound: Any) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        inside = (_array(self.lower_bound) <= v) & (v <= _array(self.upper_bound))
        return (v % 1 == 0) & inside


class _IntegerLessThan(_Bounded):
    is_discrete = True
    _bounds = ("upper_bound",)

    def __init__(self, upper_bound: Any) -> None:
        self.upper_bound = upper_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v % 1 == 0) & (v <= _array(self.upper_bound))


class _IntegerGreaterThan(_Bounded):
    is_discrete = True
    _bounds = ("lower_bound",)

    def __init__(self, lower_bound: Any) -> None:
        self.lower_bound = lower_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v % 1 == 0) & (v >= _array(self.lower_bound))


def _all_last(out: np.ndarray, n: int) -> np.ndarray:
    return out.all(axis=tuple(range(-n, 0))) if n else out


class _IndependentConstraint(Constraint):
    """`base_constraint` over the last `reinterpreted_batch_ndims` dimensions too: all of them
    hold."""

    def __init__(self, base_constraint: Constraint, reinterpreted_batch_ndims: int) -> None:
        if not isinstance(base_constraint, Constraint):
            raise TypeError(f"independent: base_constraint must be a Constraint, got "
                            f"{type(base_constraint).__name__}")  # fmt: skip
        if not isinstance(reinterpreted_batch_ndims, int) or reinterpreted_batch_ndims < 0:
            raise ValueError(f"independent: reinterpreted_batch_ndims must be an int >= 0, got "
                             f"{reinterpreted_batch_ndims!r}")  # fmt: skip
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return self.base_constraint.is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def test(self, v: np.ndarray) -> np.ndarray:
        out = np.asarray(self.base_constraint.test(v))
        if out.ndim < self.reinterpreted_batch_ndims:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {v.ndim}")
        return _all_last(out, self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base_constraint}, {self.reinterpreted_batch_ndims})"


class MixtureSameFamilyConstraint(Constraint):
    """A mixture's support: the components' constraint, checked with the component dimension
    put back."""

    def __init__(self, base_constraint: Constraint) -> None:
        if not isinstance(base_constraint, Constraint):
            raise TypeError(f"MixtureSameFamilyConstraint: base_constraint must be a "
                            f"Constraint, got {type(base_constraint).__name__}")  # fmt: skip
        self.base_constraint = base_constraint

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return self.base_constraint.is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return self.base_constraint.event_dim

    def test(self, v: np.ndarray) -> np.ndarray:
        out = np.asarray(self.base_constraint.test(np.expand_dims(v, -1 - self.event_dim)))
        keep = v.ndim - self.event_dim
        return out.reshape(out.shape[:keep] + (-1,)).all(-1)

    def __repr__(self) -> str:
        return f"MixtureSameFamilyConstraint({self.base_constraint})"


class _Simplex(Constraint):
    event_dim = 1

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v >= 0).all(-1) & (np.abs(v.sum(-1) - 1) < 1e-6)


class _Multinomial(Constraint):
    """Non-negative counts summing to at most `upper_bound`."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound: Any) -> None:
        self.upper_bound = upper_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v >= 0).all(-1) & (v.sum(-1) <= _array(self.upper_bound))


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def test(self, v: np.ndarray) -> np.ndarray:
        return ((v == 0) | (v == 1)).all(-1) & (v.sum(-1) == 1)


class _LowerTriangular(Constraint):
    event_dim = 2

    def test(self, v: np.ndarray) -> np.ndarray:
        return (np.tril(v) == v).all((-2, -1))


class _LowerCholesky(Constraint):
    """Lower-triangular with a positive diagonal."""

    event_dim = 2

    def test(self, v: np.ndarray) -> np.ndarray:
        lower = (np.tril(v) == v).all((-2, -1))
        return lower & (np.diagonal(v, axis1=-2, axis2=-1) > 0).all(-1)


class _CorrCholesky(Constraint):
    """A correlation matrix's Cholesky factor: lower Cholesky with rows of unit norm."""

    event_dim = 2

    def test(self, v: np.ndarray) -> np.ndarray:
        tol = np.finfo(v.dtype if v.dtype.kind == "f" else np.float64).eps * v.shape[-1] * 10
        unit = (np.abs(np.linalg.norm(v, axis=-1) - 1.0) <= tol).all(-1)
        return _LowerCholesky().test(v) & unit


class _Square(Constraint):
    event_dim = 2

    def test(self, v: np.ndarray) -> np.ndarray:
        return np.full(v.shape[:-2], v.shape[-2] == v.shape[-1])


class _Symmetric(_Square):
    def test(self, v: np.ndarray) -> np.ndarray:
        square = super().test(v)
        if not square.all():
            return square
        return np.isclose(v, np.swapaxes(v, -2, -1), atol=1e-6).all((-2, -1))


class _PositiveSemidefinite(_Symmetric):
    def test(self, v: np.ndarray) -> np.ndarray:
        symmetric_ = super().test(v)
        if not symmetric_.all() or not np.isfinite(v).all():
            return symmetric_ & np.isfinite(v).all((-2, -1))
        return (np.linalg.eigvalsh(v) >= 0).all(-1)


class _PositiveDefinite(_Symmetric):
    """Symmetric with positive eigenvalues."""

    def test(self, v: np.ndarray) -> np.ndarray:
        symmetric_ = super().test(v)
        if not symmetric_.all() or not np.isfinite(v).all():
            return symmetric_ & np.isfinite(v).all((-2, -1))
        return (np.linalg.eigvalsh(v) > 0).all(-1)


class _Cat(Constraint):
    """`cseq[i]` on the i-th piece of `lengths[i]` entries along `dim` (as torch.cat joins)."""

    def __init__(self, cseq: Sequence[Constraint], dim: int = 0,
                 lengths: Sequence[int] | None = None) -> None:  # fmt: skip
        self.cseq, self.dim = list(cseq), dim
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise ValueError(f"cat: {len(self.lengths)} lengths for {len(self.cseq)} "
                             "constraints")  # fmt: skip

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return max(c.event_dim for c in self.cseq)

    def test(self, v: np.ndarray) -> np.ndarray:
        starts = np.cumsum([0, *self.lengths])
        ends = starts[1:]
        pieces = [np.take(v, np.arange(a, b), self.dim) for a, b in zip(starts, ends, strict=False)]
        return np.concatenate([c.test(p) for c, p in zip(self.cseq, pieces, strict=True)], self.dim)


class _Stack(Constraint):
    """`cseq[i]` on the i-th slice along `dim` (as torch.stack joins)."""

    def __init__(self, cseq: Sequence[Constraint], dim: int = 0) -> None:
        self.cseq, self.dim = list(cseq), dim

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        dim = max(c.event_dim for c in self.cseq)
        return dim + 1 if self.dim + dim < 0 else dim

    def test(self, v: np.ndarray) -> np.ndarray:
        slices = [np.take(v, i, self.dim) for i in range(v.shape[self.dim])]
        return np.stack([c.test(s) for c, s in zip(self.cseq, slices, strict=True)], self.dim)


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _IndependentConstraint
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
multinomial = _Multinomial
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
cat = _Cat
stack = _Stack

__all__ = [
    "Constraint", "MixtureSameFamilyConstraint", "boolean", "cat", "corr_cholesky", "dependent",
    "dependent_property", "greater_than", "greater_than_eq", "half_open_interval", "independent",
    "integer_interval", "interval", "is_dependent", "less_than", "lower_cholesky",
    "lower_triangular", "multinomial", "nonnegative", "nonnegative_integer", "one_hot",
    "positive", "positive_definite", "positive_integer", "positive_semidefinite", "real",
    "real_vector", "simplex", "square", "stack", "symmetric", "unit_interval",
]  # fmt: skip

"""PyTorch's `torch.distributions.constraints`: the sets a distribution's parameters and samples
live in (`positive`, `simplex`, `lower_cholesky`, ...). `validate_args` checks parameters and
`log_prob`'s values against them. A check reads concrete values (NumPy): inside a traced step the
values are symbolic and the distributions skip it."""

from __future__ import annotations

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
    `event_dim` dimensions of value are one event)."""

    is_discrete = False
    event_dim = 0

    def test(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def check(self, value: Any) -> Tensor:
        return Tensor._of(np.asarray(self.test(_array(value)), dtype=np.bool_))

    def __repr__(self) -> str:
        return type(self).__name__.lstrip("_") + "()"


class _Real(Constraint):
    def test(self, v: np.ndarray) -> np.ndarray:
        return v == v  # not nan


class _Boolean(Constraint):
    is_discrete = True

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v == 0) | (v == 1)


class _GreaterThan(Constraint):
    def __init__(self, lower_bound: float, strict: bool = True) -> None:
        self.lower_bound, self.strict = lower_bound, strict

    def test(self, v: np.ndarray) -> np.ndarray:
        return v > self.lower_bound if self.strict else v >= self.lower_bound

    def __repr__(self) -> str:
        name = "GreaterThan" if self.strict else "GreaterThanEq"
        return f"{name}(lower_bound={self.lower_bound})"


class _LessThan(Constraint):
    def __init__(self, upper_bound: float) -> None:
        self.upper_bound = upper_bound

    def test(self, v: np.ndarray) -> np.ndarray:
        return v < self.upper_bound

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    """[lower, upper] (`half_open`: [lower, upper)); the bounds may be tensors."""

    def __init__(self, lower_bound: Any, upper_bound: Any, half_open: bool = False) -> None:
        self.lower_bound, self.upper_bound, self.half_open = lower_bound, upper_bound, half_open

    def test(self, v: np.ndarray) -> np.ndarray:
        lo, hi = _array(self.lower_bound), _array(self.upper_bound)
        return (lo <= v) & ((v < hi) if self.half_open else (v <= hi))

    def __repr__(self) -> str:
        name = "HalfOpenInterval" if self.half_open else "Interval"
        return f"{name}(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerInterval(_Interval):
    is_discrete = True

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v % 1 == 0) & super().test(v)

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(_GreaterThan):
    is_discrete = True

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v % 1 == 0) & (v >= self.lower_bound)

    def __repr__(self) -> str:
        return f"IntegerGreaterThan(lower_bound={self.lower_bound})"


class _Independent(Constraint):
    """`base` over the last `reinterpreted_batch_ndims` dimensions too: all of them hold."""

    def __init__(self, base: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def test(self, v: np.ndarray) -> np.ndarray:
        out = np.asarray(self.base.test(v))
        n = self.reinterpreted_batch_ndims
        return out.all(axis=tuple(range(-n, 0))) if n else out

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base}, {self.reinterpreted_batch_ndims})"


class _Simplex(Constraint):
    event_dim = 1

    def test(self, v: np.ndarray) -> np.ndarray:
        return (v >= 0).all(-1) & (np.abs(v.sum(-1) - 1) < 1e-6)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def test(self, v: np.ndarray) -> np.ndarray:
        return ((v == 0) | (v == 1)).all(-1) & (v.sum(-1) == 1)


class _LowerCholesky(Constraint):
    """Lower-triangular with a positive diagonal."""

    event_dim = 2

    def test(self, v: np.ndarray) -> np.ndarray:
        lower = (np.tril(v) == v).all((-2, -1))
        return lower & (np.diagonal(v, axis1=-2, axis2=-1) > 0).all(-1)


class _PositiveDefinite(Constraint):
    """Symmetric with positive eigenvalues."""

    event_dim = 2

    def test(self, v: np.ndarray) -> np.ndarray:
        symmetric = np.isclose(v, np.swapaxes(v, -2, -1), atol=1e-6).all((-2, -1))
        if not np.isfinite(v).all():
            return np.zeros(v.shape[:-2], np.bool_)
        return symmetric & (np.linalg.eigvalsh(v) > 0).all(-1)


dependent = Constraint()  # a support that depends on the parameters: never checked
real = _Real()
real_vector = _Independent(real, 1)
boolean = _Boolean()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThan(0.0, strict=False)
unit_interval = _Interval(0.0, 1.0)
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
simplex = _Simplex()
one_hot = _OneHot()
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
independent = _Independent


def greater_than(lower_bound: Any) -> Constraint:
    return _GreaterThan(lower_bound)


def greater_than_eq(lower_bound: Any) -> Constraint:
    return _GreaterThan(lower_bound, strict=False)


def less_than(upper_bound: Any) -> Constraint:
    return _LessThan(upper_bound)


def interval(lower_bound: Any, upper_bound: Any) -> Constraint:
    return _Interval(lower_bound, upper_bound)


def half_open_interval(lower_bound: Any, upper_bound: Any) -> Constraint:
    return _Interval(lower_bound, upper_bound, half_open=True)


def integer_interval(lower_bound: Any, upper_bound: Any) -> Constraint:
    return _IntegerInterval(lower_bound, upper_bound)


def is_dependent(constraint: Any) -> bool:
    return constraint is dependent


__all__ = [
    "Constraint", "boolean", "dependent", "greater_than", "greater_than_eq", "half_open_interval",
    "independent", "integer_interval", "interval", "is_dependent", "less_than", "lower_cholesky",
    "nonnegative", "nonnegative_integer", "one_hot", "positive", "positive_definite",
    "positive_integer", "real", "real_vector", "simplex", "unit_interval",
]  # fmt: skip

"""`torch.distributions.constraints`: `tracegrad.distributions.constraints`, with PyTorch's
`__all__`, and the classes of its constraint instances under PyTorch's private names (code
tests `isinstance(c, constraints._CorrCholesky)`)."""

from tracegrad.distributions.constraints import *  # noqa: F403
from tracegrad.distributions.constraints import __all__  # noqa: F401

_Real, _Boolean, _OneHot = type(real), type(boolean), type(one_hot)  # noqa: F405
_Simplex, _Dependent = type(simplex), type(dependent)  # noqa: F405
_GreaterThan, _GreaterThanEq = greater_than, greater_than_eq  # noqa: F405
_LessThan, _Interval, _HalfOpenInterval = less_than, interval, half_open_interval  # noqa: F405
_IntegerInterval, _Multinomial = integer_interval, multinomial  # noqa: F405
_IntegerGreaterThan = type(nonnegative_integer)  # noqa: F405
_IndependentConstraint, _DependentProperty = independent, dependent_property  # noqa: F405
_LowerTriangular, _LowerCholesky = type(lower_triangular), type(lower_cholesky)  # noqa: F405
_CorrCholesky, _Square, _Symmetric = type(corr_cholesky), type(square), type(symmetric)  # noqa: F405
_PositiveSemidefinite = type(positive_semidefinite)  # noqa: F405
_PositiveDefinite = type(positive_definite)  # noqa: F405
_Cat, _Stack = cat, stack  # noqa: F405

"""PyTorch's `torch.distributions.constraint_registry`: from a constraint to a transform that
maps the unconstrained reals into its set, by the constraint's type. `biject_to(c)` is
bijective (HMC's coordinates: its log-determinant counts); `transform_to(c)` need not be (an
optimizer's parametrization: `transform_to(simplex)` is a softmax). Registrations are
PyTorch's; `register` adds one (pyro registers its own constraints)."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

from tracegrad.distributions import constraints
from tracegrad.distributions.matrix_transforms import (
    CorrCholeskyTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    SoftmaxTransform,
    StickBreakingTransform,
)
from tracegrad.distributions.transforms import (
    AffineTransform,
    CatTransform,
    ComposeTransform,
    ExpTransform,
    IndependentTransform,
    SigmoidTransform,
    StackTransform,
    Transform,
    identity_transform,
)


class ConstraintRegistry:
    """Constraint types to transform factories (each takes the constraint)."""

    def __init__(self) -> None:
        self._registry: dict[type, Callable] = {}

    def register(self, constraint: Any, factory: Callable | None = None) -> Any:
        """`@registry.register(constraints.positive) def f(constraint): ...` (a constraint
        instance stands for its type)."""
        if factory is None:
            return lambda factory: self.register(constraint, factory)
        if isinstance(constraint, constraints.Constraint):
            constraint = type(constraint)
        if not (isinstance(constraint, type) and issubclass(constraint, constraints.Constraint)):
            raise TypeError("Expected constraint to be either a Constraint subclass or "
                            f"instance, but got {constraint!r}")  # fmt: skip
        self._registry[constraint] = factory
        return factory

    def __call__(self, constraint: constraints.Constraint) -> Transform:
        factory = self._registry.get(type(constraint))
        if factory is None:
            raise NotImplementedError(f"Cannot transform {type(constraint).__name__} constraints")
        return factory(constraint)


biject_to = ConstraintRegistry()
transform_to = ConstraintRegistry()


def _both(*kinds: Any) -> Callable:
    """Register the factory with both registries for each of `kinds`."""

    def decorator(factory: Callable) -> Callable:
        for kind in kinds:
            biject_to.register(kind, factory)
            transform_to.register(kind, factory)
        return factory

    return decorator


@_both(constraints.real)
def _transform_to_real(constraint: Any) -> Transform:
    return identity_transform


@biject_to.register(constraints.independent)
def _biject_to_independent(constraint: Any) -> Transform:
    base = biject_to(constraint.base_constraint)
    return IndependentTransform(base, constraint.reinterpreted_batch_ndims)


@transform_to.register(constraints.independent)
def _transform_to_independent(constraint: Any) -> Transform:
    base = transform_to(constraint.base_constraint)
    return IndependentTransform(base, constraint.reinterpreted_batch_ndims)


# positive and nonnegative are instances of greater_than and greater_than_eq: as in PyTorch,
# the lower-bound factory below (registered after this one) is what they get
@_both(constraints.positive, constraints.nonnegative)
def _transform_to_positive(constraint: Any) -> Transform:
    return ExpTransform()


@_both(constraints.greater_than, constraints.greater_than_eq)
def _transform_to_greater_than(constraint: Any) -> Transform:
    return ComposeTransform([ExpTransform(), AffineTransform(constraint.lower_bound, 1)])


@_both(constraints.less_than)
def _transform_to_less_than(constraint: Any) -> Transform:
    return ComposeTransform([ExpTransform(), AffineTransform(constraint.upper_bound, -1)])


@_both(constraints.interval, constraints.half_open_interval)
def _transform_to_interval(constraint: Any) -> Transform:
    lower, upper = constraint.lower_bound, constraint.upper_bound
    if isinstance(lower, numbers.Number) and isinstance(upper, numbers.Number):
        if lower == 0 and upper == 1:
            return SigmoidTransform()
    return ComposeTransform([SigmoidTransform(), AffineTransform(lower, upper - lower)])


@biject_to.register(constraints.simplex)
def _biject_to_simplex(constraint: Any) -> Transform:
    return StickBreakingTransform()


@transform_to.register(constraints.simplex)
def _transform_to_simplex(constraint: Any) -> Transform:
    return SoftmaxTransform()


@transform_to.register(constraints.lower_cholesky)
def _transform_to_lower_cholesky(constraint: Any) -> Transform:
    return LowerCholeskyTransform()


@transform_to.register(constraints.positive_definite)
@transform_to.register(constraints.positive_semidefinite)
def _transform_to_positive_definite(constraint: Any) -> Transform:
    return PositiveDefiniteTransform()


@_both(constraints.corr_cholesky)
def _transform_to_corr_cholesky(constraint: Any) -> Transform:
    return CorrCholeskyTransform()


@biject_to.register(constraints.cat)
def _biject_to_cat(constraint: Any) -> Transform:
    parts = [biject_to(c) for c in constraint.cseq]
    return CatTransform(parts, constraint.dim, constraint.lengths)


@transform_to.register(constraints.cat)
def _transform_to_cat(constraint: Any) -> Transform:
    parts = [transform_to(c) for c in constraint.cseq]
    return CatTransform(parts, constraint.dim, constraint.lengths)


@biject_to.register(constraints.stack)
def _biject_to_stack(constraint: Any) -> Transform:
    return StackTransform([biject_to(c) for c in constraint.cseq], constraint.dim)


@transform_to.register(constraints.stack)
def _transform_to_stack(constraint: Any) -> Transform:
    return StackTransform([transform_to(c) for c in constraint.cseq], constraint.dim)


__all__ = ["ConstraintRegistry", "biject_to", "transform_to"]

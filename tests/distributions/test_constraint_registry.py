"""`biject_to` and `transform_to` (`distributions.constraint_registry`): for each of PyTorch's
registered constraints, the same transform as PyTorch's (its values and log-determinants on the
same inputs), whose values satisfy the constraint; registering a new constraint type."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D
from tests.distributions.reference import needs_torch

try:
    import torch
    import torch.distributions as TD
except ImportError:
    torch = TD = None

R = np.random.default_rng(13)

# (id, the constraint made with a module's constraints, the unconstrained input's shape)
CASES = [
    ("real", lambda c, t: c.real, (2, 3)),
    ("positive", lambda c, t: c.positive, (2, 3)),
    ("nonnegative", lambda c, t: c.nonnegative, (2, 3)),
    ("greater_than", lambda c, t: c.greater_than(t([1.0, -2.0, 0.5])), (2, 3)),
    ("greater_than_eq", lambda c, t: c.greater_than_eq(-1.5), (2, 3)),
    ("less_than", lambda c, t: c.less_than(t([1.0, -2.0, 0.5])), (2, 3)),
    ("unit_interval", lambda c, t: c.unit_interval, (2, 3)),
    ("interval", lambda c, t: c.interval(t([0.0, -1.0, 2.0]), t([1.0, 3.0, 2.5])), (2, 3)),
    ("half_open_interval", lambda c, t: c.half_open_interval(-2.0, 5.0), (2, 3)),
    ("simplex", lambda c, t: c.simplex, (2, 3)),
    ("real_vector", lambda c, t: c.real_vector, (2, 3)),
    ("independent_positive", lambda c, t: c.independent(c.positive, 2), (2, 3)),
    ("corr_cholesky", lambda c, t: c.corr_cholesky, (2, 3)),
    ("cat", lambda c, t: c.cat([c.positive, c.real, c.unit_interval], -1, [1, 1, 1]), (2, 3)),
    ("stack", lambda c, t: c.stack([c.positive, c.interval(0.0, 4.0)], 0), (2, 3)),
    ("lower_cholesky", lambda c, t: c.lower_cholesky, (2, 3, 3)),
    ("positive_definite", lambda c, t: c.positive_definite, (2, 3, 3)),
    ("positive_semidefinite", lambda c, t: c.positive_semidefinite, (2, 3, 3)),
]  # fmt: skip
IDS = [c[0] for c in CASES]
BIJECTIVE = {"lower_cholesky", "positive_definite", "positive_semidefinite"}  # transform_to only


def _tensor(module):
    def make(values):
        array = np.asarray(values, np.float64)
        return tg.tensor(array) if module is D else torch.tensor(array)

    return make


@needs_torch
@pytest.mark.parametrize("registry", ["biject_to", "transform_to"])
@pytest.mark.parametrize("name, make, shape", CASES, ids=IDS)
def test_the_transform_is_pytorchs_and_lands_in_the_constraint(registry, name, make, shape):
    if registry == "biject_to" and name in BIJECTIVE:
        with pytest.raises(NotImplementedError, match="Cannot transform"):
            D.biject_to(make(D.constraints, _tensor(D)))
        return
    constraint = make(D.constraints, _tensor(D))
    ours = getattr(D, registry)(constraint)
    theirs = getattr(TD, registry)(make(TD.constraints, _tensor(TD)))
    assert type(ours).__name__ == type(theirs).__name__
    x = R.standard_normal(shape)
    y, ty = ours(tg.tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-10, atol=1e-12)
    assert bool(ours.codomain.check(y).numpy().all()) and bool(constraint.check(y).numpy().all())
    if ours.bijective:
        got = ours.log_abs_det_jacobian(tg.tensor(x), y).numpy()
        want = theirs.log_abs_det_jacobian(torch.tensor(x), ty).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(ours.inv(tg.tensor(y.numpy())).numpy(), x, rtol=1e-6,
                                   atol=1e-8)  # fmt: skip


def test_registering_a_new_constraint_type():
    class Ordered(D.constraints.Constraint):
        event_dim = 1

        def check(self, value):
            return (value[..., 1:] > value[..., :-1]).all(-1)

    registry = D.constraint_registry.ConstraintRegistry()
    with pytest.raises(NotImplementedError, match="Cannot transform Ordered constraints"):
        registry(Ordered())
    registry.register(Ordered, lambda c: D.ExpTransform())
    assert isinstance(registry(Ordered()), D.ExpTransform)
    with pytest.raises(TypeError, match="Expected constraint to be either a Constraint"):
        registry.register(int, lambda c: None)

"""`distributions.constraints` against PyTorch's: the same names (`__all__`), the same classes
behind the parametrized ones, and the same verdicts on the same values; `dependent` and
`dependent_property`; a constraint defined by `check` alone (as pyro defines its own)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D
from tests.distributions.reference import needs_torch

try:
    import torch
    import torch.distributions.constraints as TC
except ImportError:
    torch = TC = None

C = D.constraints
R = np.random.default_rng(12)


def _spd(n, k):
    a = R.standard_normal((k, n, n))
    return a @ np.swapaxes(a, -1, -2) + np.eye(n)


def _corr_cholesky(n, k):
    L = np.linalg.cholesky(_spd(n, k))
    return L / np.linalg.norm(L, axis=-1, keepdims=True)


SCALARS = np.array([-1.5, 0.0, 0.3, 1.0, 2.0, 3.0, np.nan, np.inf])
MATRICES = np.concatenate([_spd(3, 2), _corr_cholesky(3, 2), R.standard_normal((2, 3, 3)),
                           np.tril(R.uniform(0.1, 1, (1, 3, 3))), np.ones((1, 3, 3))])  # fmt: skip
VECTORS = np.concatenate([R.dirichlet(np.ones(4), 2), [[0, 0, 1, 0], [0, 2, 1, 0]],
                          R.standard_normal((2, 4))]).astype(float)  # fmt: skip

# (id, the constraint made with a module, the values checked)
CASES = [
    ("real", lambda c: c.real, SCALARS), ("boolean", lambda c: c.boolean, SCALARS),
    ("positive", lambda c: c.positive, SCALARS), ("nonnegative", lambda c: c.nonnegative, SCALARS),
    ("nonnegative_integer", lambda c: c.nonnegative_integer, SCALARS),
    ("positive_integer", lambda c: c.positive_integer, SCALARS),
    ("unit_interval", lambda c: c.unit_interval, SCALARS),
    ("greater_than", lambda c: c.greater_than(0.3), SCALARS),
    ("greater_than_eq", lambda c: c.greater_than_eq(0.3), SCALARS),
    ("less_than", lambda c: c.less_than(1.0), SCALARS),
    ("interval", lambda c: c.interval(0.0, 2.0), SCALARS),
    ("half_open_interval", lambda c: c.half_open_interval(0.0, 2.0), SCALARS),
    ("integer_interval", lambda c: c.integer_interval(0, 2), SCALARS),
    ("real_vector", lambda c: c.real_vector, VECTORS),
    ("simplex", lambda c: c.simplex, VECTORS), ("one_hot", lambda c: c.one_hot, VECTORS),
    ("multinomial", lambda c: c.multinomial(3), VECTORS),
    ("independent", lambda c: c.independent(c.positive, 1), VECTORS),
    ("cat", lambda c: c.cat([c.positive, c.real], -1, [1, 3]), VECTORS),
    ("stack", lambda c: c.stack([c.positive, c.real, c.real, c.unit_interval], -1), VECTORS),
    ("lower_triangular", lambda c: c.lower_triangular, MATRICES),
    ("lower_cholesky", lambda c: c.lower_cholesky, MATRICES),
    ("corr_cholesky", lambda c: c.corr_cholesky, MATRICES),
    ("square", lambda c: c.square, MATRICES), ("symmetric", lambda c: c.symmetric, MATRICES),
    ("positive_semidefinite", lambda c: c.positive_semidefinite, MATRICES),
    ("positive_definite", lambda c: c.positive_definite, MATRICES),
    ("mixture", lambda c: c.MixtureSameFamilyConstraint(c.simplex), VECTORS),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
def test_the_names_are_pytorchs():
    assert set(C.__all__) == set(TC.__all__)
    for name in TC.__all__:
        ours, theirs = getattr(C, name), getattr(TC, name)
        assert isinstance(ours, type) == isinstance(theirs, type), name


@needs_torch
@pytest.mark.parametrize("name, make, values", CASES, ids=IDS)
def test_verdicts_and_attributes_match_torch(name, make, values):
    ours, theirs = make(C), make(TC)
    with np.errstate(invalid="ignore"):
        got = ours.check(tg.tensor(values)).numpy()
    want = theirs.check(torch.tensor(values)).numpy()
    np.testing.assert_array_equal(got, want)
    assert (ours.event_dim, ours.is_discrete) == (theirs.event_dim, theirs.is_discrete)
    assert repr(ours).replace("Constraint", "") == repr(theirs).replace("Constraint", "")
    assert type(ours).__name__ == type(theirs).__name__


def test_dependent_constraints_and_properties():
    assert C.is_dependent(C.dependent) and not C.is_dependent(C.real)
    d = C.dependent(is_discrete=True, event_dim=1)
    assert d.is_discrete and d.event_dim == 1
    with pytest.raises(NotImplementedError, match="event_dim cannot be determined"):
        C.dependent.event_dim  # noqa: B018
    with pytest.raises(ValueError, match="Cannot determine validity of dependent constraint"):
        C.dependent.check(tg.zeros(2))

    class Shifted(D.Distribution):
        def __init__(self, low):
            self.low = low
            super().__init__((), (), validate_args=True)

        @C.dependent_property(is_discrete=False, event_dim=0)
        def support(self):
            return C.greater_than(self.low)

    assert C.is_dependent(Shifted.support) and Shifted.support.event_dim == 0
    assert Shifted(2.0).support.lower_bound == 2.0
    with pytest.raises(ValueError, match=r"Shifted.log_prob: expected value .*GreaterThan"):
        Shifted(2.0)._validate_sample(tg.tensor(1.0))


def test_a_constraint_given_by_check_alone_validates_parameters():
    """pyro's constraints define check(value) in tensor ops: parameters are validated by it
    (shown as PyTorch shows a constraint: its class name without the first character)."""

    class Even(C.Constraint):
        is_discrete = True

        def check(self, value):
            return (value % 2) == 0

    class Counts(D.Distribution):
        arg_constraints = {"n": Even()}

        def __init__(self, n):
            self.n = n
            super().__init__(n.shape)

    Counts(tg.tensor([2.0, 4.0]))
    with pytest.raises(
        ValueError, match=r"Expected parameter n .* to satisfy the constraint ven\(\)"
    ):
        Counts(tg.tensor([2.0, 3.0]))
    assert Even().test(np.array([1, 2])).tolist() == [False, True]

    class Nothing(C.Constraint):
        pass

    with pytest.raises(NotImplementedError, match="Nothing defines neither check nor test"):
        Nothing().check(tg.zeros(1))

"""The families defined as transformed distributions (`distributions.transformed_families`):
log_prob, entropy, moments, cdf and icdf against PyTorch's in float64, their gradients against
PyTorch's and finite differences, reparameterized draws' gradients against finite differences,
draws against the cdf (Kolmogorov-Smirnov) and the moments; subclassing as pyro does."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D
from tests.conftest import check_grad
from tests.distributions.reference import (
    check_draw_moments,
    compare_gradients_with_torch,
    compare_with_torch,
    ks_distance,
    needs_torch,
)

R = np.random.default_rng(6)
BASIC = ["log_prob", "entropy", "mean", "variance", "stddev", "mode"]

# (id, make, parameters, value, what to compare with PyTorch, has a cdf)
CASES = [
    ("lognormal", lambda d, a, b: d.LogNormal(a, b), [R.standard_normal(3) * 0.3,
     R.uniform(0.5, 1, 3)], R.uniform(0.2, 3, (2, 3)), [*BASIC, "cdf", "icdf"], True),
    ("half_normal", lambda d, s: d.HalfNormal(s), [R.uniform(0.5, 2, 3)],
     R.uniform(0.01, 3, (2, 3)), [*BASIC, "cdf", "icdf"], True),
    ("half_cauchy", lambda d, s: d.HalfCauchy(s), [R.uniform(0.5, 2, 3)],
     R.uniform(0.01, 3, (2, 3)), ["log_prob", "entropy", "mean", "mode", "cdf", "icdf"], True),
    ("gumbel", lambda d, a, b: d.Gumbel(a, b), [R.standard_normal(3), R.uniform(0.5, 2, 3)],
     R.standard_normal((2, 3)) * 2, [*BASIC, "cdf", "icdf"], True),
    ("weibull", lambda d, s, k: d.Weibull(s, k), [R.uniform(0.5, 2, 3), R.uniform(0.7, 3, 3)],
     R.uniform(0.1, 3, (2, 3)), [*BASIC, "cdf", "icdf"], True),
    ("pareto", lambda d, s, a: d.Pareto(s, a), [R.uniform(0.5, 1, 3), R.uniform(2.5, 5, 3)],
     R.uniform(1.0, 4, (2, 3)), [*BASIC, "cdf", "icdf"], True),
    ("inverse_gamma", lambda d, a, b: d.InverseGamma(a, b),
     [np.array([0.5, 2.5, 4.0]), R.uniform(0.5, 2, 3)], R.uniform(0.1, 3, (2, 3)),
     [*BASIC, "cdf"], False),  # no icdf (nor has PyTorch's)
    ("logistic_normal", lambda d, a, b: d.LogisticNormal(a, b),
     [R.standard_normal((2, 3)), R.uniform(0.5, 1.5, (2, 3))], R.dirichlet(np.ones(4), (5, 2)),
     ["log_prob"], False),
    ("kumaraswamy", lambda d, a, b: d.Kumaraswamy(a, b),
     [R.uniform(0.5, 3, 3), R.uniform(0.5, 3, 3)], R.uniform(0.05, 0.95, (2, 3)),
     ["log_prob", "entropy", "mean", "variance"], False),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names, cdf", CASES, ids=IDS)
def test_values_match_torch(name, make, params, value, names, cdf):
    compare_with_torch(make, params, value, names)


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names, cdf", CASES, ids=IDS)
def test_gradients_match_torch(name, make, params, value, names, cdf):
    compare_gradients_with_torch(make, params, value, entropy="entropy" in names)


@pytest.mark.parametrize("name, make, params, value, names, cdf", CASES, ids=IDS)
def test_gradients_of_log_prob_and_draws_match_finite_differences(name, make, params, value,
                                                                  names, cdf):  # fmt: skip
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value)), *params)

    def draws(*xs):
        tg.manual_seed(3)
        return make(D, *xs).rsample((2,))

    if name == "inverse_gamma":  # a gamma draw: its concentration's gradient is implicit, not
        # the path's of a fixed seed (test_gamma.py checks it by the quantile function)
        check_grad(lambda b: draws(tg.tensor(params[0]), b), params[1])
    elif make(D, *(tg.tensor(p) for p in params)).has_rsample:
        check_grad(draws, *params)


@pytest.mark.parametrize("name, make, params, value, names, cdf",
                         [c for c in CASES if c[5]], ids=[c[0] for c in CASES if c[5]])  # fmt: skip
def test_draws_follow_the_cdf_and_icdf_inverts_it(name, make, params, value, names, cdf):
    d = make(D, *(tg.tensor(p) for p in params))
    distance, bound = ks_distance(d)
    assert distance < bound, (name, distance)
    u = d.cdf(tg.tensor(value)).numpy()
    kept = u < 0.99  # nearer 1, 1 - u keeps too few digits for the round trip
    back = d.icdf(tg.tensor(u)).numpy()
    np.testing.assert_allclose(back[kept], value[kept], rtol=1e-8)


@pytest.mark.parametrize("name", ["half_normal", "gumbel", "weibull", "pareto", "kumaraswamy"])
def test_draws_have_the_moments(name):
    _, make, params, *_ = next(c for c in CASES if c[0] == name)
    check_draw_moments(make(D, *(tg.tensor(p) for p in params)))


def test_kumaraswamy_mode_is_the_densitys_maximum():
    """Against a grid (PyTorch's formula is nan wherever concentration0 > 1)."""
    a, b = np.array([2.0, 3.0, 1.5, 0.5]), np.array([2.5, 1.0, 4.0, 2.0])
    d = D.Kumaraswamy(tg.tensor(a), tg.tensor(b))
    x = np.linspace(1e-4, 1 - 1e-4, 200001)[:, None]
    best = x[np.argmax(d.log_prob(tg.tensor(x)).numpy(), 0), 0]
    mode = d.mode.numpy()
    np.testing.assert_allclose(mode[:3], best[:3], atol=1e-4)
    assert np.isnan(mode[3])


def test_logistic_normal_draws_lie_on_the_simplex_and_expand():
    d = D.LogisticNormal(tg.zeros(3, dtype=tg.float64), tg.ones(3, dtype=tg.float64))
    assert (d.batch_shape, d.event_shape) == ((), (4,))
    x = d.sample((100,)).numpy()
    np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-12)
    e = d.expand((5,))
    assert (e.batch_shape, e.event_shape) == ((5,), (4,)) and type(e) is D.LogisticNormal
    assert e.log_prob(e.sample()).shape == (5,)


def test_subclasses_construct_and_expand_as_pyros_do():
    """pyro's LogNormal calls TransformedDistribution.__init__ from its own __init__ and
    expands through _get_checked_instance; its Poisson-like subclasses add constructor
    arguments."""

    class PyroLogNormal(D.LogNormal):
        def __init__(self, loc, scale, validate_args=None):
            base = D.Normal(loc, scale)
            D.TransformedDistribution.__init__(self, base, D.ExpTransform(),
                                               validate_args=validate_args)  # fmt: skip

        def expand(self, batch_shape, _instance=None):
            new = self._get_checked_instance(PyroLogNormal, _instance)
            return D.TransformedDistribution.expand(self, batch_shape, _instance=new)

    d = PyroLogNormal(tg.tensor([0.0, 1.0]), 1.0)
    e = d.expand((3, 2))
    assert type(e) is PyroLogNormal and e.batch_shape == (3, 2)
    np.testing.assert_allclose(e.loc.numpy(), np.broadcast_to([0.0, 1.0], (3, 2)))
    assert float(d.log_prob(tg.tensor(1.0))[0]) == pytest.approx(-0.5 * math.log(2 * math.pi))

    class Sparse(D.Poisson):
        def __init__(self, rate, *, is_sparse=False, validate_args=None):
            self.is_sparse = is_sparse
            super().__init__(rate, validate_args=validate_args)

        def expand(self, batch_shape, _instance=None):
            new = self._get_checked_instance(Sparse, _instance)
            new = super().expand(batch_shape, _instance=new)
            new.is_sparse = self.is_sparse
            return new

    s = Sparse(tg.tensor([1.0, 2.0]), is_sparse=True).expand((4, 2))
    assert type(s) is Sparse and s.is_sparse and s.rate.shape == (4, 2)

    class Custom(D.Normal):
        def __init__(self, loc):
            super().__init__(loc, 1.0)

    with pytest.raises(NotImplementedError, match="Subclass Custom of Normal that defines a "
                       "custom __init__ method must also define a custom .expand"):  # fmt: skip
        Custom(tg.zeros(2)).expand((3, 2))

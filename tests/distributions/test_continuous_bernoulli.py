"""ContinuousBernoulli (`distributions.continuous_bernoulli`): values (inside and outside the
Taylor region around 1/2) and gradients against PyTorch's in float64 and finite differences;
the density integrates to one with its mean; draws' moments and Kolmogorov-Smirnov distance."""

from __future__ import annotations

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

R = np.random.default_rng(14)
PROBS = np.array([0.05, 0.3, 0.4995, 0.5004, 0.8])
VALUE = R.uniform(0.01, 0.99, (2, 5))
ALL = ["log_prob", "entropy", "mean", "variance", "stddev", "cdf", "icdf"]
CASES = [
    ("probs", lambda d, p: d.ContinuousBernoulli(probs=p), [PROBS], VALUE, ALL),
    ("logits", lambda d, x: d.ContinuousBernoulli(logits=x), [np.log(PROBS / (1 - PROBS))],
     VALUE, ALL),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_values_and_gradients_match_torch(name, make, params, value, names):
    compare_with_torch(make, params, value, names)
    compare_gradients_with_torch(make, params, value)


@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_match_finite_differences(name, make, params, value, names):
    keep = [0, 1, 4]  # outside the Taylor region, whose switch finite differences straddle
    kept = [p[keep] for p in params]
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value[:, keep])), *kept)

    def draws(*xs):
        tg.manual_seed(0)
        return make(D, *xs).rsample((3,))

    check_grad(draws, *kept)


def test_density_integrates_to_one_with_its_mean_and_draws_follow_it():
    d = D.ContinuousBernoulli(tg.tensor(PROBS))
    x = np.linspace(0, 1, 200001)[:, None]
    p = np.exp(d.log_prob(tg.tensor(x)).numpy())
    np.testing.assert_allclose(np.trapezoid(p, x, axis=0), 1.0, rtol=1e-8)
    np.testing.assert_allclose(np.trapezoid(x * p, x, axis=0), d.mean.numpy(), rtol=1e-7)
    check_draw_moments(d)
    distance, bound = ks_distance(d)
    assert distance < bound


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="ContinuousBernoulli: either probs or logits"):
        D.ContinuousBernoulli()
    with pytest.raises(ValueError, match="ContinuousBernoulli: the parameter probs has invalid"):
        D.ContinuousBernoulli(tg.tensor([1.5]), validate_args=True)
    e = D.ContinuousBernoulli(tg.tensor([0.2]), lims=(0.4, 0.6)).expand((3, 1))
    assert e.batch_shape == (3, 1) and e._lims == (0.4, 0.6)

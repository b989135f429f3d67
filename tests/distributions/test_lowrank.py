"""LowRankMultivariateNormal (`distributions.lowrank`): log_prob, entropy, moments and the
covariance, precision and scale_tril matrices against PyTorch's in float64 and against the full
MultivariateNormal, gradients, reparameterized draws' gradients, draws' covariance."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D
from tests.conftest import check_grad
from tests.distributions.reference import (
    compare_gradients_with_torch,
    compare_with_torch,
    needs_torch,
)

R = np.random.default_rng(9)
CASES = [
    ("batched", lambda d, m, w, s: d.LowRankMultivariateNormal(m, w, s),
     [R.standard_normal((2, 4)), R.standard_normal((4, 2)), R.uniform(0.5, 1.5, 4)],
     R.standard_normal((3, 2, 4)),
     ["log_prob", "entropy", "mean", "variance", "mode", "covariance_matrix",
      "precision_matrix", "scale_tril"]),
    ("factor_batched", lambda d, m, w, s: d.LowRankMultivariateNormal(m, w, s),
     [R.standard_normal(3), R.standard_normal((2, 3, 1)), R.uniform(0.5, 1.5, (2, 3))],
     R.standard_normal((3, 1, 3)), ["log_prob", "entropy", "variance", "covariance_matrix"]),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_values_match_torch(name, make, params, value, names):
    compare_with_torch(make, params, value, names)


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_match_torch(name, make, params, value, names):
    compare_gradients_with_torch(make, params, value)


@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_of_log_prob_and_draws_match_finite_differences(name, make, params, value,
                                                                  names):  # fmt: skip
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value)), *params)

    def draws(*xs):
        tg.manual_seed(1)
        return make(D, *xs).rsample((2,))

    check_grad(draws, *params)


def test_it_is_the_full_multivariate_normal_and_draws_have_its_covariance():
    loc, W, diag = R.standard_normal(4), R.standard_normal((4, 2)), R.uniform(0.5, 1.5, 4)
    d = D.LowRankMultivariateNormal(tg.tensor(loc), tg.tensor(W), tg.tensor(diag))
    cov = W @ W.T + np.diag(diag)
    full = D.MultivariateNormal(tg.tensor(loc), tg.tensor(cov))
    x = tg.tensor(R.standard_normal((5, 4)))
    np.testing.assert_allclose(d.log_prob(x).numpy(), full.log_prob(x).numpy(), rtol=1e-12)
    np.testing.assert_allclose(d.entropy().numpy(), full.entropy().numpy(), rtol=1e-12)
    np.testing.assert_allclose(d.precision_matrix.numpy(), np.linalg.inv(cov), atol=1e-12)
    tg.manual_seed(0)
    n = 40000
    s = d.sample((n,)).numpy()
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(np.cov(s.T) - cov) < 4.5 * se)
    assert np.all(np.abs(s.mean(0) - loc) < 4.5 * np.sqrt(np.diag(cov) / n))
    e = d.expand((3,))
    assert e.batch_shape == (3,) and e.log_prob(e.sample()).shape == (3,)


def test_bad_shapes_raise_naming_the_argument():
    with pytest.raises(tg.ShapeError, match="LowRankMultivariateNormal: cov_factor must be a "
                       "batch of 3 x m matrices"):  # fmt: skip
        D.LowRankMultivariateNormal(tg.zeros(3), tg.zeros((2, 1)), tg.ones(3))
    with pytest.raises(tg.ShapeError, match="cov_diag must be a batch of vectors of size 3"):
        D.LowRankMultivariateNormal(tg.zeros(3), tg.zeros((3, 1)), tg.ones(2))
    with pytest.raises(ValueError, match="Expected parameter cov_diag"):
        D.LowRankMultivariateNormal(tg.zeros(2), tg.zeros((2, 1)), tg.tensor([1.0, -1.0]))

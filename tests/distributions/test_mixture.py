"""MixtureSameFamily (`distributions.mixture`): log_prob, mean, variance and cdf against
PyTorch's in float64 with gradients; draws' moments; expand; the errors."""

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
    needs_torch,
)

R = np.random.default_rng(8)

CASES = [
    ("normal", lambda d, w, m, s: d.MixtureSameFamily(d.Categorical(logits=w), d.Normal(m, s)),
     [R.standard_normal((2, 3)), R.standard_normal((2, 3)) * 2, R.uniform(0.5, 1.5, (2, 3))],
     R.standard_normal((4, 2)) * 2, ["log_prob", "mean", "variance", "cdf"]),
    ("independent", lambda d, w, m, s: d.MixtureSameFamily(
        d.Categorical(probs=w), d.Independent(d.Normal(m, s), 1)),
     [R.dirichlet(np.ones(3)), R.standard_normal((3, 2)), R.uniform(0.5, 1.5, (3, 2))],
     R.standard_normal((4, 2)), ["log_prob", "mean", "variance"]),
    ("mvn_batched_mixture", lambda d, w, m, t: d.MixtureSameFamily(
        d.Categorical(logits=w), d.MultivariateNormal(m, scale_tril=t.tril())),
     [R.standard_normal(3), R.standard_normal((2, 3, 2)),
      np.tril(R.standard_normal((3, 2, 2)) * 0.3) + np.eye(2)],
     R.standard_normal((4, 2, 2)), ["log_prob", "mean", "variance"]),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_values_match_torch(name, make, params, value, names):
    compare_with_torch(make, params, value, names)


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_match_torch(name, make, params, value, names):
    compare_gradients_with_torch(make, params, value, entropy=False)


@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_of_log_prob_match_finite_differences(name, make, params, value, names):
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value)), *params)


@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_draws_have_the_moments_and_expand(name, make, params, value, names):
    d = make(D, *(tg.tensor(p) for p in params))
    check_draw_moments(d, n=60000)
    e = d.expand((5, *d.batch_shape))
    assert type(e) is D.MixtureSameFamily and e.batch_shape == (5, *d.batch_shape)
    assert e.log_prob(e.sample()).shape == e.batch_shape


def test_bad_arguments_raise():
    normal = D.Normal(tg.zeros((2, 3)), 1.0)
    with pytest.raises(ValueError, match="MixtureSameFamily: mixture_distribution must be a "
                       "Categorical, got Normal"):  # fmt: skip
        D.MixtureSameFamily(normal, normal)
    with pytest.raises(ValueError, match=r"the mixture's 4 components are not .* \(3\)"):
        D.MixtureSameFamily(D.Categorical(logits=tg.zeros(4)), normal)
    with pytest.raises(ValueError, match=r"batch_shape torch.Size\(\[4\]\) does not broadcast"):
        D.MixtureSameFamily(D.Categorical(logits=tg.zeros((4, 3))), normal)

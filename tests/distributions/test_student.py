"""StudentT and FisherSnedecor (`distributions.student`), and Chi2: values and gradients against
PyTorch's in float64 and finite differences, draws' moments, loc's and scale's reparameterized
gradients against finite differences, and the refusal of a draw differentiated in df."""

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

R = np.random.default_rng(7)
ALL = ["log_prob", "entropy", "mean", "variance", "stddev", "mode"]

CASES = [
    ("student_t", lambda d, df, a, b: d.StudentT(df, a, b),
     [np.array([0.8, 1.5, 3.0, 9.0]), R.standard_normal(4), R.uniform(0.5, 2, 4)],
     R.standard_normal((2, 4)) * 3, ALL),
    ("student_t_default", lambda d, df: d.StudentT(df), [R.uniform(2.5, 6, 3)],
     R.standard_normal((2, 3)), ALL),
    ("fisher_snedecor", lambda d, a, b: d.FisherSnedecor(a, b),
     [np.array([1.5, 3.0, 6.0, 10.0]), np.array([1.5, 3.0, 5.0, 12.0])],
     R.uniform(0.1, 4, (2, 4)), ["log_prob", "mean", "variance", "mode"]),
    ("chi2", lambda d, df: d.Chi2(df), [R.uniform(0.5, 8, 3)], R.uniform(0.1, 9, (2, 3)),
     ["log_prob", "entropy", "mean", "variance", "mode"]),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_values_match_torch(name, make, params, value, names):
    compare_with_torch(make, params, value, names)


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_match_torch(name, make, params, value, names):
    compare_gradients_with_torch(make, params, value, entropy="entropy" in names)


@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_of_log_prob_match_finite_differences(name, make, params, value, names):
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value)), *params)


def test_draws_have_the_moments():
    check_draw_moments(D.StudentT(tg.tensor([5.0, 9.0]), tg.tensor([1.0, -2.0]), 2.0), n=100000)
    check_draw_moments(D.FisherSnedecor(tg.tensor([4.0, 8.0]), tg.tensor([12.0, 20.0])),
                       n=100000, variance=False)  # fmt: skip
    check_draw_moments(D.Chi2(tg.tensor([0.7, 3.0, 12.0])))


def test_draws_are_reparameterized_in_loc_scale_and_df():
    df = tg.tensor(np.array([3.0, 7.0]))

    def draws(loc, scale):
        tg.manual_seed(2)
        return D.StudentT(df, loc, scale).rsample((3,))

    check_grad(draws, R.standard_normal(2), R.uniform(0.5, 2, 2))
    trainable = tg.tensor(np.array([5.0, 9.0]), requires_grad=True)
    tg.manual_seed(4)
    # E[x^2] = df / (df - 2): its derivative -2 / (df - 2)^2, by the draws' average gradient
    (D.StudentT(trainable).rsample((60_000,)) ** 2).mean(0).sum().backward()
    np.testing.assert_allclose(trainable.grad.numpy(), [-2 / 9, -2 / 49], rtol=0.1)
    trainable.grad = None
    D.FisherSnedecor(trainable, 12.0).rsample((4,)).sum().backward()
    assert np.all(np.isfinite(trainable.grad.numpy())) and np.all(trainable.grad.numpy() != 0)
    with pytest.raises(ValueError, match="Expected parameter df .*StudentT"):
        D.StudentT(tg.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="Expected parameter df .*Chi2"):
        D.Chi2(tg.tensor([-1.0]))
    c = D.Chi2(tg.tensor([1.0, 2.0])).expand((3, 2))
    assert type(c) is D.Chi2 and c.df.shape == (3, 2)

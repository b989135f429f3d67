"""LKJCholesky and Wishart (`distributions.matrix_families`): log_prob, entropy and moments against
PyTorch's in float64 with gradients and finite differences; draws in the support with the
right moments (LKJ: every correlation's marginal variance, 1 / (2 eta + d - 1), which PyTorch's
draws miss beyond the second row); Wishart draws reparameterized in the scale and in df."""

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

R = np.random.default_rng(16)


def _corr_cholesky(n, *batch):
    a = R.standard_normal((*batch, n, n))
    L = np.linalg.cholesky(a @ np.swapaxes(a, -1, -2) + np.eye(n))
    return L / np.linalg.norm(L, axis=-1, keepdims=True)


def _spd(n):
    a = R.standard_normal((n, n))
    return a @ a.T + np.eye(n)


COV = _spd(3)
FACTOR = np.eye(3) * 1.5 + R.standard_normal((3, 3)) * 0.3  # covariances a a^T: symmetric
WISHART_VALUES = np.stack([_spd(3) for _ in range(4)])[:, None]  # (4, 1, 3, 3)
CASES = [
    ("lkj", lambda d, c: d.LKJCholesky(4, c), [np.array([0.5, 1.0, 3.0])],
     _corr_cholesky(4, 2, 3), ["log_prob"]),
    ("wishart_covariance", lambda d, df, a: d.Wishart(df, covariance_matrix=a @ a.mT),
     [np.array([3.5, 6.0]), FACTOR], WISHART_VALUES,
     ["log_prob", "entropy", "mean", "mode", "variance"]),
    ("wishart_scale_tril", lambda d, df, t: d.Wishart(df, scale_tril=t.tril()),
     [np.array([4.0]), np.linalg.cholesky(COV)], WISHART_VALUES, ["log_prob", "entropy", "mean"]),
    ("wishart_precision", lambda d, df, a: d.Wishart(df, precision_matrix=a @ a.mT),
     [np.array([5.0, 9.0]), FACTOR], WISHART_VALUES, ["log_prob", "entropy", "mean"]),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_values_and_gradients_match_torch(name, make, params, value, names):
    compare_with_torch(make, params, value, names)
    compare_gradients_with_torch(make, params, value, entropy="entropy" in names)


@pytest.mark.parametrize("name, make, params, value, names", CASES, ids=IDS)
def test_gradients_match_finite_differences(name, make, params, value, names):
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value)), *params)


def test_lkj_log_prob_normalizes_for_two_dimensions():
    """For dim 2 the factor is fixed by one correlation r: the density of r integrates to one."""
    d = D.LKJCholesky(2, tg.tensor(np.array([1.3, 2.5])))  # bounded densities
    r = np.linspace(-1 + 1e-9, 1 - 1e-9, 200001)
    L = np.zeros((len(r), 1, 2, 2))
    L[:, 0, 0, 0], L[:, 0, 1, 0], L[:, 0, 1, 1] = 1.0, r, np.sqrt(1 - r * r)
    density = np.exp(d.log_prob(tg.tensor(L)).numpy())  # over the factor's free entry r
    np.testing.assert_allclose(np.trapezoid(density, r, axis=0), 1.0, rtol=1e-4)


@pytest.mark.parametrize("dim", [3, 5])
def test_lkj_draws_have_the_correlations_marginal_variance(dim):
    eta = np.array([0.5, 2.0])
    d = D.LKJCholesky(dim, tg.tensor(eta))
    tg.manual_seed(0)
    n = 40000
    x = d.sample((n,))
    assert bool(D.constraints.corr_cholesky.check(x).numpy().all())
    C = np.einsum("...ij,...kj->...ik", x.numpy(), x.numpy())
    rows, cols = np.tril_indices(dim, -1)
    r = C[..., rows, cols]  # (n, 2, pairs)
    var = 1 / (2 * eta + dim - 1)
    se = np.sqrt(2 / n) * var  # about the variance's standard error (light tails)
    assert np.all(np.abs(r.var(0) - var[:, None]) < 5 * se[:, None]), (r.var(0), var)
    assert np.all(np.abs(r.mean(0)) < 5 * np.sqrt(var[:, None] / n))
    e = d.expand((3, 2))
    assert e.batch_shape == (3, 2) and e.log_prob(e.sample()).shape == (3, 2)


def test_wishart_draws_have_its_mean_and_variance_and_gradients_in_the_scale():
    d = D.Wishart(tg.tensor(np.array([4.0, 7.5])), covariance_matrix=tg.tensor(COV))
    tg.manual_seed(0)
    n = 40000
    s = d.sample((n,)).numpy()
    assert bool(d.support.check(tg.tensor(s)).numpy().all())
    var = d.variance.numpy()
    assert np.all(np.abs(s.mean(0) - d.mean.numpy()) < 5 * np.sqrt(var / n))
    np.testing.assert_allclose(s.var(0), var, rtol=0.1)

    def draws(scale_tril):
        tg.manual_seed(1)
        return D.Wishart(tg.tensor(5.0, dtype=tg.float64), scale_tril=scale_tril.tril()).rsample()

    check_grad(draws, np.linalg.cholesky(COV))
    df = tg.tensor(np.array(5.0), requires_grad=True)
    tg.manual_seed(2)
    D.Wishart(df, tg.tensor(COV)).rsample((20_000,)).mean(0).sum().backward()
    assert float(df.grad) == pytest.approx(COV.sum(), rel=0.05)  # E[W] = df * COV
    e = d.expand((3, 2))
    assert e.batch_shape == (3, 2) and e.log_prob(e.sample()).shape == (3, 2)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="LKJCholesky: expected dim to be an integer greater"):
        D.LKJCholesky(1)
    with pytest.raises(ValueError, match="Wishart: exactly one of covariance_matrix"):
        D.Wishart(3.0)
    with pytest.raises(ValueError, match=r"Wishart: df expected to be greater than ndim - 1 = 2"):
        D.Wishart(tg.tensor(1.5), tg.tensor(COV))
    with pytest.warns(UserWarning, match="low df values"):
        D.Wishart(tg.tensor(2.5, dtype=tg.float64), tg.tensor(COV))
    with pytest.raises(tg.ShapeError, match="Wishart: covariance_matrix must be a batch of "
                       "square matrices"):  # fmt: skip
        D.Wishart(tg.tensor(4.0), tg.zeros((3, 2)))

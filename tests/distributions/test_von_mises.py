"""VonMises (`distributions.von_mises`): log_prob, mean and variance against PyTorch's in float64
with gradients; the density integrates to one over the circle, and its Bessel approximation is
within 2e-7 of I0; draws' circular mean and variance."""

from __future__ import annotations

import math

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

R = np.random.default_rng(15)
LOC, KAPPA = np.array([0.3, -2.0, 3.0, 1.0]), np.array([0.2, 3.0, 40.0, 900.0])


def make(d, loc, kappa):
    return d.VonMises(loc, kappa)


@needs_torch
def test_values_and_gradients_match_torch():
    value = R.uniform(-math.pi, math.pi, (3, 4))
    compare_with_torch(make, [LOC, KAPPA], value, ["log_prob", "mean", "mode", "variance"])
    compare_gradients_with_torch(make, [LOC, KAPPA], value, entropy=False)


def test_gradients_match_finite_differences():
    value = R.uniform(-math.pi, math.pi, (3, 4))
    check_grad(lambda a, k: make(D, a, k).log_prob(tg.tensor(value)), LOC, KAPPA)


def test_the_density_integrates_to_one_and_the_bessel_function_is_i0():
    d = make(D, tg.tensor(LOC), tg.tensor(KAPPA))
    x = np.linspace(-math.pi, math.pi, 400001)[:, None]
    p = np.exp(d.log_prob(tg.tensor(x)).numpy())
    np.testing.assert_allclose(np.trapezoid(p, x, axis=0), 1.0, rtol=2e-7)
    k = tg.tensor(np.array([0.1, 2.0, 3.7, 3.8, 20.0]))
    exact = np.log(tg.i0(k).numpy())
    from tracegrad.distributions.von_mises import log_modified_bessel

    np.testing.assert_allclose(log_modified_bessel(k, 0).numpy(), exact, rtol=2e-7, atol=2e-7)


def test_draws_have_the_circular_mean_and_variance():
    d = make(D, tg.tensor(LOC), tg.tensor(KAPPA))
    tg.manual_seed(0)
    n = 40000
    s = d.sample((n,)).numpy()
    assert s.min() >= -math.pi and s.max() < math.pi
    resultant = np.exp(1j * s).mean(0)
    variance = d.variance.numpy()
    se = np.sqrt((1 - (1 - variance) ** 2) / n)  # a loose bound on the resultant's spread
    assert np.all(np.abs((1 - np.abs(resultant)) - variance) < 5 * se), (resultant, variance)
    angle_error = np.angle(resultant * np.exp(-1j * LOC))
    assert np.all(np.abs(angle_error) < 5 * se / (1 - variance))
    assert not d.sample().requires_grad and not d.has_rsample
    e = d.expand((2, 4))
    assert e.batch_shape == (2, 4) and e.log_prob(e.sample()).shape == (2, 4)


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="Expected parameter concentration .*VonMises"):
        D.VonMises(0.0, tg.tensor([-1.0]))

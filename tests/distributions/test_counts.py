"""The count families (`distributions.counts`): log_prob, entropy and moments against PyTorch's in
float64 with their gradients; draws' frequencies against the probabilities (by inversion and
by transformed rejection, both sides of each method's threshold) and moments; a traced step
draws what the eager one draws; the errors."""

from __future__ import annotations

import itertools
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
    needs_torch,
)

R = np.random.default_rng(5)
N_TRIALS = np.array([5.0, 12.0, 30.0])
MOMENTS = ["log_prob", "mean", "variance", "mode"]

# (id, make, parameters, value, what to compare, whether the entropy has a gradient to compare)
CASES = [
    ("poisson", lambda d, r: d.Poisson(r), [R.uniform(0.5, 20, 3)],
     R.integers(0, 25, (2, 3)).astype(float), MOMENTS, False),
    ("binomial_probs", lambda d, p: d.Binomial(tg_or_torch(d, N_TRIALS), probs=p),
     [R.uniform(0.1, 0.9, 3)], np.array([[0.0, 7.0, 30.0], [5.0, 12.0, 3.0]]), MOMENTS,
     False),
    ("binomial_logits", lambda d, x: d.Binomial(tg_or_torch(d, N_TRIALS), logits=x),
     [R.standard_normal(3) * 2], np.array([[1.0, 0.0, 30.0], [5.0, 12.0, 17.0]]), MOMENTS,
     False),
    ("binomial_homogeneous", lambda d, p: d.Binomial(10, probs=p), [R.uniform(0.1, 0.9, 3)],
     np.array([[1.0, 0.0, 10.0], [5.0, 7.0, 2.0]]), [*MOMENTS, "entropy"], True),
    ("geometric_probs", lambda d, p: d.Geometric(probs=p), [R.uniform(0.1, 0.9, 3)],
     R.integers(0, 9, (2, 3)).astype(float), [*MOMENTS, "entropy"], True),
    ("geometric_logits", lambda d, x: d.Geometric(logits=x), [R.standard_normal(3)],
     R.integers(0, 9, (2, 3)).astype(float), [*MOMENTS, "entropy"], True),
    ("negative_binomial_probs", lambda d, n, p: d.NegativeBinomial(n, probs=p),
     [R.uniform(0.5, 8, 3), R.uniform(0.1, 0.9, 3)], R.integers(0, 20, (2, 3)).astype(float),
     MOMENTS, False),
    ("negative_binomial_logits", lambda d, n, x: d.NegativeBinomial(n, logits=x),
     [R.uniform(0.5, 8, 3), R.standard_normal(3)], R.integers(0, 20, (2, 3)).astype(float),
     MOMENTS, False),
    ("multinomial", lambda d, p: d.Multinomial(7, probs=p), [R.dirichlet(np.ones(4), 2)],
     np.array([[2.0, 0.0, 4.0, 1.0], [0.0, 0.0, 0.0, 7.0]]),
     ["log_prob", "mean", "variance"], True),  # entropy: below (PyTorch's lgamma(7) is float32)
    ("multinomial_logits", lambda d, x: d.Multinomial(5, logits=x), [R.standard_normal((2, 3))],
     np.array([[2.0, 0.0, 3.0], [1.0, 1.0, 3.0]]), ["log_prob", "mean", "variance"], False),
]  # fmt: skip
IDS = [c[0] for c in CASES]


def tg_or_torch(module, array):
    """A fixed (not differentiated) tensor of either module."""
    if module is D:
        return tg.tensor(array)
    import torch

    return torch.tensor(array)


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names, entropy_grad", CASES, ids=IDS)
def test_values_match_torch(name, make, params, value, names, entropy_grad):
    compare_with_torch(make, params, value, names)


@needs_torch
@pytest.mark.parametrize("name, make, params, value, names, entropy_grad", CASES, ids=IDS)
def test_gradients_match_torch(name, make, params, value, names, entropy_grad):
    compare_gradients_with_torch(make, params, value, entropy=entropy_grad)


@pytest.mark.parametrize("name, make, params, value, names, entropy_grad", CASES, ids=IDS)
def test_gradients_of_log_prob_match_finite_differences(name, make, params, value, names,
                                                        entropy_grad):  # fmt: skip
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value)), *params)


@pytest.mark.parametrize("name, make, params, value, names, entropy_grad", CASES, ids=IDS)
def test_draws_have_the_moments_shapes_and_support(name, make, params, value, names,
                                                   entropy_grad):  # fmt: skip
    d = make(D, *(tg.tensor(p) for p in params))
    x = check_draw_moments(d)
    assert np.all(x == np.round(x)) and np.all(x >= 0)
    assert bool(d.support.check(tg.tensor(x)).numpy().all())
    assert d.sample((2, 3)).shape == (2, 3, *d.batch_shape, *d.event_shape)
    e = d.expand((4, *d.batch_shape))
    assert e.batch_shape == (4, *d.batch_shape) and type(e) is type(d)
    assert e.log_prob(e.sample()).shape == e.batch_shape


def _frequencies_match(draws, log_pmf, values):
    """Each value's frequency within 4.5 binomial standard errors of its probability."""
    p = np.exp(log_pmf)
    n = len(draws)
    freq = np.array([(draws == k).mean(0) for k in values])
    assert np.all(np.abs(freq - p) < 4.5 * np.sqrt(p * (1 - p) / n) + 1e-12), (freq, p)


@pytest.mark.parametrize("rate", [0.0, 0.7, 3.0, 9.9, 10.0, 45.0, 800.0])
def test_poisson_frequencies_are_the_probabilities(rate):
    """Rates below 10 are drawn by inversion, 10 and above by PTRS."""
    d = D.Poisson(tg.tensor(np.float64(rate)))
    tg.manual_seed(1)
    x = d.sample((40000,)).numpy()
    values = np.arange(max(0, int(rate - 3 * math.sqrt(rate))), int(rate + 3 * math.sqrt(rate)) + 2)
    _frequencies_match(x, d.log_prob(tg.tensor(values.astype(float))).numpy(), values)


@pytest.mark.parametrize("n, p", [(1, 0.3), (10, 0.3), (10, 0.95), (40, 0.24), (40, 0.26),
                                  (200, 0.4), (2000, 0.97), (7, 0.0), (7, 1.0)])  # fmt: skip
def test_binomial_frequencies_are_the_probabilities(n, p):
    """n min(p, 1 - p) below 10 is drawn by inversion, above by BTRS; p > 1/2 mirrored."""
    d = D.Binomial(tg.tensor(float(n)), tg.tensor(p))
    tg.manual_seed(2)
    x = d.sample((40000,)).numpy()
    assert x.min() >= 0 and x.max() <= n
    sd = math.sqrt(n * p * (1 - p))
    values = np.arange(max(0, int(n * p - 3 * sd)), min(n, int(n * p + 3 * sd) + 1) + 1)
    _frequencies_match(x, d.log_prob(tg.tensor(values.astype(float))).numpy(), values)


def test_a_traced_step_draws_what_the_eager_one_draws():
    rate = tg.tensor(np.array([0.5, 4.0, 30.0, 300.0]))
    counts = tg.tensor(np.array([3.0, 20.0, 100.0, 1000.0]))

    def step(rate, counts):
        b = D.Binomial(counts, probs=rate / 400.0).sample((3,))
        n = D.NegativeBinomial(counts, logits=rate / 100).sample()
        return D.Poisson(rate).sample((5,)), b, n

    tg.manual_seed(4)
    want = [step(rate, counts) for _ in range(2)]
    traced = tg.trace(step)
    tg.manual_seed(4)
    got = [traced(rate, counts) for _ in range(2)]
    for a, b in zip(got, want, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert not np.array_equal(got[0][0].numpy(), got[1][0].numpy())


def test_multinomial_entropy_is_the_sum_over_its_support():
    probs = R.dirichlet(np.ones(4), 2)
    d = D.Multinomial(7, probs=tg.tensor(probs))
    support = [c for c in itertools.product(range(8), repeat=4) if sum(c) == 7]
    x = tg.tensor(np.array(support, dtype=float)[:, None, :])  # (120, 1, 4)
    log_p = d.log_prob(x).numpy()
    np.testing.assert_allclose(np.exp(log_p).sum(0), 1.0, rtol=1e-12)
    np.testing.assert_allclose(d.entropy().numpy(), -(np.exp(log_p) * log_p).sum(0), rtol=1e-12)


def test_the_interface_pyro_and_others_read():
    b = D.Binomial(10, logits=tg.tensor([0.0, 1.0]))
    assert b.param_shape == (2,) and "probs" not in b.__dict__
    np.testing.assert_allclose(b.probs.numpy(), [0.5, 1 / (1 + math.exp(-1))])
    assert b.enumerate_support().shape == (11, 2)
    assert b.support.upper_bound.numpy().tolist() == [10.0, 10.0]
    m = D.Multinomial(4, probs=tg.tensor([0.2, 0.8]))
    assert (m.batch_shape, m.event_shape) == ((), (2,)) and m.support.upper_bound == 4
    assert float(D.Poisson(3.0).log_prob(0.0)) == pytest.approx(-3.0)
    assert float(D.Poisson(0.0).log_prob(0.0)) == 0.0
    assert float(D.Geometric(1.0, validate_args=False).log_prob(0.0)) == 0.0


def test_bad_arguments_raise_naming_the_distribution():
    with pytest.raises(ValueError, match="Binomial: either probs or logits"):
        D.Binomial(3)
    with pytest.raises(ValueError, match=r"Expected parameter probs.*Geometric.*positive"):
        D.Geometric(tg.tensor([0.5, 0.0]))
    with pytest.raises(ValueError, match="Expected parameter rate.*Poisson.*GreaterThanEq"):
        D.Poisson(tg.tensor([-1.0]))
    with pytest.raises(ValueError, match="Expected parameter total_count.*Binomial"):
        D.Binomial(tg.tensor([2.5]), tg.tensor([0.5]))
    with pytest.raises(NotImplementedError, match="Multinomial: an inhomogeneous total_count"):
        D.Multinomial(tg.tensor([3.0]), tg.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"Binomial.log_prob: expected value .*IntegerInterval"):
        D.Binomial(3, tg.tensor([0.5])).log_prob(tg.tensor([4.0]))
    with pytest.raises(NotImplementedError, match="Binomial.entropy: an inhomogeneous"):
        D.Binomial(tg.tensor([2.0, 3.0]), tg.tensor([0.5, 0.5])).entropy()

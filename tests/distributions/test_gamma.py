"""The gamma family (`distributions.gamma`): draws against the moments and, where closed, the
distribution function (a Kolmogorov-Smirnov bound); densities and entropies against Python's
`math.lgamma` and numerical integration; the cdfs of Gamma and Chi2 (the incomplete gamma
function) against closed forms and PyTorch's, differentiable in the rate and the value; the
rate's reparameterized gradient against finite differences; the concentration's (implicit)
against the quantile function's finite differences, the moments' derivatives and PyTorch's
approximation; a traced step drawing mixup weights as eager does."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad.distributions import Beta, Chi2, Dirichlet, Gamma

F64 = np.float64


def t(x):
    return tg.tensor(np.asarray(x, F64))


@pytest.mark.parametrize("a, b", [(0.3, 2.0), (1.0, 1.0), (2.5, 0.5), (40.0, 3.0)])
def test_gamma_draws_have_its_moments(a, b):
    tg.manual_seed(1)
    n = 200_000
    x = Gamma(t([a]), t([b])).sample((n,)).numpy().ravel()
    mean, var = a / b, a / b**2
    assert x.min() > 0
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / n)
    assert abs(x.var() / var - 1) < 5 * math.sqrt((2 + 6 / a) / n)  # the variance's spread


@pytest.mark.parametrize("a, cdf", [
    (1.0, lambda x: 1 - np.exp(-x)),
    (2.0, lambda x: 1 - np.exp(-x) * (1 + x)),
    (3.0, lambda x: 1 - np.exp(-x) * (1 + x + x * x / 2)),
])  # fmt: skip
def test_gamma_draws_follow_its_distribution_function(a, cdf):
    tg.manual_seed(2)
    n = 50_000
    x = np.sort(Gamma(t(a), t(1.0)).sample((n,)).numpy())
    gap = np.max(np.abs(cdf(x) - np.arange(1, n + 1) / n))
    assert gap < 1.63 / math.sqrt(n)  # Kolmogorov-Smirnov at the 1% level


def test_cdfs_closed_forms_and_gradients():
    x = np.array([[0.05], [0.7], [2.0], [9.0]])
    rate = np.array([0.5, 1.0, 3.0])
    got = Gamma(t([1.0, 1.0, 1.0]), t(rate)).cdf(t(x)).numpy()
    np.testing.assert_allclose(got, -np.expm1(-rate * x), rtol=1e-14)
    got = Chi2(t([2.0, 4.0])).cdf(t(x)).numpy()  # 1 - e^-y and 1 - e^-y (1 + y), y = x/2
    y = x / 2
    want = np.concatenate([-np.expm1(-y), -np.expm1(-y) - y * np.exp(-y)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    a = t([0.5, 2.5, 4.0])
    check_grad(lambda r, v: Gamma(a, r).cdf(v), rate, x + 0.1, tol=1e-6)
    with pytest.raises(NotImplementedError, match="derivative for 'igamma: input'"):
        Gamma(a.requires_grad_(), t(rate)).cdf(t(x)).sum().backward()


def test_cdfs_match_torch():
    torch = pytest.importorskip("torch")
    a, b = np.array([0.3, 2.5, 40.0]), np.array([1.5, 0.7, 2.0])
    v = np.random.default_rng(4).uniform(0.01, 30, (5, 3))
    ours = Gamma(t(a), t(b)).cdf(t(v)).numpy()
    theirs = torch.distributions.Gamma(torch.tensor(a), torch.tensor(b)).cdf(torch.tensor(v))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=5e-9)  # a = 40: PyTorch's float pi
    ours = Chi2(t(a)).cdf(t(v)).numpy()
    theirs = torch.distributions.Chi2(torch.tensor(a)).cdf(torch.tensor(v))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12)


def test_beta_and_dirichlet_draws_have_their_moments():
    tg.manual_seed(3)
    n = 100_000
    x = Beta(t([0.4]), t([0.7])).sample((n,)).numpy().ravel()
    a, b = 0.4, 0.7
    assert 0 < x.min() and x.max() < 1
    assert abs(x.mean() - a / (a + b)) < 5 * math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)) / n)
    c = np.array([1.0, 2.0, 3.0])
    d = Dirichlet(t(c)).sample((n,)).numpy()
    np.testing.assert_allclose(d.sum(-1), 1.0, rtol=1e-12)
    want = c / c.sum()
    spread = np.sqrt(want * (1 - want) / (c.sum() + 1) / n)
    assert np.all(np.abs(d.mean(0) - want) < 5 * spread)


def test_densities_against_math_lgamma():
    a, b, x = 2.5, 1.5, 0.7
    want = a * math.log(b) + (a - 1) * math.log(x) - b * x - math.lgamma(a)
    assert float(Gamma(t(a), t(b)).log_prob(t(x))) == pytest.approx(want, rel=1e-12)
    p, q = 0.4, 3.0
    want = ((p - 1) * math.log(x) + (q - 1) * math.log1p(-x) + math.lgamma(p + q) - math.lgamma(p)
            - math.lgamma(q))  # fmt: skip
    assert float(Beta(t(p), t(q)).log_prob(t(x))) == pytest.approx(want, rel=1e-12)
    c, v = [1.0, 2.0, 3.0], [0.2, 0.3, 0.5]
    want = (sum((ci - 1) * math.log(vi) for ci, vi in zip(c, v, strict=True))
            + math.lgamma(sum(c)) - sum(math.lgamma(ci) for ci in c))  # fmt: skip
    assert float(Dirichlet(t(c)).log_prob(t(v))) == pytest.approx(want, rel=1e-12)
    assert float(Dirichlet(t([1.0, 1.0, 1.0])).log_prob(t(v))) == pytest.approx(math.log(2))


def integrate(f, lo, hi, n=2_000_000):
    """The midpoint rule: no point at the ends, where a density may be infinite."""
    width = (hi - lo) / n
    return float(np.sum(f(lo + width * (np.arange(n) + 0.5))) * width)


@pytest.mark.parametrize("a, b", [(2.5, 1.5), (1.0, 3.0), (7.0, 0.5)])
def test_gamma_entropy_by_integration(a, b):
    dist = Gamma(t(a), t(b))
    density = lambda x: np.exp(dist.log_prob(t(x)).numpy())  # noqa: E731
    want = integrate(lambda x: -density(x) * np.log(density(x)), 0, 80 / b)
    assert float(dist.entropy()) == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("a, b", [(2.0, 3.0), (1.5, 1.5), (5.0, 2.0)])
def test_beta_entropy_and_moments_by_integration(a, b):
    dist = Beta(t(a), t(b))
    density = lambda x: np.exp(dist.log_prob(t(x)).numpy())  # noqa: E731
    assert integrate(density, 0, 1) == pytest.approx(1.0, abs=1e-5)
    assert float(dist.mean) == pytest.approx(integrate(lambda x: x * density(x), 0, 1), abs=1e-5)
    want = integrate(lambda x: -density(x) * np.log(density(x)), 0, 1)
    assert float(dist.entropy()) == pytest.approx(want, abs=1e-5)


def test_dirichlet_entropy_of_the_uniform_simplex():
    assert float(Dirichlet(t([1.0, 1.0, 1.0])).entropy()) == pytest.approx(-math.log(2))


def test_rsample_is_differentiable_in_the_rate():
    rate = t([0.5, 2.0]).requires_grad_()

    def draws(r):
        tg.manual_seed(5)
        return Gamma(t([1.5, 3.0]), r).rsample((4,))

    draws(rate).sum().backward()
    h = 1e-6
    for i in range(2):
        step = np.zeros(2)
        step[i] = h
        up = float(draws(t(rate.detach().numpy() + step)).sum())
        down = float(draws(t(rate.detach().numpy() - step)).sum())
        assert float(rate.grad[i]) == pytest.approx((up - down) / (2 * h), rel=1e-6)


def _quantile(a: float, p: float) -> float:
    """x with P(a, x) = p, by bisection on the incomplete gamma function."""
    lo, hi = 0.0, a + 50.0 * math.sqrt(a) + 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(tg.igamma(t(a), t(mid))) < p else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("a", [0.2, 1.0, 3.5, 40.0])
def test_a_draw_moves_with_its_concentration_as_its_quantile_does(a):
    """dx/da of a draw is the derivative of the quantile at the draw's level, x(a) = F^-1(P(a0,
    x0); a): checked by central differences of the quantile function itself."""
    tg.manual_seed(3)
    alpha = t([a] * 4).requires_grad_()
    x = Gamma(alpha, t([1.0] * 4)).rsample()
    x.sum().backward()
    h = 1e-4 * a
    for xi, gi in zip(x.detach().numpy(), alpha.grad.numpy(), strict=True):
        level = float(tg.igamma(t(a), t(xi)))
        slope = (_quantile(a + h, level) - _quantile(a - h, level)) / (2 * h)
        assert gi == pytest.approx(slope, rel=1e-5, abs=1e-9)


def test_concentration_gradients_average_to_the_moments_derivatives():
    """E[dx/da] = dE[x]/da: Gamma(a, b)'s mean a / b, Beta's a / (a + b), Dirichlet's a_i / S."""
    tg.manual_seed(5)
    n = 40_000
    a, b = t([2.5]).requires_grad_(), t([1.5]).requires_grad_()
    Gamma(a, b).rsample((n,)).mean().backward()
    assert float(a.grad[0]) == pytest.approx(1 / 1.5, rel=0.03)  # d(a / b)/da
    assert float(b.grad[0]) == pytest.approx(-2.5 / 1.5**2, rel=0.03)  # the rate's, exact
    a, b = t(2.0).requires_grad_(), t(3.0).requires_grad_()
    Beta(a, b).rsample((n,)).mean().backward()
    assert float(a.grad) == pytest.approx(3.0 / 25.0, rel=0.05)
    assert float(b.grad) == pytest.approx(-2.0 / 25.0, rel=0.05)
    c = t([1.0, 2.0, 3.0]).requires_grad_()
    Dirichlet(c).rsample((n,))[:, 0].mean().backward()
    np.testing.assert_allclose(c.grad.numpy(), [5 / 36, -1 / 36, -1 / 36], atol=0.006)
    df = t(4.0).requires_grad_()
    Chi2(df).rsample((n,)).mean().backward()
    assert float(df.grad) == pytest.approx(1.0, rel=0.03)


def test_the_implicit_gradient_agrees_with_pytorchs_approximation():
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")
    from tracegrad.core import primitives as P

    alpha = np.repeat([0.05, 0.3, 1.0, 2.5, 10.0, 150.0, 1000.0], 40)
    x = np.random.default_rng(1).gamma(alpha)
    ours = P.gamma_draw_slope(t(x), t(alpha)).numpy()
    theirs = torch._standard_gamma_grad(torch.tensor(alpha), torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-3)  # PyTorch's is within 3e-4
    import tracegrad.torch as tt

    np.testing.assert_allclose(tt._standard_gamma_grad(t(alpha), t(x)).numpy(), ours)


def test_a_traced_step_draws_mixup_weights_as_eager():
    """Mixup's Beta(alpha, alpha) weight drawn inside a compiled step: from the same seed, the
    same weights and losses as the eager step, and fresh ones at each call."""
    layer = tg.nn.Linear(4, 3).to(tg.float64)
    x = tg.randn(8, 4, dtype=tg.float64)
    y = tg.randn(8, 3, dtype=tg.float64)

    def step():
        lam = Beta(t(0.4), t(0.4)).sample()
        mixed = lam * x + (1 - lam) * x.flip(0)
        return ((layer(mixed) - y) ** 2).mean()

    traced = tg.trace(step)
    tg.manual_seed(7)
    got = [float(traced()) for _ in range(4)]
    tg.manual_seed(7)
    want = [float(step()) for _ in range(4)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert len(set(np.round(got, 12))) == 4  # fresh draws at each call

"""`TransformedDistribution` and the transforms: log_prob against PyTorch's (float64, with
gradients) and against the change-of-variables formula written in NumPy, gradients of log_prob
and of the transformed draws against finite differences, the cache that lets a saturated tanh
draw be scored, and a SAC-style actor step (tanh-squashed Gaussian) traced on both backends
against the eager step."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D
from tests.conftest import check_grad
from tracegrad import nn
from tracegrad.compiler import lowering

try:
    import torch
    import torch.distributions as TD
except ImportError:  # the checks without PyTorch still run
    torch = TD = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(4)
MU, SIGMA = R.standard_normal((2, 3)), R.uniform(0.5, 1.5, (2, 3))

# (id, the transformed distribution made with a module's classes, a value in its support)
CASES = [
    ("tanh", lambda d, m, s: d.TransformedDistribution(d.Normal(m, s), d.TanhTransform()),
     R.uniform(-0.95, 0.95, (4, 2, 3))),
    ("affine_exp", lambda d, m, s: d.TransformedDistribution(
        d.Normal(m, s), [d.AffineTransform(0.5, 2.0), d.ExpTransform()]),
     R.uniform(0.2, 4, (4, 2, 3))),
    ("sigmoid", lambda d, m, s: d.TransformedDistribution(d.Normal(m, s), d.SigmoidTransform()),
     R.uniform(0.05, 0.95, (4, 2, 3))),
    ("independent_tanh", lambda d, m, s: d.TransformedDistribution(
        d.Independent(d.Normal(m, s), 1), [d.TanhTransform()]), R.uniform(-0.9, 0.9, (4, 2, 3))),
    ("compose", lambda d, m, s: d.TransformedDistribution(
        d.Normal(m, s), d.ComposeTransform([d.AffineTransform(-1.0, 0.5), d.TanhTransform()])),
     R.uniform(-0.9, 0.9, (4, 2, 3))),
    ("affine_event", lambda d, m, s: d.TransformedDistribution(
        d.Normal(m, s), d.AffineTransform(1.0, -3.0, event_dim=1)), R.standard_normal((4, 2, 3))),
]  # fmt: skip
IDS = [c[0] for c in CASES]


@needs_torch
@pytest.mark.parametrize("name, make, value", CASES, ids=IDS)
def test_log_prob_and_its_gradients_match_torch(name, make, value):
    xs = [tg.tensor(a, requires_grad=True) for a in (MU, SIGMA)]
    ts = [torch.tensor(a, requires_grad=True) for a in (MU, SIGMA)]
    ours, theirs = make(D, *xs), make(TD, *ts)
    assert (ours.batch_shape, ours.event_shape) == (theirs.batch_shape, theirs.event_shape)
    lp, want = ours.log_prob(tg.tensor(value)), theirs.log_prob(torch.tensor(value))
    np.testing.assert_allclose(lp.numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-12)
    c = np.random.default_rng(0).standard_normal(want.shape)
    (lp * tg.tensor(c)).sum().backward()
    (want * torch.tensor(c)).sum().backward()
    for x, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name, make, value", CASES, ids=IDS)
def test_gradients_of_log_prob_and_draws_match_finite_differences(name, make, value):
    check_grad(lambda m, s: make(D, m, s).log_prob(tg.tensor(value)), MU, SIGMA)

    def draws(m, s):
        tg.manual_seed(5)
        return make(D, m, s).rsample((3,))

    check_grad(draws, MU, SIGMA)


def test_log_prob_is_the_change_of_variables_formula():
    m, s = tg.tensor(MU), tg.tensor(SIGMA)
    y = CASES[0][2]
    x = np.arctanh(y)
    normal = -0.5 * ((x - MU) / SIGMA) ** 2 - np.log(SIGMA) - 0.5 * math.log(2 * math.pi)
    want = normal - np.log1p(-(y**2))
    got = D.TransformedDistribution(D.Normal(m, s), D.TanhTransform()).log_prob(tg.tensor(y))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    z = np.exp(CASES[1][2][0])
    exp = D.TransformedDistribution(D.Normal(m, s), D.ExpTransform())
    lognormal = D.LogNormal(m, s).log_prob(tg.tensor(z)).numpy()
    np.testing.assert_allclose(exp.log_prob(tg.tensor(z)).numpy(), lognormal, rtol=1e-12)
    ind = D.TransformedDistribution(D.Independent(D.Normal(m, s), 1), D.TanhTransform())
    assert (ind.batch_shape, ind.event_shape) == ((2,), (3,))
    np.testing.assert_allclose(ind.log_prob(tg.tensor(y)).numpy(), want.sum(-1), rtol=1e-10)


def test_the_cache_scores_a_saturated_tanh_draw():
    """tanh of a large draw rounds to 1.0, whose atanh is infinite: with cache_size=1 the log
    probability of the value just drawn uses the draw itself (PyTorch's), and is finite."""
    t = D.TanhTransform(cache_size=1)
    d = D.TransformedDistribution(D.Normal(tg.tensor([30.0, 0.0]), 1.0), t)
    tg.manual_seed(0)
    y = d.rsample()
    assert y.numpy()[0] == 1.0
    assert np.all(np.isfinite(d.log_prob(y).numpy()))
    uncached = D.TransformedDistribution(d.base_dist, D.TanhTransform())
    with np.errstate(divide="ignore", invalid="ignore"):
        assert not np.isfinite(uncached.log_prob(y).numpy()[0])
    x = tg.tensor([0.3])
    assert t.inv(t(x)) is x and t.inv.inv is t
    with pytest.raises(ValueError, match="TanhTransform: cache_size must be 0 or 1"):
        D.TanhTransform(cache_size=2)
    with pytest.raises(ValueError, match="transforms must be a Transform or a list"):
        D.TransformedDistribution(d.base_dist, [np.tanh])
    assert not d.sample().requires_grad and d.has_rsample


def _sac_actor(traced, backend=None, steps=3):
    """SAC's actor update: a Gaussian policy squashed by tanh, rsample, log_prob of the
    action (the entropy term), a critic's value of it."""
    tg.manual_seed(0)
    actor, critic = nn.Linear(5, 4), nn.Linear(7, 1)
    opt = tg.optim.Adam(actor.parameters(), lr=1e-2)
    obs = tg.tensor(np.random.default_rng(2).standard_normal((6, 5)).astype(np.float32))

    def step(obs):
        opt.zero_grad()
        mu, log_std = actor(obs).chunk(2, dim=-1)
        pi = D.TransformedDistribution(D.Normal(mu, log_std.clamp(-5, 2).exp()),
                                       [D.TanhTransform(cache_size=1)])  # fmt: skip
        action = pi.rsample()
        log_prob = pi.log_prob(action).sum(-1)
        q = critic(tg.cat([obs, action], dim=-1)).squeeze(-1)
        loss = (0.2 * log_prob - q).mean()
        loss.backward()
        opt.step()
        return loss, action

    if traced:
        step = tg.trace(step, backend=backend)
    out = [step(obs) for _ in range(steps)]
    losses, actions = [float(loss) for loss, _ in out], [a.numpy() for _, a in out]
    return losses, actions, [p.numpy() for p in actor.parameters()]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_sac_actor_step_matches_the_eager_one(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    want, want_actions, want_params = _sac_actor(False)
    got, actions, params = _sac_actor(True, backend)
    for a, b in zip(actions, want_actions, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(actions[0], actions[1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(params, want_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

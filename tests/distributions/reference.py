"""What the families' tests share: a family made with either module's classes from the same
float64 parameters, its values compared with PyTorch's (log_prob, entropy, moments, cdf, icdf,
shapes) and its gradients compared with PyTorch's, and draws checked by their moments."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D

try:
    import torch
    import torch.distributions as TD
except ImportError:  # the checks without PyTorch still run
    torch = TD = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def made(make, module, params, grad=False):
    """The distribution `make(module, *params)` and the parameters' tensors."""
    if module is D:
        xs = [tg.tensor(p, requires_grad=grad) for p in params]
    else:
        xs = [torch.tensor(p, requires_grad=grad) for p in params]
    return make(module, *xs), xs


def value_of(module, value):
    return tg.tensor(value) if module is D else torch.tensor(value)


def close(got, want, rtol=1e-9, atol=1e-10, what=""):
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol, err_msg=what)


def compare_with_torch(make, params, value, names, rtol=1e-9):
    """Shapes, has_rsample, and each of `names` (log_prob, entropy, mean, variance, stddev,
    mode, cdf, icdf; cdf and log_prob at `value`, icdf at a grid of probabilities) against
    PyTorch's on the same float64 inputs."""
    ours, _ = made(make, D, params)
    theirs, _ = made(make, TD, params)
    assert ours.batch_shape == tuple(theirs.batch_shape)
    assert ours.event_shape == tuple(theirs.event_shape)
    assert ours.has_rsample == theirs.has_rsample
    for name in names:
        if name in ("log_prob", "cdf"):
            got = getattr(ours, name)(value_of(D, value))
            want = getattr(theirs, name)(value_of(TD, value))
        elif name == "icdf":
            u = np.linspace(0.05, 0.95, 7).reshape((7,) + (1,) * len(ours.batch_shape))
            got, want = ours.icdf(tg.tensor(u)), theirs.icdf(torch.tensor(u))
        elif name == "entropy":
            got, want = ours.entropy(), theirs.entropy()
        else:
            got, want = getattr(ours, name), getattr(theirs, name)
        close(got, want, rtol=rtol, what=name)


def compare_gradients_with_torch(make, params, value, entropy=True, rtol=1e-7):
    """The gradients of sum(c * log_prob(value)) (+ the entropy's sum) in every parameter."""
    ours, xs = made(make, D, params, grad=True)
    theirs, ts = made(make, TD, params, grad=True)
    want = theirs.log_prob(value_of(TD, value))
    c = np.random.default_rng(1).standard_normal(want.shape)
    total = (ours.log_prob(value_of(D, value)) * tg.tensor(c)).sum()
    want = (want * torch.tensor(c)).sum()
    if entropy:
        total, want = total + ours.entropy().sum(), want + theirs.entropy().sum()
    total.backward()
    want.backward()
    for i, (x, t) in enumerate(zip(xs, ts, strict=True)):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=1e-9,
                                   err_msg=f"parameter {i}")  # fmt: skip


def check_draw_moments(d, n=40000, seed=0, sigmas=5.0, variance=True):
    """Draws' mean within `sigmas` standard errors of d.mean; their variance within `sigmas`
    standard errors (from the fourth central moment of the draws) of d.variance."""
    tg.manual_seed(seed)
    x = d.sample((n,)).numpy().astype(np.float64)
    mean, var = d.mean.numpy(), d.variance.numpy()
    assert np.all(np.abs(x.mean(0) - mean) < sigmas * np.sqrt(var / n) + 1e-12), (
        x.mean(0), mean)  # fmt: skip
    if variance:
        m4 = ((x - x.mean(0)) ** 4).mean(0)
        se = np.sqrt(np.maximum(m4 - var**2, 0) / n)
        assert np.all(np.abs(x.var(0) - var) < sigmas * se + 1e-12), (x.var(0), var)
    return x


def ks_distance(d, n=20000, seed=0):
    """The largest Kolmogorov-Smirnov distance over the batch, of n draws against d.cdf."""
    tg.manual_seed(seed)
    s = np.sort(d.sample((n,)).numpy(), axis=0)
    f = d.cdf(tg.tensor(s)).numpy()
    i = np.arange(1, n + 1).reshape((n,) + (1,) * (s.ndim - 1)) / n
    return float(np.maximum(np.abs(i - f), np.abs(i - 1 / n - f)).max()), 1.95 / math.sqrt(n)

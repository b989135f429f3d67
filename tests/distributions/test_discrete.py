"""What `distributions.discrete` adds beyond tests/distributions/test_distributions.py's checks:
OneHotCategoricalStraightThrough's draws (one-hot values, the probabilities' gradient) against
PyTorch's estimator."""

from __future__ import annotations

import numpy as np

import tracegrad as tg
import tracegrad.distributions as D
from tests.distributions.reference import needs_torch

try:
    import torch
    import torch.distributions as TD
except ImportError:
    torch = TD = None


def test_straight_through_draws_are_one_hot_with_the_probabilities_gradient():
    logits = tg.tensor(np.array([[0.1, 1.0, -0.5], [2.0, 0.0, 0.0]]), requires_grad=True)
    d = D.OneHotCategoricalStraightThrough(logits=logits)
    assert d.has_rsample
    tg.manual_seed(0)
    x = d.rsample((4,))
    assert x.shape == (4, 2, 3) and np.all(x.numpy().sum(-1) == 1)
    c = np.random.default_rng(0).standard_normal(x.shape)
    (x * tg.tensor(c)).sum().backward()
    p = d.probs.numpy()
    g = c.sum(0)  # d/dlogits of sum(c * probs): the softmax's Jacobian applied to c
    want = p * (g - (g * p).sum(-1, keepdims=True))
    np.testing.assert_allclose(logits.grad.numpy(), want, rtol=1e-12)
    e = d.expand((5, 2))
    assert type(e) is D.OneHotCategoricalStraightThrough and e.batch_shape == (5, 2)


@needs_torch
def test_straight_through_gradient_matches_torch():
    a = np.array([[0.1, 1.0, -0.5]])
    ours = tg.tensor(a, requires_grad=True)
    theirs = torch.tensor(a, requires_grad=True)
    tg.manual_seed(0)
    x = D.OneHotCategoricalStraightThrough(logits=ours).rsample()
    y = TD.OneHotCategoricalStraightThrough(logits=theirs).rsample()
    w = np.array([[0.3, -1.0, 2.0]])
    (x * tg.tensor(w)).sum().backward()
    (y * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12)

"""torch.utils.checkpoint's interface: the function's values and gradients, eagerly and in a
traced step, as without it (the memory planner chooses what a traced step keeps)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn
from tracegrad.nn import functional as F
from tracegrad.utils.checkpoint import checkpoint, checkpoint_sequential


def block(x, w, *, scale=1.0):
    return F.gelu(x @ w) * scale


def grads(use_checkpoint, x, w):
    x, w = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
    y = checkpoint(block, x, w, use_reentrant=False, scale=2.0, preserve_rng_state=True) \
        if use_checkpoint else block(x, w, scale=2.0)  # fmt: skip
    (y * y).sum().backward()
    return y.numpy(), x.grad.numpy(), w.grad.numpy()


def test_checkpoint_gives_the_functions_values_and_gradients(rng):
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    for a, b in zip(grads(True, x, w), grads(False, x, w), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_checkpoint_sequential_in_a_traced_step(rng, backend):
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(),
                          nn.Linear(8, 1)).double()  # fmt: skip
    x = rng.standard_normal((5, 4))

    def step(x):
        out = checkpoint_sequential(model, 2, x, use_reentrant=False)
        out.sum().backward()
        g = [p.grad for p in model.parameters()]
        model.zero_grad()
        return out, g

    eager_out, eager_grads = step(tg.tensor(x))
    np.testing.assert_allclose(eager_out.numpy(), model(tg.tensor(x)).numpy())
    traced_out, traced_grads = tg.trace(step, backend=backend)(x)
    np.testing.assert_allclose(traced_out.numpy(), eager_out.numpy(), rtol=1e-12)
    for a, b in zip(traced_grads, eager_grads, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10)
    with pytest.raises(ValueError, match="segments"):
        checkpoint_sequential(model, 0, x)

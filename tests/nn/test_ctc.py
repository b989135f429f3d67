"""The CTC loss: against a sum over every alignment enumerated by brute force, PyTorch's values
and gradients (repeated labels, ragged lengths, concatenated targets, impossible alignments),
finite differences, and a speech-style model's traced step against eager."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def _brute_force(log_probs, target, blank=0):
    """-log of the summed probability of every frame labelling that collapses to `target`."""
    t_len, classes = log_probs.shape
    total = 0.0
    for path in itertools.product(range(classes), repeat=t_len):
        collapsed = [c for i, c in enumerate(path) if c != blank and (i == 0 or c != path[i - 1])]
        if collapsed == list(target):
            total += math.exp(sum(log_probs[t, c] for t, c in enumerate(path)))
    return -math.log(total) if total else math.inf


@pytest.mark.parametrize("target", [[1, 2], [2, 2], [1], [2, 1, 2]])
def test_the_forward_algorithm_sums_every_alignment(rng, target):
    logits = rng.standard_normal((5, 3))
    lp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    got = F.ctc_loss(tg.tensor(lp), tg.tensor(np.array(target)), tg.tensor(5),
                     tg.tensor(len(target)), reduction="none")  # fmt: skip
    np.testing.assert_allclose(got.numpy(), _brute_force(lp, target), rtol=1e-12)


def test_gradients_match_finite_differences(rng):
    targets, lengths = tg.tensor(np.array([[1, 2, 2], [3, 1, 0]])), tg.tensor(np.array([3, 2]))
    inputs = tg.tensor(np.array([6, 5]))
    check_grad(lambda x: F.ctc_loss(F.log_softmax(x, 2), targets, inputs, lengths,
                                    reduction="none"), rng.standard_normal((6, 2, 4)))  # fmt: skip


@needs_torch
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_matches_pytorch(rng, reduction):
    logits = rng.standard_normal((12, 3, 5))
    targets = rng.integers(1, 5, (3, 4))
    targets[1, 2] = targets[1, 1]  # a repeated label needs a blank between
    lengths, frames = np.array([4, 3, 2]), np.array([12, 10, 7])
    ours, theirs = tg.tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
    got = F.ctc_loss(F.log_softmax(ours, 2), tg.tensor(targets), tg.tensor(frames),
                     tg.tensor(lengths), reduction=reduction)  # fmt: skip
    want = TF.ctc_loss(TF.log_softmax(theirs, 2), torch.tensor(targets), torch.tensor(frames),
                       torch.tensor(lengths), reduction=reduction)  # fmt: skip
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)
    flat = np.concatenate([targets[i, : lengths[i]] for i in range(3)])
    got = F.ctc_loss(F.log_softmax(tg.tensor(logits), 2), tg.tensor(flat), tg.tensor(frames),
                     tg.tensor(lengths), reduction=reduction)  # fmt: skip
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10)


def test_an_impossible_alignment_costs_inf_or_nothing(rng):
    lp = F.log_softmax(tg.tensor(rng.standard_normal((3, 2, 4)), requires_grad=True), 2)
    targets, frames = tg.tensor(np.array([[1, 2, 3, 1], [1, 2, 0, 0]])), tg.tensor(np.array([3, 3]))
    lengths = tg.tensor(np.array([4, 2]))  # four labels cannot fit in three frames
    loss = F.ctc_loss(lp, targets, frames, lengths, reduction="none").numpy()
    assert loss[0] == np.inf and np.isfinite(loss[1])
    zeroed = nn.CTCLoss(zero_infinity=True, reduction="sum")(lp, targets, frames, lengths)
    np.testing.assert_allclose(zeroed.numpy(), loss[1])


class _Recognizer(nn.Module):
    """Frames -> a GRU -> per-frame class log-probabilities, as a small speech model."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(6, 8)
        self.out = nn.Linear(8, 5)

    def forward(self, x):
        return F.log_softmax(self.out(self.rnn(x)[0]), 2)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_ctc_step_matches_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x = rng.standard_normal((10, 3, 6)).astype(np.float32)
    batches = [(rng.integers(1, 5, (3, 3)), np.array([3, 2, 3])) for _ in range(3)]

    def train(traced):
        tg.nn.manual_seed(0)
        model = _Recognizer()
        opt = tg.optim.Adam(model.parameters(), lr=0.01)
        loss_fn = nn.CTCLoss()

        def step(x, targets, lengths):  # targets and lengths are inputs of the compiled step
            opt.zero_grad()
            loss = loss_fn(model(x), targets, tg.tensor(np.array([10, 9, 8])), lengths)
            loss.backward()
            opt.step()
            return loss

        run = tg.trace(step, backend=backend) if traced else step
        losses = [float(run(tg.tensor(x), tg.tensor(t), tg.tensor(n))) for t, n in batches]
        return losses, [p.numpy() for p in model.parameters()]

    want, want_params = train(False)
    got, params = train(True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(params, want_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

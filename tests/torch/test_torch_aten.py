"""torch's top-level functions that nn.functional or a Tensor method also has, with the top
level's (ATen's) signatures, and the small top-level functions; checked against nn.functional,
NumPy and finite differences (PyTorch's own values were compared when these were written)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch
from tests.conftest import check_grad
from tracegrad.nn import functional as F

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 5))


def t(a):
    return tg.tensor(np.asarray(a, np.float64))


def test_aten_argument_orders_reach_the_functional_ones():
    x, w, b = t(X), t(RNG.standard_normal(3)), t(RNG.standard_normal(3))
    rm, rv = tg.zeros(3, dtype=tg.float64), tg.ones(3, dtype=tg.float64)
    np.testing.assert_allclose(
        torch.batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5, False).numpy(),
        F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5).numpy(),
    )
    np.testing.assert_allclose(
        torch.instance_norm(x, w, b, None, None, True, 0.1, 1e-5, False).numpy(),
        F.instance_norm(x, None, None, w, b, True, 0.1, 1e-5).numpy(),
    )
    np.testing.assert_allclose(torch.layer_norm(x, [5], None, None, 1e-5, False).numpy(),
                               F.layer_norm(x, [5]).numpy())  # fmt: skip
    table = t(RNG.standard_normal((5, 2)))
    idx = tg.tensor([[0, 4], [2, 2]])
    np.testing.assert_array_equal(torch.embedding(table, idx).numpy(), table.numpy()[idx.numpy()])
    padded = t(
        np.ones((5, 2)),
    ).requires_grad_()
    torch.embedding(padded, tg.tensor([0, 4]), 4).sum().backward()
    assert padded.grad.numpy()[4].tolist() == [0.0, 0.0] and padded.grad.numpy()[0].tolist() == [
        1,
        1,
    ]
    np.testing.assert_array_equal(torch.dropout(x, 0.5, False).numpy(), X)
    assert torch.conv1d is F.conv1d and torch.max_pool2d is F.max_pool2d


@pytest.mark.parametrize("reduction, name", [(0, "none"), (1, "mean"), (2, "sum")])
def test_losses_take_the_reduction_as_an_int(reduction, name):
    x, y = t(X), t(X > 0)
    a, b, s = t(X[0, 0]), t(X[0, 1]), t([1.0, -1, 1, -1, 1])
    pairs = [
        (torch.binary_cross_entropy_with_logits(x, y, None, None, reduction),
         F.binary_cross_entropy_with_logits(x, y, reduction=name)),
        (torch.hinge_embedding_loss(x, y * 2 - 1, 1.0, reduction),
         F.hinge_embedding_loss(x, y * 2 - 1, 1.0, reduction=name)),
        (torch.margin_ranking_loss(a, b, s, 0.1, reduction),
         F.margin_ranking_loss(a, b, s, 0.1, reduction=name)),
        (torch.cosine_embedding_loss(x[0], x[1], s[:3], 0.1, reduction),
         F.cosine_embedding_loss(x[0], x[1], s[:3], 0.1, reduction=name)),
        (torch.triplet_margin_loss(x[0], x[1], x[0] * 0.5, 1.0, 2.0, 1e-6, True, reduction),
         F.triplet_margin_loss(x[0], x[1], x[0] * 0.5, 1.0, 2.0, 1e-6, True, reduction=name)),
        (torch.poisson_nll_loss(x, y, True, True, 1e-8, reduction),
         F.poisson_nll_loss(x, y, True, True, eps=1e-8, reduction=name)),
    ]  # fmt: skip
    for got, want in pairs:
        np.testing.assert_allclose(got.numpy(), want.numpy())
    # kl_div's 1 is the mean over all elements (F's "batchmean" divides by the batch only)
    target = t(np.exp(X) * 0.5)
    pointwise = target * (target.log() - x)
    got = torch.kl_div(x, target, reduction).numpy()
    want = {"none": pointwise, "mean": pointwise.mean(), "sum": pointwise.sum()}[name].numpy()
    np.testing.assert_allclose(got, want)
    with pytest.raises(ValueError, match="reduction"):
        torch.hinge_embedding_loss(x, y, 1.0, 3)


def test_std_mean_var_mean_take_std_and_var_arguments():
    x = t(X)
    s, m = torch.std_mean(x, 1)
    np.testing.assert_allclose(s.numpy(), X.std(1, ddof=1))
    np.testing.assert_allclose(m.numpy(), X.mean(1))
    s, m = torch.std_mean(x, [0, 2], False, True)
    assert s.shape == m.shape == (1, 3, 1)
    np.testing.assert_allclose(s.numpy(), X.std((0, 2), keepdims=True))
    v, m = torch.var_mean(x, dim=2, correction=0, keepdim=True)
    np.testing.assert_allclose(v.numpy(), X.var(2, keepdims=True))
    assert m.shape == (2, 3, 1)
    assert math.isclose(torch.std_mean(x)[1].item(), X.mean())


def test_broadcasting_and_small_functions():
    x = t(X)
    shapes = [a.shape for a in torch.broadcast_tensors(x, t(np.ones((3, 1))), tg.tensor(1.0))]
    assert shapes == [(2, 3, 5)] * 3
    assert torch.broadcast_shapes((2, 1), 3, (1, 1, 1)) == (1, 2, 3)
    assert isinstance(torch.broadcast_shapes((2, 1)), torch.Size)
    assert torch.combinations(tg.tensor([1.0, 2, 3])).tolist() == [[1, 2], [1, 3], [2, 3]]
    assert torch.combinations(tg.tensor([1, 2]), 3, True).shape == (4, 3)
    assert torch.combinations(tg.tensor([1, 2]), 3).shape == (0, 3)
    rows, cols = torch.unravel_index(tg.tensor([4, 7, -1]), (2, 4))
    assert rows.tolist() == [1, 1, 1] and cols.tolist() == [0, 3, 3] and rows.dtype == np.int64
    s = torch.scalar_tensor(3)
    assert s.dtype == np.float32 and s.shape == () and s.item() == 3.0
    assert torch.rsub(tg.tensor([1, 2]), 10, alpha=2).tolist() == [8, 6]
    assert torch.fill(tg.tensor([1, 2]), 3).tolist() == [3, 3]
    assert not torch.detach(t(X).requires_grad_()).requires_grad
    arr = np.ones(3)
    torch.asarray(arr).add_(1)
    assert arr.tolist() == [2.0, 2.0, 2.0]  # shared, as PyTorch's
    torch.asarray(arr, copy=True).add_(1)
    assert arr.tolist() == [2.0, 2.0, 2.0]
    with pytest.warns(UserWarning, match="chain_matmul is deprecated"):
        p = torch.chain_matmul(x[0], x[0].T, x[0])
    np.testing.assert_allclose(p.numpy(), X[0] @ X[0].T @ X[0])
    assert not torch.is_complex(x) and torch.is_same_size(x, x) and torch.newaxis is None
    assert x[torch.newaxis].shape == (1, 2, 3, 5)
    assert torch.vmap is torch.func.vmap


def test_anomaly_and_warn_always_switches():
    assert not torch.is_anomaly_enabled()
    torch.set_anomaly_enabled(True)
    try:
        assert torch.is_anomaly_enabled() and torch.autograd.is_anomaly_enabled()
        assert torch.is_anomaly_check_nan_enabled()
    finally:
        torch.set_anomaly_enabled(False)
    assert not torch.is_anomaly_enabled()
    torch.set_warn_always(True)
    assert torch.is_warn_always_enabled()
    torch.set_warn_always(False)


def test_windows_are_scipy_s_classic_ones():
    n = 6
    k = np.arange(n + 1)
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * k / n))[:n]
    np.testing.assert_allclose(torch.hann_window(n).numpy(), hann, atol=1e-7)
    np.testing.assert_allclose(torch.hann_window(5, False).numpy(), np.hanning(5), atol=1e-7)
    np.testing.assert_allclose(torch.hamming_window(5, False).numpy(), np.hamming(5), atol=1e-7)
    np.testing.assert_allclose(torch.bartlett_window(5, False).numpy(), np.bartlett(5), atol=1e-7)
    np.testing.assert_allclose(torch.blackman_window(5, False).numpy(), np.blackman(5),
                               atol=1e-7)  # fmt: skip
    np.testing.assert_allclose(torch.kaiser_window(5, False, 3.0).numpy(), np.kaiser(5, 3.0),
                               atol=1e-7)  # fmt: skip
    assert torch.hann_window(3).dtype == np.float32
    assert torch.hann_window(3, dtype=torch.float64).dtype == np.float64
    assert torch.hann_window(1).tolist() == [1.0]


def test_top_level_in_place_functions_are_the_methods():
    x = t(X)
    assert torch.relu_(x) is x and x.numpy().min() == 0.0
    y = t(X)
    torch.clamp_(y, min=0, max=0.5)
    assert y.numpy().max() == 0.5
    assert torch.zero_(y).numpy().sum() == 0.0
    z = t(X)
    torch.selu_(z)
    np.testing.assert_allclose(z.numpy(), F.selu(t(X)).numpy())
    w = t(X)
    torch.threshold_(w, 0.0, 2.0)
    np.testing.assert_array_equal(w.numpy(), np.where(X > 0, X, 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.sqrt_(t(np.abs(X))).numpy().min() >= 0


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.combinations(x[0, 0], 2),
        lambda x: torch.broadcast_tensors(x, x[0, :, :1])[1],
        lambda x: torch.std_mean(x, 1)[0] * torch.std_mean(x, 1)[1],
        lambda x: torch.var_mean(x, [0, 2], correction=0)[0],
        lambda x: torch.rsub(x, x[0], alpha=0.5),
        lambda x: torch.kl_div(x, x.exp() * 0.5, 1),
        lambda x: torch.batch_norm(x, x[0, :, 0], None, None, None, True, 0.1, 1e-5, False),
        lambda x: torch.embedding(x[0], tg.tensor([[0, 2], [2, 1]])),
        lambda x: torch.chain_matmul(x[0], x[1].T, x[0]),
    ],
)
@pytest.mark.filterwarnings("ignore:torch.chain_matmul")
def test_gradients_match_finite_differences(fn):
    check_grad(fn, X)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def test_recurrent_cells_are_one_step_of_the_gates():
    """torch.lstm_cell and the others (and torch._VF's, as nn's own modules reach them) against
    the gates written out in NumPy: PyTorch's order i, f, g, o and r, z, n."""
    rng = np.random.default_rng(1)
    x, h, c = (rng.standard_normal((2, k)) for k in (3, 4, 4))
    w_ih, b_ih, b_hh = (
        rng.standard_normal((16, 3)),
        rng.standard_normal(16),
        rng.standard_normal(16),
    )
    w_hh = rng.standard_normal((16, 4))
    z = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, g, o = _sigmoid(z[:, :4]), _sigmoid(z[:, 4:8]), np.tanh(z[:, 8:12]), _sigmoid(z[:, 12:])
    c_next = f * c + i * g
    h_next, c_out = torch._VF.lstm_cell(t(x), (t(h), t(c)), t(w_ih), t(w_hh), t(b_ih), t(b_hh))
    np.testing.assert_allclose(c_out.numpy(), c_next, rtol=1e-12)
    np.testing.assert_allclose(h_next.numpy(), o * np.tanh(c_next), rtol=1e-12)
    gi, gh = x @ w_ih[:12].T + b_ih[:12], h @ w_hh[:12].T + b_hh[:12]
    r, u = _sigmoid(gi[:, :4] + gh[:, :4]), _sigmoid(gi[:, 4:8] + gh[:, 4:8])
    n = np.tanh(gi[:, 8:] + r * gh[:, 8:])
    out = torch.gru_cell(t(x), t(h), t(w_ih[:12]), t(w_hh[:12]), t(b_ih[:12]), t(b_hh[:12]))
    np.testing.assert_allclose(out.numpy(), (1 - u) * n + u * h, rtol=1e-12)
    pre = x @ w_ih[:4].T + h @ w_hh[:4].T  # no biases
    np.testing.assert_allclose(torch.rnn_tanh_cell(t(x), t(h), t(w_ih[:4]), t(w_hh[:4])).numpy(),
                               np.tanh(pre), rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(torch.rnn_relu_cell(t(x), t(h), t(w_ih[:4]), t(w_hh[:4])).numpy(),
                               np.maximum(pre, 0), rtol=1e-12)  # fmt: skip
    with pytest.raises(AttributeError, match="no_such_function"):
        torch._VF.no_such_function  # noqa: B018

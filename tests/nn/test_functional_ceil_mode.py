"""Pooling as older CNNs (GoogLeNet, SqueezeNet, SegNet) call it: `ceil_mode` windows over the
last partial rows, `return_indices` and `max_unpool2d`; against PyTorch in float64, against a
window-by-window NumPy reference without it, and traced against eager."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import assert_traced_training_matches_eager, check_grad
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
GEOMETRIES = [(2, 2, 0), (3, 2, 1), (3, 2, 0), (2, 3, 1), (5, 3, 2)]  # kernel, stride, padding
SHAPES = [(2, 3, 7, 9), (1, 2, 6, 11)]


def _reference(x, k, s, p, reduce, include_pad):
    """Pooling with ceil_mode, window by window: PyTorch's output size and window clipping."""
    n, c, h, w = x.shape

    def size(m):
        out = -(-(m + 2 * p - k) // s) + 1
        return out - 1 if (out - 1) * s >= m + p else out

    out = np.zeros((n, c, size(h), size(w)))
    for i, j in itertools.product(range(out.shape[2]), range(out.shape[3])):
        r0, c0 = i * s - p, j * s - p
        r1, c1 = min(r0 + k, h + p), min(c0 + k, w + p)
        window = x[:, :, max(r0, 0) : min(r1, h), max(c0, 0) : min(c1, w)]
        if reduce == "max":
            out[:, :, i, j] = window.max(axis=(2, 3))
        else:
            count = (r1 - r0) * (c1 - c0) if include_pad else window.shape[2] * window.shape[3]
            out[:, :, i, j] = window.sum(axis=(2, 3)) / count
    return out


def test_a_window_wider_than_the_input_pools_the_input_once():
    """transformers' EfficientNet pools its (N, 2560, 1, 1) features with
    `AvgPool2d(2560, ceil_mode=True)`: one window, clipped to the input. The input had been
    padded to the whole window, (N, C, 2560, 2560), and its 2560 x 2560 shifted slices summed
    (125 GiB for batch 2)."""
    x = np.random.default_rng(0).standard_normal((2, 3, 1, 2))
    got = F.avg_pool2d(tg.tensor(x), 2560, ceil_mode=True)
    np.testing.assert_allclose(got.numpy(), x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)
    got = F.max_pool2d(tg.tensor(x), 2560, ceil_mode=True)
    np.testing.assert_array_equal(got.numpy(), x.max(axis=(2, 3), keepdims=True))
    for k, s, p in [(5, 5, 1), (6, 4, 2)]:  # wider than the padded input: one window a side
        got = F.max_pool2d(tg.tensor(x), k, s, p, ceil_mode=True)
        np.testing.assert_array_equal(got.numpy(), _reference(x, k, s, p, "max", True))
        for include in (True, False):
            got = F.avg_pool2d(tg.tensor(x), k, s, p, ceil_mode=True, count_include_pad=include)
            np.testing.assert_allclose(got.numpy(), _reference(x, k, s, p, "avg", include),
                                       rtol=1e-12)  # fmt: skip


@pytest.mark.parametrize("shape, geometry", list(itertools.product(SHAPES, GEOMETRIES)))
def test_ceil_mode_matches_a_window_by_window_reference(shape, geometry):
    k, s, p = geometry
    x = np.random.default_rng(0).standard_normal(shape)
    got = F.max_pool2d(tg.tensor(x), k, s, p, ceil_mode=True).numpy()
    np.testing.assert_allclose(got, _reference(x, k, s, p, "max", True), rtol=1e-12)
    for include in (True, False):
        got = F.avg_pool2d(tg.tensor(x), k, s, p, ceil_mode=True, count_include_pad=include)
        want = _reference(x, k, s, p, "avg", include)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@needs_torch
@pytest.mark.parametrize("shape, geometry", list(itertools.product(SHAPES, GEOMETRIES)))
def test_pooling_matches_pytorch(shape, geometry):
    k, s, p = geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    for include, dilation in itertools.product((True, False), (1, 2)):
        X, tx = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        try:
            want = TF.avg_pool2d(tx, k, s, p, True, include)
        except RuntimeError:  # a geometry PyTorch refuses
            continue
        got = F.avg_pool2d(X, k, s, p, True, include)
        c = rng.standard_normal(tuple(want.shape))
        (got * tg.tensor(c)).sum().backward()
        (want * torch.tensor(c)).sum().backward()
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
        values, indices = F.max_pool2d(tg.tensor(x), k, s, p, dilation, True, True)
        want_values, want_indices = TF.max_pool2d(torch.tensor(x), k, s, p, dilation, True, True)
        np.testing.assert_allclose(values.numpy(), want_values.numpy(), rtol=1e-12)
        np.testing.assert_array_equal(indices.numpy(), want_indices.numpy())


def test_ceil_mode_gradients_match_finite_differences():
    x = np.random.default_rng(2).standard_normal((1, 2, 7, 6))
    check_grad(lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False), x)
    check_grad(lambda a: F.max_pool2d(a, 3, 2, 0, ceil_mode=True), x)


def test_unpooling_puts_the_maxima_back():
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 8))
    values, indices = F.max_pool2d(tg.tensor(x), 2, return_indices=True)
    restored = nn.MaxUnpool2d(2)(values, indices).numpy()
    assert restored.shape == x.shape
    kept = restored != 0
    np.testing.assert_array_equal(restored[kept], x[kept])  # the maxima, where they were
    at = np.take_along_axis(restored.reshape(2, 3, -1), indices.numpy().reshape(2, 3, -1), 2)
    np.testing.assert_array_equal(at, values.numpy().reshape(2, 3, -1))
    assert kept.sum() == values.numpy().size
    check_grad(lambda a: F.max_unpool2d(a, indices, 2), values.numpy())
    row_values, row_indices = F.max_pool1d(tg.tensor(x[:, :, 0]), 3, 2, 1, ceil_mode=True,
                                           return_indices=True)  # fmt: skip
    np.testing.assert_array_equal(x[:, :, 0][np.arange(2)[:, None, None], np.arange(3)[:, None],
                                             row_indices.numpy()], row_values.numpy())  # fmt: skip


def test_integer_floor_division_stays_integer():
    a = tg.tensor(np.array([5, -7], np.int64))
    assert (a // 2).dtype == np.int64 and (a // 2).numpy().tolist() == [2, -4]
    assert (a // 2.0).dtype.kind == "f"


class _Inception(nn.Module):
    """GoogLeNet's stem pooling: max pools with ceil_mode, and a ceil-mode average pool."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.avg = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.head = nn.Linear(8 * 4 * 4, 4)  # 12 -> 6 -> 4 with ceil_mode (5 -> 3 without)

    def forward(self, x):
        return self.head(self.avg(self.pool(tg.relu(self.conv(x)))).flatten(1))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_with_ceil_mode_pools_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    rng = np.random.default_rng(0)
    batch = (rng.standard_normal((4, 3, 12, 12)).astype(np.float32), rng.integers(0, 4, 4))
    assert_traced_training_matches_eager(_Inception, [batch] * 3, backend)

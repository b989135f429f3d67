"""3-d convolution and pooling (video, volumes) and the 3-d layers: values and gradients against
PyTorch in float64 where it is installed, against finite differences without it, and a small
3-d CNN's traced step against eager on both backends."""

from __future__ import annotations

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
# kernel, stride, padding, dilation, groups (of 4 input channels)
CONVS = [(3, 1, 1, 1, 1), ((3, 2, 1), (2, 1, 2), (1, 0, 0), 1, 2), (3, 2, 0, (2, 1, 1), 1),
         (1, 1, 0, 1, 4), (3, 1, "same", 1, 1)]  # fmt: skip
POOLS = [(2, 2, 0), (3, 2, 1), ((3, 2, 2), (1, 2, 1), (1, 1, 0))]


def _conv_args(rng, k, groups):
    kernel = (k,) * 3 if isinstance(k, int) else k
    out = 8 if groups == 4 else 6
    return rng.standard_normal((out, 4 // groups, *kernel)), rng.standard_normal(out)


@needs_torch
@pytest.mark.parametrize("k, s, p, d, g", CONVS)
def test_conv3d_matches_pytorch(rng, k, s, p, d, g):
    x = rng.standard_normal((2, 4, 6, 7, 5))
    w, b = _conv_args(rng, k, g)
    ours = [tg.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y, want = F.conv3d(*ours, s, p, d, g), TF.conv3d(*theirs, s, p, d, g)
    c = rng.standard_normal(tuple(want.shape))
    (y * tg.tensor(c)).sum().backward()
    (want * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(y.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    for a, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("k, s, p", POOLS)
def test_pools_match_pytorch(rng, k, s, p):
    x = rng.standard_normal((2, 3, 6, 7, 8))
    for name, options in (("max_pool3d", {}), ("avg_pool3d", {"count_include_pad": True}),
                          ("avg_pool3d", {"count_include_pad": False})):  # fmt: skip
        ours, theirs = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y = getattr(F, name)(ours, k, s, p, **options)
        want = getattr(TF, name)(theirs, k, s, p, **options)
        c = rng.standard_normal(tuple(want.shape))
        (y * tg.tensor(c)).sum().backward()
        (want * torch.tensor(c)).sum().backward()
        np.testing.assert_allclose(y.numpy(), want.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12)
    for size in [(1, 1, 1), (3, 4, 3), (4, 5, 6), (None, 2, 5)]:
        np.testing.assert_allclose(F.adaptive_avg_pool3d(tg.tensor(x), size).numpy(),
                                   TF.adaptive_avg_pool3d(torch.tensor(x), size).numpy(),
                                   rtol=1e-12)  # fmt: skip


def test_gradients_match_finite_differences(rng):
    x = rng.standard_normal((1, 2, 4, 5, 4))
    w = rng.standard_normal((3, 2, 2, 3, 2))
    check_grad(lambda a, b: F.conv3d(a, b, None, (1, 2, 1), (1, 1, 0), (2, 1, 1)), x, w)
    check_grad(lambda a: F.avg_pool3d(a, 3, 2, 1, count_include_pad=False), x)
    check_grad(lambda a: F.max_pool3d(a, 2, (1, 2, 2), 1), x)
    check_grad(lambda a: F.adaptive_avg_pool3d(a, (3, 2, 3)), x)


def test_conv3d_of_a_one_deep_kernel_is_conv2d_of_each_slice(rng):
    x, w = rng.standard_normal((2, 3, 4, 6, 6)), rng.standard_normal((5, 3, 1, 3, 3))
    y = F.conv3d(tg.tensor(x), tg.tensor(w), padding=(0, 1, 1)).numpy()
    for d in range(4):
        want = F.conv2d(tg.tensor(x[:, :, d]), tg.tensor(w[:, :, 0]), padding=1).numpy()
        np.testing.assert_allclose(y[:, :, d], want, rtol=1e-12)


def test_the_layers_build_and_check_their_inputs():
    assert nn.Conv3d(2, 4, 3).weight.shape == (4, 2, 3, 3, 3)
    norm = nn.BatchNorm3d(4)
    y = norm(tg.tensor(np.random.default_rng(0).standard_normal((3, 4, 2, 5, 5)), np.float32))
    np.testing.assert_allclose(y.numpy().mean(axis=(0, 2, 3, 4)), 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="BatchNorm3d"):
        norm(tg.ones((3, 4, 5, 5)))
    drop = nn.Dropout3d(0.5)
    out = drop(tg.ones((8, 16, 2, 3, 3))).numpy().reshape(128, -1)
    assert np.all(out.min(1) == out.max(1)) and 0.2 < (out[:, 0] == 0).mean() < 0.8
    inst = nn.InstanceNorm3d(4)(
        tg.tensor(np.random.default_rng(1).standard_normal((2, 4, 3, 3, 3)))
    )
    np.testing.assert_allclose(inst.numpy().std(axis=(2, 3, 4)), 1.0, rtol=1e-3)
    with pytest.raises(tg.ShapeError, match=r"conv3d: input \(2, 3, 4\)"):
        F.conv3d(tg.ones((2, 3, 4)), tg.ones((1, 3, 1, 1, 1)))


class _Video(nn.Module):
    """A small 3-d CNN of the C3D kind: conv, batch norm, pooling over time and space."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(1, 4, 3, padding=1), nn.BatchNorm3d(4), nn.ReLU(),
            nn.MaxPool3d((1, 2, 2)), nn.Conv3d(4, 8, 3, padding=1), nn.ReLU(),
            nn.AvgPool3d(2), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.features(x))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_3d_cnn_step_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    rng = np.random.default_rng(0)
    batch = (rng.standard_normal((4, 1, 4, 8, 8)).astype(np.float32), rng.integers(0, 3, 4))
    assert_traced_training_matches_eager(_Video, [batch] * 3, backend)

"""Spatial transformers' `affine_grid` and `grid_sample`: values and gradients (input and grid)
against PyTorch in float64 for every mode, padding and corner convention, against finite
differences without it, and a spatial-transformer classifier's traced step against eager."""

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
SETTINGS = list(itertools.product(["bilinear", "nearest", "bicubic"],
                                  ["zeros", "border", "reflection"], [False, True]))  # fmt: skip


def _inputs():
    rng = np.random.default_rng(0)
    # a grid reaching past the image on every side, kept off pixel boundaries (kinks)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 7, 2))
    return rng.standard_normal((2, 3, 5, 6)), grid


@needs_torch
@pytest.mark.parametrize("mode, padding, corners", SETTINGS)
def test_grid_sample_matches_pytorch(mode, padding, corners):
    x, g = _inputs()
    c = np.random.default_rng(1).standard_normal((2, 3, 4, 7))
    X, G = tg.tensor(x, requires_grad=True), tg.tensor(g, requires_grad=True)
    (F.grid_sample(X, G, mode, padding, corners) * tg.tensor(c)).sum().backward()
    tx, tgrid = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
    want = TF.grid_sample(tx, tgrid, mode, padding, corners)
    (want * torch.tensor(c)).sum().backward()
    got = F.grid_sample(tg.tensor(x), tg.tensor(g), mode, padding, corners)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    grid_grad = np.zeros_like(g) if G.grad is None else G.grad.numpy()  # nearest: none
    np.testing.assert_allclose(grid_grad, tgrid.grad.numpy(), rtol=1e-10, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("corners", [False, True])
def test_affine_grid_matches_pytorch(corners):
    rng = np.random.default_rng(2)
    for theta, size in ((rng.standard_normal((2, 2, 3)), (2, 3, 4, 5)),
                        (rng.standard_normal((2, 3, 4)), (2, 3, 4, 5, 6))):  # fmt: skip
        got = F.affine_grid(tg.tensor(theta), size, corners).numpy()
        want = TF.affine_grid(torch.tensor(theta), size, corners).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@needs_torch
@pytest.mark.parametrize("mode, padding, corners",
                         [s for s in SETTINGS if s[0] != "bicubic"])  # fmt: skip
def test_volumes_sample_as_pytorchs(mode, padding, corners):
    rng = np.random.default_rng(6)
    x, g = rng.standard_normal((2, 2, 4, 5, 6)), rng.uniform(-1.3, 1.3, (2, 3, 2, 4, 3))
    c = rng.standard_normal((2, 2, 3, 2, 4))
    ours, theirs = [tg.tensor(a, requires_grad=True) for a in (x, g)], [
        torch.tensor(a, requires_grad=True) for a in (x, g)]  # fmt: skip
    got = F.grid_sample(*ours, mode, padding, corners)
    want = TF.grid_sample(*theirs, mode, padding, corners)
    (got * tg.tensor(c)).sum().backward()
    (want * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours[0].grad.numpy(), theirs[0].grad.numpy(), atol=1e-12)
    if mode == "bilinear":
        np.testing.assert_allclose(ours[1].grad.numpy(), theirs[1].grad.numpy(), atol=1e-10)


def test_trilinear_sampling_reproduces_a_linear_field():
    """Trilinear interpolation is exact for a * z + b * y + c * x + d."""
    z, y, x = np.meshgrid(np.arange(4.0), np.arange(5.0), np.arange(6.0), indexing="ij")
    field = (0.5 * z - 2.0 * y + 0.25 * x + 1.0)[None, None]
    pts = np.random.default_rng(7).uniform(0, 1, (7, 3)) * np.array([5.0, 4.0, 3.0])  # x, y, z
    grid = (2 * pts / np.array([5.0, 4.0, 3.0]) - 1).reshape(1, 1, 1, 7, 3)
    out = F.grid_sample(tg.tensor(field), tg.tensor(grid), align_corners=True).numpy().ravel()
    want = 0.5 * pts[:, 2] - 2.0 * pts[:, 1] + 0.25 * pts[:, 0] + 1.0
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


FINITE = [("zeros", False), ("border", True), ("reflection", False), ("reflection", True)]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("padding, corners", FINITE)
def test_grid_sample_gradients_match_finite_differences(mode, padding, corners):
    x, g = _inputs()
    check_grad(lambda a, b: F.grid_sample(a, b, mode, padding, corners), x, g)


def _keys(s: float, a: float = -0.75) -> float:
    """Keys' cubic convolution kernel at distance s."""
    s = abs(s)
    if s <= 1:
        return (a + 2) * s**3 - (a + 3) * s**2 + 1
    return a * s**3 - 5 * a * s**2 + 8 * a * s - 4 * a if s < 2 else 0.0


def test_bicubic_sampling_is_keys_cubic_convolution():
    """Inside the image, each output is sum over the 4 x 4 nearest pixels of the image times
    the kernel at their distances in x and in y (A = -0.75, as PyTorch's)."""
    rng = np.random.default_rng(4)
    image = rng.standard_normal((1, 1, 7, 8))
    pos = rng.uniform(2.0, 4.9, (5, 2))  # (x, y) pixel positions 2 from the edges
    grid = (2 * pos / np.array([7.0, 6.0]) - 1).reshape(1, 1, 5, 2)
    out = F.grid_sample(tg.tensor(image), tg.tensor(grid), "bicubic", align_corners=True)
    want = [sum(image[0, 0, j, i] * _keys(x - i) * _keys(y - j)
                for i in range(int(x) - 1, int(x) + 3) for j in range(int(y) - 1, int(y) + 3))
            for x, y in pos]  # fmt: skip
    np.testing.assert_allclose(out.numpy().ravel(), want, rtol=1e-12)


def test_the_identity_grid_samples_the_image_itself():
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 5))
    theta = tg.tensor(np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]))
    for corners in (False, True):
        grid = F.affine_grid(theta, (1, 2, 4, 5), corners)
        out = F.grid_sample(tg.tensor(x), grid, align_corners=corners)
        np.testing.assert_allclose(out.numpy(), x, rtol=1e-12, atol=1e-12)
    shifted = F.grid_sample(tg.tensor(x), grid + tg.tensor([2.0 / 4, 0.0]), align_corners=True)
    np.testing.assert_allclose(shifted.numpy()[..., :4], x[..., 1:], atol=1e-12)  # one pixel


def test_bad_shapes_and_modes_are_named():
    with pytest.raises(tg.ShapeError, match=r"grid_sample: input torch.Size\(\[2, 3, 5\]\)"):
        F.grid_sample(tg.ones((2, 3, 5)), tg.ones((2, 4, 4, 2)))
    with pytest.raises(ValueError, match="'bicubic'"):
        F.grid_sample(tg.ones((1, 1, 3, 3)), tg.zeros((1, 2, 2, 2)), mode="area")
    with pytest.raises(tg.ShapeError, match="affine_grid"):
        F.affine_grid(tg.ones((2, 3, 3)), (2, 1, 4, 4))


class _STN(nn.Module):
    """A spatial transformer network as PyTorch's tutorial writes it: a localization net
    predicts the affine map that resamples the input before classification."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 6))
        with tg.no_grad():
            self.loc[-1].weight.zero_()
            self.loc[-1].bias.copy_(tg.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return self.head(F.grid_sample(x, grid, align_corners=False))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_spatial_transformer_step_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    rng = np.random.default_rng(0)
    batch = (rng.standard_normal((5, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 5))
    losses, _, _ = assert_traced_training_matches_eager(
        _STN, [batch] * 3, backend, lambda ps: tg.optim.SGD(ps, lr=0.1, momentum=0.9)
    )
    assert losses[-1] < losses[0]


def test_nearest_grid_sample_gives_its_grid_a_zero_gradient_as_pytorch():
    grid = tg.tensor(np.random.default_rng(0).uniform(-1, 1, (1, 3, 3, 2)), requires_grad=True)
    x = tg.tensor(np.arange(16.0).reshape(1, 1, 4, 4))
    y = F.grid_sample(x, grid, mode="nearest", align_corners=False)
    assert y.requires_grad
    (g,) = tg.autograd.grad(y.sum(), grid)
    assert g.shape == grid.shape and not g.numpy().any()
    same = F.grid_sample(x, grid.detach(), mode="nearest", align_corners=False)
    np.testing.assert_array_equal(y.detach().numpy(), same.numpy())

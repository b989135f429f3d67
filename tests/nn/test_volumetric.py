"""3-d convolution and pooling (video, volumes) and the 3-d layers: values and gradients against
PyTorch in float64 where it is installed, against finite differences without it, and a small
3-d CNN's traced step against eager on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import assert_traced_training_matches_eager, check_grad, traced_matches_eager
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
    with pytest.raises(tg.ShapeError, match=r"conv3d: input torch.Size\(\[2, 3, 4\]\)"):
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


# --- transposed convolution, the pools' indices and ceil_mode, unpooling, Lp pooling ----------
# (values against window-by-window NumPy references, gradients against finite differences)


def _conv_transpose3d_reference(x, w, b, stride, padding, output_padding, groups, dilation):
    """Each input element scatters its weighted kernel into the output (the definition)."""
    s, p, e, d = (np.broadcast_to(v, 3) for v in (stride, padding, output_padding, dilation))
    n, cin, *spatial = x.shape
    per_group, kernel = w.shape[1], w.shape[2:]
    size = [(spatial[i] - 1) * s[i] - 2 * p[i] + d[i] * (kernel[i] - 1) + e[i] + 1
            for i in range(3)]  # fmt: skip
    full = np.zeros((n, per_group * groups, *(size[i] + 2 * p[i] for i in range(3))))
    for c in range(cin):
        g = c // (cin // groups)
        for at in np.ndindex(*spatial):
            for tap in np.ndindex(*kernel):
                i, j, k = (at[a] * s[a] + tap[a] * d[a] for a in range(3))
                full[:, g * per_group : (g + 1) * per_group, i, j, k] += (
                    x[:, c, at[0], at[1], at[2]][:, None] * w[c, :, tap[0], tap[1], tap[2]]
                )
    out = full[:, :, p[0] : p[0] + size[0], p[1] : p[1] + size[1], p[2] : p[2] + size[2]]
    return out if b is None else out + b.reshape(-1, 1, 1, 1)


# kernel, stride, padding, output_padding, groups (of 4 input channels), dilation
TRANSPOSED = [(3, 1, 0, 0, 1, 1), (3, 2, 1, 1, 1, 1),
              ((2, 3, 2), (2, 1, 3), (1, 0, 1), (1, 0, 2), 2, 1),
              (3, 2, 1, (1, 1, 0), 1, (2, 1, 1)), (2, 1, 0, (1, 0, 1), 1, 2),
              (1, 1, 0, 0, 4, 1)]  # fmt: skip


@pytest.mark.parametrize("k, s, p, e, g, d", TRANSPOSED)
def test_conv_transpose3d_is_the_scatter_of_each_input_element(rng, k, s, p, e, g, d):
    kernel = (k,) * 3 if isinstance(k, int) else k
    x = rng.standard_normal((2, 4, 3, 2, 3))
    w, b = rng.standard_normal((4, 6 // g if g < 4 else 2, *kernel)), None
    b = rng.standard_normal(w.shape[1] * g)
    y = F.conv_transpose3d(tg.tensor(x), tg.tensor(w), tg.tensor(b), s, p, e, g, d)
    want = _conv_transpose3d_reference(x, w, b, s, p, e, g, d)
    assert y.shape == want.shape
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-12)


def test_conv_transpose3d_is_conv3ds_adjoint_and_its_gradients_match_finite_differences(rng):
    x, w = rng.standard_normal((2, 4, 4, 3, 5)), rng.standard_normal((6, 2, 2, 3, 2))
    y = F.conv3d(tg.tensor(x), tg.tensor(w), None, (2, 1, 2), (1, 1, 0), (1, 1, 2), 2)
    u = rng.standard_normal(y.shape)
    back = F.conv_transpose3d(tg.tensor(u), tg.tensor(w), None, (2, 1, 2), (1, 1, 0), (0, 0, 0),
                              2, (1, 1, 2))  # fmt: skip
    assert back.shape == x.shape
    np.testing.assert_allclose(np.sum(back.numpy() * x), np.sum(y.numpy() * u), rtol=1e-12)
    x, w, b = rng.standard_normal((1, 2, 2, 3, 2)), rng.standard_normal((2, 3, 2, 2, 3)), np.ones(3)
    check_grad(lambda a, c, d: F.conv_transpose3d(a, c, d, (2, 1, 2), (0, 1, 1), (1, 0, 1),
                                                  1, (1, 2, 1)), x, w, b)  # fmt: skip
    check_grad(lambda a: F.conv_transpose3d(a[0], tg.tensor(w), stride=2), x)  # unbatched


def _out_size(n, k, s, p, d, ceil):
    span = d * (k - 1) + 1
    out = (-(-(n + 2 * p - span) // s) if ceil else (n + 2 * p - span) // s) + 1
    return out - 1 if ceil and (out - 1) * s >= n + p else out


def _max_pool3d_reference(x, k, s, p, d, ceil):
    """Window by window: the first maximum (row-major in the window) and its flat index."""
    k, s, p, d = (np.broadcast_to(v, 3) for v in (k, s, p, d))
    outs = [_out_size(x.shape[2 + a], k[a], s[a], p[a], d[a], ceil) for a in range(3)]
    values, indices = np.zeros((*x.shape[:2], *outs)), np.zeros((*x.shape[:2], *outs), np.int64)
    for n, c, *o in np.ndindex(*values.shape):
        best, where = -np.inf, -1
        for tap in np.ndindex(*k):
            at = [o[a] * s[a] - p[a] + tap[a] * d[a] for a in range(3)]
            if all(0 <= at[a] < x.shape[2 + a] for a in range(3)) and x[(n, c, *at)] > best:
                best, where = x[(n, c, *at)], np.ravel_multi_index(at, x.shape[2:])
        values[(n, c, *o)], indices[(n, c, *o)] = best, where
    return values, indices


# kernel, stride, padding, dilation, ceil_mode
MAX_POOLS = [(2, None, 0, 1, False), (3, 2, 1, 1, True), ((3, 2, 2), (2, 1, 2), (1, 1, 0), 1, True),
             (2, 1, 0, (2, 1, 3), False), (3, 2, 1, 2, True)]  # fmt: skip


@pytest.mark.parametrize("k, s, p, d, ceil", MAX_POOLS)
def test_max_pool3d_indices_ceil_mode_and_dilation_match_a_window_by_window_reference(
    rng, k, s, p, d, ceil
):
    for x in (rng.standard_normal((2, 3, 7, 6, 8)), np.round(rng.standard_normal((1, 2, 7, 6, 8)))):
        values, indices = F.max_pool3d(tg.tensor(x), k, s, p, d, ceil, return_indices=True)
        want, want_indices = _max_pool3d_reference(x, k, s if s is not None else k, p, d, ceil)
        np.testing.assert_array_equal(values.numpy(), want)
        np.testing.assert_array_equal(indices.numpy(), want_indices)  # ties: the first maximum
        again = F.max_pool3d_with_indices(tg.tensor(x), k, s, p, d, ceil, return_indices=False)
        np.testing.assert_array_equal(again[1].numpy(), want_indices)
    check_grad(lambda a: F.max_pool3d(a, k, s, p, d, ceil), rng.standard_normal((1, 2, 7, 6, 5)))


def test_max_pool3d_ties_send_the_gradient_to_the_first_maximum():
    x = tg.tensor(np.ones((1, 1, 2, 2, 2)), requires_grad=True)
    F.max_pool3d(x, 2).sum().backward()
    assert x.grad.numpy().ravel().tolist() == [1, 0, 0, 0, 0, 0, 0, 0]


def _adaptive_max_reference(x, outs):
    spatial = x.shape[2:]
    values = np.zeros((*x.shape[:2], *outs))
    indices = np.zeros(values.shape, np.int64)
    for cell in np.ndindex(*outs):
        box = tuple(
            slice(i * n // o, -(-(i + 1) * n // o))
            for i, n, o in zip(cell, spatial, outs, strict=True)
        )
        window = x[(slice(None), slice(None), *box)].reshape(*x.shape[:2], -1)
        first = window.argmax(-1)
        local = np.unravel_index(first, [b.stop - b.start for b in box])
        values[(..., *cell)] = window.max(-1)
        indices[(..., *cell)] = np.ravel_multi_index(
            [a + b.start for a, b in zip(local, box, strict=True)], spatial
        )
    return values, indices


ADAPTIVE = [(1, 4), (1, 11), (2, (3, 4)), (2, (None, 4)), (2, (7, 3)), (3, (3, 2, 4)),
            (3, (4, 5, 3)), (3, 1), (3, (None, 2, 5))]  # fmt: skip


@pytest.mark.parametrize("dims, size", ADAPTIVE)
def test_the_adaptive_max_pools_indices_match_a_window_by_window_reference(rng, dims, size):
    shape = (2, 3, 7, 6, 8)[: 2 + dims] if dims > 1 else (2, 3, 11)
    pool = getattr(F, f"adaptive_max_pool{dims}d")
    for x in (rng.standard_normal(shape), np.round(rng.standard_normal(shape))):
        values, indices = pool(tg.tensor(x), size, True)
        sizes = (size,) * dims if isinstance(size, int) else size
        outs = [n if o is None else o for n, o in zip(x.shape[2:], sizes, strict=True)]
        want, want_indices = _adaptive_max_reference(x, outs)
        np.testing.assert_array_equal(values.numpy(), want)
        np.testing.assert_array_equal(indices.numpy(), want_indices)
        with_indices = getattr(F, f"adaptive_max_pool{dims}d_with_indices")(tg.tensor(x), size)
        np.testing.assert_array_equal(with_indices[1].numpy(), want_indices)
    small = [3 if n is None else n for n in sizes] if dims > 1 else [min(sizes[0], 5)]
    check_grad(lambda a: pool(a, small), rng.standard_normal((1, 2, *(n + 2 for n in small))))


def test_max_unpool3d_puts_the_maxima_back_and_each_gets_its_whole_gradient(rng):
    x = rng.standard_normal((2, 3, 6, 4, 6))
    values, indices = F.max_pool3d(tg.tensor(x), 2, return_indices=True)
    back = nn.MaxUnpool3d(2)(values, indices).numpy()
    np.testing.assert_array_equal(back, np.where(back != 0, x, 0))
    assert (back != 0).sum() == values.size
    # overlapping windows give one maximum twice: each copy gets the whole gradient (PyTorch's)
    values, indices = F.max_pool3d(tg.tensor(x), 3, 1, return_indices=True)
    v = tg.tensor(values.numpy(), requires_grad=True)
    out = F.max_unpool3d(v, indices, 3, 1, output_size=x.shape[2:])
    g = rng.standard_normal(out.shape)
    (out * tg.tensor(g)).sum().backward()
    flat = g.reshape(2, 3, -1)
    want = np.take_along_axis(flat, indices.numpy().reshape(2, 3, -1), 2).reshape(values.shape)
    np.testing.assert_array_equal(v.grad.numpy(), want)
    np.testing.assert_array_equal(out.numpy(), np.where(out.numpy() != 0, x, 0))
    with pytest.raises(ValueError, match="max_unpool3d: output_size"):
        F.max_unpool3d(v, indices, 3, 1, output_size=(9, 9, 9))


def test_lp_pool3d_is_the_p_norm_of_each_window(rng):
    x = rng.standard_normal((2, 3, 6, 5, 6))
    windows = np.lib.stride_tricks.sliding_window_view(x, (2, 3, 2), axis=(2, 3, 4))
    windows = windows[:, :, ::2, ::1, ::2].reshape(*windows.shape[:2], 3, 3, 3, -1)
    np.testing.assert_allclose(nn.LPPool3d(2, (2, 3, 2), (2, 1, 2))(tg.tensor(x)).numpy(),
                               np.sqrt((windows**2).sum(-1)), rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(F.lp_pool3d(tg.tensor(x), np.inf, (2, 3, 2), (2, 1, 2)).numpy(),
                               np.abs(windows).max(-1), rtol=1e-12)  # fmt: skip
    check_grad(lambda a: F.lp_pool3d(a, 3, 2, ceil_mode=True), np.abs(x[:1, :2, :3, :3, :5]))
    check_grad(lambda a: F.avg_pool3d(a, 2, 2, 1, ceil_mode=True, count_include_pad=False),
               x[:1, :2, :3, :4, :5])  # fmt: skip


def test_the_3d_layers_have_pytorchs_parameters_and_output_sizes(rng):
    layer = nn.ConvTranspose3d(4, 6, (3, 2, 3), stride=2, padding=1, groups=2, dilation=(1, 2, 1))
    assert [(k, v.shape) for k, v in layer.state_dict().items()] == [
        ("weight", (4, 3, 3, 2, 3)), ("bias", (6,))
    ]  # fmt: skip
    x = tg.tensor(rng.standard_normal((2, 4, 3, 4, 3)).astype(np.float32))
    assert layer(x).shape == (2, 6, 5, 7, 5)
    assert layer(x, output_size=(6, 8, 5)).shape == (2, 6, 6, 8, 5)
    lazy = nn.LazyConvTranspose3d(5, 2, stride=2)
    assert lazy(x).shape == (2, 5, 6, 8, 6) and type(lazy) is nn.ConvTranspose3d
    assert lazy.weight.shape == (4, 5, 2, 2, 2)
    values, indices = nn.AdaptiveMaxPool3d((2, 3, 2), return_indices=True)(x)
    assert values.shape == indices.shape == (2, 4, 2, 3, 2) and indices.dtype == np.int64
    assert nn.MaxPool3d(3, 2, ceil_mode=True)(x).shape == (2, 4, 1, 2, 1)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_transposed_convolution_and_pools_match_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x, w = rng.standard_normal((2, 4, 3, 4, 3)), rng.standard_normal((4, 3, 3, 2, 3))

    def f(a, c):
        y = F.conv_transpose3d(a, c, None, 2, 1, (1, 0, 1), 1, (1, 2, 1))
        values, indices = F.max_pool3d(y, 3, 2, 1, ceil_mode=True, return_indices=True)
        pooled = F.max_unpool3d(values, indices, 3, 2, 1, output_size=y.shape[2:])
        return pooled + F.adaptive_max_pool3d(y, (2, 3, 5))[:, :, :1, :1, :1] + F.lp_pool3d(y, 2, 1)

    traced_matches_eager(f, x, w, backend=backend)

"""The layers of tracegrad.nn that DCGAN-style, U-Net-style and normalization-heavy PyTorch code
uses: activations (and inplace=), transposed convolution, pixel shuffle, interpolation, padding,
group and instance norm, nn.init, Module.to(dtype), MultiheadAttention's dropout and sdpa's.
Values and gradients against PyTorch in float64 (where installed) with the same weights, and
without PyTorch against NumPy, adjoint identities or finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, traced_matches_eager
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.frontend import random
from tracegrad.nn import functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # the checks without PyTorch still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def both(fn_tg, fn_torch, *arrays, atol=1e-10):
    """Values and gradients of sum(fn(*xs) * c) in tracegrad and PyTorch (float64)."""
    xs = [tg.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = fn_tg(*xs), fn_torch(*ts)
    c = np.random.default_rng(5).standard_normal(ty.shape)
    (y * c).sum().backward()
    (ty * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=atol)
    for x, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=atol)


def same_module(module, twin, *inputs, atol=1e-10):
    """Load the torch module's state_dict (as NumPy arrays) into the float64 tracegrad module,
    check the keys agree both ways, then compare outputs and the gradients of inputs and
    parameters."""
    twin = twin.double()
    module.double().load_state_dict({k: v.numpy() for k, v in twin.state_dict().items()})
    twin.load_state_dict({k: torch.tensor(v.numpy()) for k, v in module.state_dict().items()})
    both(lambda *xs: module(*xs), lambda *ts: twin(*ts), *inputs, atol=atol)
    grads = {k: p.grad for k, p in twin.named_parameters()}
    assert [k for k, _ in module.named_parameters()] == list(grads)
    for k, p in module.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[k].numpy(), atol=atol, err_msg=k)


# --- activations ----------------------------------------------------------------------------------

EDGES = np.array([-30.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 25.0, 40.0])
ACTIVATIONS = [  # tracegrad's, torch's (by name), what PyTorch's module is called with
    ("leaky_relu", (), "LeakyReLU"), ("leaky_relu", (0.2,), "LeakyReLU"), ("elu", (), "ELU"),
    ("elu", (0.5,), "ELU"), ("selu", (), "SELU"), ("softplus", (), "Softplus"),
    ("softplus", (2.0, 3.0), "Softplus"), ("mish", (), "Mish"), ("hardtanh", (), "Hardtanh"),
    ("hardtanh", (-0.5, 2.0), "Hardtanh"), ("silu", (), "SiLU"), ("relu", (), "ReLU"),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("name, args, module", ACTIVATIONS)
def test_activations_match_torch_at_the_kinks_and_far_out(rng, name, args, module):
    x = np.concatenate([EDGES, rng.standard_normal(6)])
    both(lambda a: getattr(F, name)(a, *args), lambda t: getattr(TF, name)(t, *args), x)
    both(lambda a: getattr(nn, module)(*args)(a), lambda t: getattr(torch.nn, module)(*args)(t), x)


@pytest.mark.parametrize("name, args, module", ACTIVATIONS)
def test_activation_gradients_match_finite_differences(rng, name, args, module):
    x = rng.standard_normal(8) * 2  # away from the kinks: finite differences need smoothness
    x = np.where(np.abs(x) < 0.05, 0.3, x)
    check_grad(lambda a: getattr(F, name)(a, *args), x)


def test_activations_known_values():
    x = tg.tensor([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(F.leaky_relu(x, 0.1).numpy(), [-0.1, 0.0, 2.0])
    np.testing.assert_allclose(F.elu(x).numpy(), [math.expm1(-1), 0.0, 2.0])
    np.testing.assert_allclose(F.hardtanh(x * 2).numpy(), [-1.0, 0.0, 1.0])
    np.testing.assert_allclose(F.softplus(tg.tensor([30.0]), 1, 20).numpy(), [30.0])
    np.testing.assert_allclose(F.mish(x).numpy(), x.numpy() * np.tanh(np.log1p(np.exp(x.numpy()))),
                               rtol=1e-6)  # fmt: skip
    z = tg.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(nn.Softmax(dim=1)(z).numpy().sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(nn.Softmax()(z).numpy().sum(1), 1.0, rtol=1e-6)  # dim 1 for 2-d
    np.testing.assert_allclose(np.exp(nn.LogSoftmax(dim=0)(z).numpy()).sum(0), 1.0, rtol=1e-6)


def test_inplace_writes_the_input_tracked_or_not():
    x = tg.tensor([-1.0, 2.0])
    y = nn.ReLU(inplace=True)(x)
    assert y is x and x.numpy().tolist() == [0.0, 2.0]  # PyTorch's in-place result
    a = tg.tensor([-1.0, 2.0], requires_grad=True)
    h = a * 1.0
    nn.LeakyReLU(0.5, inplace=True)(h)
    assert h.numpy().tolist() == [-0.5, 2.0]  # PyTorch's too
    h.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 1.0])
    for layer in (nn.ELU(inplace=True), nn.SELU(True), nn.SiLU(True), nn.Mish(True),
                  nn.Hardtanh(inplace=True), nn.Dropout(0.5, True)):  # fmt: skip
        assert layer.inplace


# --- transposed convolution -----------------------------------------------------------------------

TRANSPOSED = [  # (N, in, H, W), out, kernel, stride, padding, output_padding, groups, dilation
    ((2, 4, 5, 5), 6, 3, 2, 1, 1, 2, 1),
    ((1, 2, 4, 3), 3, (3, 2), (2, 3), (1, 0), (1, 2), 1, (1, 2)),
    ((2, 3, 4, 4), 3, 3, 1, 0, 0, 3, 2),
    ((1, 2, 3, 3), 2, 2, 1, 0, 1, 1, 2),  # output_padding >= stride (below the dilation)
    ((2, 3, 4, 4), 2, 4, 2, 1, 0, 1, 1),  # DCGAN's upsampling
]


def transposed_arrays(rng, shape, out, k, groups):
    kernel = (k, k) if isinstance(k, int) else k
    return (rng.standard_normal(shape), rng.standard_normal((shape[1], out // groups, *kernel)),
            rng.standard_normal(out))  # fmt: skip


@needs_torch
@pytest.mark.parametrize("shape, out, k, stride, padding, extra, groups, dilation", TRANSPOSED)
def test_conv_transpose2d_matches_torch(rng, shape, out, k, stride, padding, extra, groups,
                                        dilation):  # fmt: skip
    args = (stride, padding, extra, groups, dilation)
    both(lambda x, w, b: F.conv_transpose2d(x, w, b, *args),
         lambda x, w, b: TF.conv_transpose2d(x, w, b, *args),
         *transposed_arrays(rng, shape, out, k, groups))  # fmt: skip


@needs_torch
def test_conv_transpose_modules_match_torch(rng):
    same_module(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                         groups=2), rng.standard_normal((2, 4, 5, 5)))  # fmt: skip
    same_module(nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, dilation=2, bias=False),
                torch.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, dilation=2, bias=False),
                rng.standard_normal((2, 3, 6)))  # fmt: skip
    layer = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    twin = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    twin.load_state_dict({k: torch.tensor(v.numpy()) for k, v in layer.state_dict().items()})
    x = rng.standard_normal((1, 2, 4, 4))
    got = layer(tg.tensor(x), output_size=(8, 8))
    np.testing.assert_allclose(got.numpy(), twin(torch.tensor(x), output_size=(8, 8)).detach())
    with pytest.raises(ValueError, match="output_size"):
        layer(tg.tensor(x), output_size=(10, 10))


@pytest.mark.parametrize("shape, out, k, stride, padding, extra, groups, dilation", TRANSPOSED)
def test_conv_transpose2d_is_the_adjoint_of_conv2d(rng, shape, out, k, stride, padding, extra,
                                                   groups, dilation):  # fmt: skip
    """<conv2d(y, w), x> = <y, conv_transpose2d(x, w)> for every y of the output's shape."""
    x, w, _ = transposed_arrays(rng, shape, out, k, groups)
    y = F.conv_transpose2d(x, w, None, stride, padding, extra, groups, dilation).numpy()
    probe = rng.standard_normal(y.shape)
    back = F.conv2d(probe, w, None, stride, padding, dilation, groups).numpy()
    size = tuple(x.shape[2 + i] for i in range(2))
    np.testing.assert_allclose(np.vdot(back[..., : size[0], : size[1]], x), np.vdot(probe, y))


def test_conv_transpose_gradients_and_output_size(rng):
    x, w, b = transposed_arrays(rng, (1, 2, 3, 3), 2, 3, 1)
    check_grad(lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1), x, w, b)
    check_grad(lambda x, w: F.conv_transpose1d(x, w, None, 2, 0, 1), x[:, :, 0], w[:, :, 0])
    layer = nn.ConvTranspose2d(100, 8, 4, 1, 0, bias=False)  # DCGAN's first layer
    assert layer.weight.shape == (100, 8, 4, 4) and layer.bias is None
    assert layer(tg.zeros(2, 100, 1, 1)).shape == (2, 8, 4, 4)
    assert abs(float(np.abs(layer.weight.numpy()).max()) - 1 / math.sqrt(8 * 16)) < 0.01
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose2d(x, w, stride=2, output_padding=2)


def test_conv_transpose_traced_step_runs_the_conv_kernels(rng, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    nn.manual_seed(0)
    model = nn.Sequential(
        nn.ConvTranspose2d(4, 3, 4, 2, 1, bias=False),
        nn.BatchNorm2d(3),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(3, 2, 3),
        nn.Tanh(),
    )
    x = tg.tensor(rng.standard_normal((2, 4, 5, 5)).astype(np.float32))

    def step(x):
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    want = float(step(x))
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    traced = tg.trace(step, backend="numba")
    for _ in range(2):
        assert float(traced(x)) == pytest.approx(want, rel=1e-5)
        for p, g in zip(model.parameters(), grads, strict=True):
            np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-6)
        model.zero_grad()
    source = traced.latest.source
    assert "conv2d_input_grad kernel" in source and "conv2d_weight_grad kernel" in source


# --- resampling and padding -----------------------------------------------------------------------


def test_pixel_shuffle_known_values_and_inverse():
    x = np.arange(2 * 8 * 2 * 3, dtype=np.float64).reshape(2, 8, 2, 3)
    y = F.pixel_shuffle(x, 2).numpy()
    assert y.shape == (2, 2, 4, 6)
    assert y[0, 0, :2, :2].tolist() == [
        [x[0, 0, 0, 0], x[0, 1, 0, 0]],
        [x[0, 2, 0, 0], x[0, 3, 0, 0]],
    ]
    np.testing.assert_array_equal(F.pixel_unshuffle(y, 2).numpy(), x)
    np.testing.assert_array_equal(nn.PixelUnshuffle(2)(nn.PixelShuffle(2)(x)).numpy(), x)


@needs_torch
def test_pixel_shuffle_matches_torch(rng):
    both(lambda a: F.pixel_shuffle(a, 3), lambda t: TF.pixel_shuffle(t, 3),
         rng.standard_normal((3, 2, 18, 2, 3)))  # fmt: skip
    both(lambda a: F.pixel_unshuffle(a, 2), lambda t: TF.pixel_unshuffle(t, 2),
         rng.standard_normal((2, 3, 4, 6)))  # fmt: skip


NUMPY_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
               "circular": "wrap"}  # fmt: skip


@pytest.mark.parametrize("mode", NUMPY_MODES)
def test_pad_matches_numpy_in_pytorchs_order(rng, mode):
    x = rng.standard_normal((2, 3, 4, 5))
    got = F.pad(x, (1, 2, 3, 0), mode).numpy()  # width by (1, 2), height by (3, 0)
    np.testing.assert_array_equal(got, np.pad(x, ((0, 0), (0, 0), (3, 0), (1, 2)),
                                              NUMPY_MODES[mode]))  # fmt: skip
    check_grad(lambda a: F.pad(a, (2, 1, 1, 3), mode), x[:1, :1])
    with pytest.raises(ValueError, match="pad"):
        F.pad(x, (1, 2, 3))


def test_pad_constant_value_and_cropping(rng):
    x = rng.standard_normal((1, 2, 3, 4))
    got = F.pad(x, (1, -1, -2, 1), value=7.0).numpy()
    np.testing.assert_array_equal(got, np.pad(x[:, :, 2:, :3], ((0, 0), (0, 0), (0, 1), (1, 0)),
                                              constant_values=7.0))  # fmt: skip
    assert nn.ZeroPad2d((1, 0, 0, 2))(x).shape == (1, 2, 5, 5)
    assert nn.ReflectionPad1d(2)(x[0]).shape == (2, 3, 8)
    with pytest.raises(ValueError, match="at most"):
        F.pad(x, (4, 0), "reflect")


PAD_LAYERS = [("ZeroPad2d", ((1, 2, 0, 3),)), ("ConstantPad2d", (2, 1.5)),
              ("ReflectionPad2d", ((1, 2, 2, 0),)), ("ReplicationPad2d", (2,)),
              ("CircularPad2d", ((1, 0, 2, 3),)), ("ReflectionPad1d", ((3, 1),)),
              ("ReplicationPad1d", (2,))]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("layer, args", PAD_LAYERS)
def test_padding_layers_match_torch(rng, layer, args):
    x = rng.standard_normal((2, 3, 5) if layer.endswith("1d") else (2, 3, 4, 5))
    both(getattr(nn, layer)(*args), getattr(torch.nn, layer)(*args), x)


INTERPOLATIONS = [  # size, scale_factor, recompute_scale_factor
    ((5, 7), None, None), ((2, 3), None, None), ((6, 8), None, None), ((3, 13), None, None),
    (None, 2, None), (None, 3, None), (None, (1.5, 0.7), None), (None, 2.3, None),
    (None, (1.5, 0.7), True), (None, 2.3, True),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize(
    "mode, align_corners",
    [("nearest", None), ("nearest-exact", None), ("bilinear", False), ("bilinear", True)],
)
def test_interpolate_matches_torch(rng, mode, align_corners):
    x = rng.standard_normal((2, 2, 3, 4))
    for size, scale, recompute in INTERPOLATIONS:
        both(
            lambda a: F.interpolate(a, size, scale, mode, align_corners, recompute),
            lambda t: TF.interpolate(t, size, scale, mode, align_corners, recompute),
            x,
        )
    for mode in ("nearest", "linear"):
        for size, scale in ((11, None), (None, 1.7), (2, None)):
            both(
                lambda a: F.interpolate(a, size, scale, mode),
                lambda t: TF.interpolate(t, size, scale, mode),
                x[:, :, 0],
            )
    volume = rng.standard_normal((1, 2, 3, 2, 2))
    for mode in ("nearest", "trilinear"):
        both(lambda a: F.interpolate(a, (4, 3, 5), None, mode),
             lambda t: TF.interpolate(t, (4, 3, 5), None, mode), volume)  # fmt: skip
    layer, twin = nn.Upsample(scale_factor=2), torch.nn.Upsample(scale_factor=2)
    both(layer, twin, x)
    both(nn.UpsamplingBilinear2d(size=(5, 5)), torch.nn.UpsamplingBilinear2d(size=(5, 5)), x)


@needs_torch
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_antialiased_interpolate_matches_torch(rng, mode, align_corners):
    x = rng.standard_normal((2, 3, 17, 11))
    for size, scale in (((3, 4), None), (None, 0.5), (None, (0.3, 1.7)), ((34, 2), None)):
        both(lambda a: F.interpolate(a, size, scale, mode, align_corners, antialias=True),
             lambda t: TF.interpolate(t, size, scale, mode, align_corners, antialias=True),
             x)  # fmt: skip


def test_antialiased_interpolate_known_values_and_gradients(rng):
    """Halving with antialias averages four inputs with PIL's triangle weights, (1, 3, 3, 1) / 8
    inside (the edge's taps renormalized); gradients against finite differences, both modes."""
    x = rng.standard_normal((1, 1, 1, 8))
    y = F.interpolate(x, (1, 4), mode="bilinear", antialias=True).numpy().ravel()
    row = x.ravel()
    inner = [row[2 * i - 1 : 2 * i + 3] @ np.array([1, 3, 3, 1]) / 8 for i in (1, 2)]
    np.testing.assert_allclose(y[1:3], inner, rtol=1e-14)
    np.testing.assert_allclose(y[0], row[:3] @ np.array([3, 3, 1]) / 7, rtol=1e-14)
    for mode in ("bilinear", "bicubic"):
        check_grad(lambda a: F.interpolate(a, (3, 5), mode=mode, antialias=True),
                   rng.standard_normal((1, 2, 7, 6)))  # fmt: skip
        traced_matches_eager(lambda a: F.interpolate(a, (3, 5), mode=mode, antialias=True),
                             rng.standard_normal((1, 2, 7, 6)), backend="numba")  # fmt: skip
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(tg.tensor(x), scale_factor=0.5, mode="nearest", antialias=True)


def test_interpolate_known_values_and_gradients(rng):
    x = rng.standard_normal((1, 2, 3, 2))
    got = F.interpolate(x, scale_factor=2).numpy()
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(2, axis=3))
    row = np.array([[[0.0, 1.0, 3.0]]])
    corners = F.interpolate(row, size=5, mode="linear", align_corners=True).numpy()
    np.testing.assert_allclose(corners, [[[0.0, 0.5, 1.0, 2.0, 3.0]]])
    centres = F.interpolate(row, scale_factor=2, mode="linear").numpy()  # (i + 0.5) / 2 - 0.5
    np.testing.assert_allclose(centres, [[[0.0, 0.25, 0.75, 1.5, 2.5, 3.0]]])
    check_grad(lambda a: F.interpolate(a, size=(4, 5), mode="bilinear"), x)
    check_grad(lambda a: F.interpolate(a, size=(5, 3)), x)
    with pytest.raises(ValueError, match="exactly one"):
        F.interpolate(x)
    with pytest.raises(tg.ShapeError, match="linear"):
        F.interpolate(x, size=4, mode="linear")


# --- normalization --------------------------------------------------------------------------------


def numpy_group_norm(x, groups, eps=1e-5):
    g = x.reshape(x.shape[0], groups, -1)
    return ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(
        x.shape
    )


def test_group_and_instance_norm_against_numpy_and_finite_differences(rng):
    x, w, b = rng.standard_normal((2, 6, 3, 2)), rng.standard_normal(6), rng.standard_normal(6)
    want = numpy_group_norm(x, 3) * w[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(F.group_norm(x, 3, w, b).numpy(), want, atol=1e-12)
    np.testing.assert_allclose(F.instance_norm(x).numpy(), numpy_group_norm(x, 6), atol=1e-12)
    check_grad(lambda x, w, b: F.group_norm(x, 2, w, b), x[:1, :4], w[:4], b[:4])
    check_grad(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), x[:1, :3], w[:3], b[:3])
    norm = nn.InstanceNorm2d(6, affine=True, track_running_stats=True)
    norm(tg.tensor(x))
    flat = x.reshape(2, 6, -1)
    np.testing.assert_allclose(norm.running_mean.numpy(), 0.1 * flat.mean(-1).mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.running_var.numpy(),
                               0.9 + 0.1 * flat.var(-1, ddof=1).mean(0), rtol=1e-5)  # fmt: skip
    assert list(norm.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                       "num_batches_tracked"]  # fmt: skip
    assert list(nn.GroupNorm(3, 6).state_dict()) == ["weight", "bias"]
    assert not list(nn.InstanceNorm1d(4).state_dict())
    with pytest.raises(ValueError, match="divide"):
        nn.GroupNorm(4, 6)


@needs_torch
def test_normalization_layers_match_torch(rng):
    x = rng.standard_normal((3, 4, 5, 2))
    same_module(nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4), x)
    same_module(nn.GroupNorm(4, 4, affine=False), torch.nn.GroupNorm(4, 4, affine=False), x)
    same_module(nn.InstanceNorm2d(4, affine=True), torch.nn.InstanceNorm2d(4, affine=True), x)
    same_module(nn.InstanceNorm1d(4), torch.nn.InstanceNorm1d(4), x[..., 0])
    same_module(nn.InstanceNorm1d(4), torch.nn.InstanceNorm1d(4), x[0, ..., 0])  # unbatched
    same_module(nn.LayerNorm((5, 2), bias=False), torch.nn.LayerNorm((5, 2), bias=False), x)
    norm = nn.InstanceNorm2d(4, affine=True, track_running_stats=True, momentum=0.3).double()
    twin = torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True, momentum=0.3)
    twin = twin.double()
    for _ in range(2):
        both(norm, twin, x)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(norm, name).numpy(), getattr(twin, name).numpy())
    norm.eval(), twin.eval()
    both(norm, twin, x)


# --- nn.init --------------------------------------------------------------------------------------


def truncated_normal_mean(mean, std, a, b):
    """mean + std (pdf(alpha) - pdf(beta)) / (cdf(beta) - cdf(alpha))."""
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: (1 + math.erf(z / math.sqrt(2))) / 2  # noqa: E731
    return mean + std * (pdf(alpha) - pdf(beta)) / (cdf(beta) - cdf(alpha))


def test_init_distributions_and_known_values():
    nn.manual_seed(0)
    w = nn.init.orthogonal_(tg.zeros(6, 3, 2), gain=2.0).numpy().reshape(6, 6)
    np.testing.assert_allclose(w.T @ w, 4 * np.eye(6), atol=1e-5)
    wide = nn.init.orthogonal_(tg.zeros(3, 8)).numpy()
    np.testing.assert_allclose(wide @ wide.T, np.eye(3), atol=1e-5)
    t = nn.init.trunc_normal_(tg.zeros(20000, dtype=np.float64), 1.0, 2.0, -1.0, 2.0).numpy()
    assert t.min() >= -1.0 and t.max() <= 2.0
    assert abs(t.mean() - truncated_normal_mean(1.0, 2.0, -1.0, 2.0)) < 0.02
    tail = nn.init.trunc_normal_(tg.zeros(4000), 0.0, 1.0, 3.0, 4.0).numpy()  # uniform proposals
    assert tail.min() >= 3.0 and tail.max() <= 4.0
    assert abs(tail.mean() - truncated_normal_mean(0.0, 1.0, 3.0, 4.0)) < 0.02
    assert nn.init.eye_(tg.zeros(2, 3)).numpy().tolist() == [[1, 0, 0], [0, 1, 0]]
    d = nn.init.dirac_(tg.zeros(4, 2, 3, 3), groups=2).numpy()
    assert d.sum() == 4 and d[0, 0, 1, 1] == d[1, 1, 1, 1] == d[2, 0, 1, 1] == d[3, 1, 1, 1] == 1
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 5))
    np.testing.assert_allclose(F.conv2d(x, nn.init.dirac_(tg.zeros(2, 2, 3, 3, dtype=np.float64)),
                                        padding=1).numpy(), x)  # fmt: skip
    assert nn.init.calculate_gain("conv_transpose2d") == 1.0
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(ValueError, match="negative_slope"):
        nn.init.calculate_gain("leaky_relu", True)
    with pytest.raises(ValueError, match="unsupported"):
        nn.init.calculate_gain("convex")
    u = nn.init.uniform_(tg.zeros(1000), -2.0, 2.0, generator=np.random.default_rng(3)).numpy()
    assert u.min() >= -2 and u.max() <= 2 and u.std() > 1
    again = nn.init.uniform_(tg.zeros(1000), -2.0, 2.0, generator=np.random.default_rng(3))
    np.testing.assert_array_equal(again.numpy(), u)
    g = tg.Generator().manual_seed(5)  # a torch.Generator, as llm.c's GPT seeds its own
    drawn = nn.init.normal_(tg.zeros(100), 0.0, 0.02, generator=g).numpy()
    g.manual_seed(5)
    np.testing.assert_array_equal(nn.init.normal_(tg.zeros(100), 0.0, 0.02, generator=g), drawn)
    n = nn.init.normal_(tg.zeros(4000), mean=1.0, std=0.5).numpy()
    assert abs(n.mean() - 1.0) < 0.05 and abs(n.std() - 0.5) < 0.05


def test_parameter_is_a_registered_leaf_sharing_its_data():
    data = tg.ones(3)
    m = nn.Module()
    m.scale = nn.Parameter(data)
    assert isinstance(m.scale, nn.Parameter) and isinstance(m.scale, tg.Tensor)
    assert [k for k, _ in m.named_parameters()] == ["scale"] and m.scale.requires_grad
    assert np.shares_memory(m.scale.numpy(), data.numpy())
    (m.scale * 2.0).sum().backward()
    np.testing.assert_array_equal(m.scale.grad.numpy(), [2.0, 2.0, 2.0])
    assert nn.Parameter().shape == (0,)


def test_module_to_dtype_casts_parameters_and_buffers_in_place():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    weight, count = model[0].weight, model[1].num_batches_tracked
    assert model.double() is model
    assert weight.dtype == np.float64 and model[0].weight is weight
    assert model[1].running_mean.dtype == np.float64 and count.dtype == np.int64
    model.to(tg.float32)
    assert weight.dtype == np.float32
    with pytest.raises(ValueError, match="cpu"):
        model.to("cuda")


# --- attention dropout ----------------------------------------------------------------------------


def test_sdpa_dropout_drops_probabilities_and_traced_draws_as_eager(rng, monkeypatch):
    q, k, v = (tg.tensor(rng.standard_normal((2, 3, 5, 4))) for _ in range(3))
    tg.nn.manual_seed(1)
    got = F.scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    tg.nn.manual_seed(1)
    keep = random.uniform((2, 3, 5, 5), np.float64).numpy() >= 0.4
    s = q.numpy() @ k.numpy().swapaxes(-1, -2) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(got.numpy(), (p * keep / 0.6) @ v.numpy(), atol=1e-12)
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    attention = lambda q: F.scaled_dot_product_attention(q, k, v, dropout_p=0.4)  # noqa: E731
    tg.nn.manual_seed(2)
    eager = [attention(q).numpy() for _ in range(2)]
    tg.nn.manual_seed(2)
    traced = tg.trace(attention, backend="numpy")
    for want in eager:
        np.testing.assert_allclose(traced(q).numpy(), want, atol=1e-12)
    assert not np.allclose(eager[0], eager[1])  # a fresh mask each call


@needs_torch
def test_multihead_attention_unbatched_and_masks_match_torch(rng):
    mha, twin = nn.MultiheadAttention(8, 2).double(), torch.nn.MultiheadAttention(8, 2).double()
    mha.load_state_dict({k: v.numpy() for k, v in twin.state_dict().items()})
    q, kv = rng.standard_normal((5, 8)), rng.standard_normal((4, 8))
    padding = np.array([False, False, True, False])
    float_mask = rng.standard_normal((5, 4))
    for kwargs in ({"key_padding_mask": padding}, {"attn_mask": float_mask},
                   {"need_weights": False}):  # fmt: skip
        t_kwargs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                    for k, v in kwargs.items()}  # fmt: skip
        both(lambda q, kv: mha(q, kv, kv, **kwargs)[0],
             lambda q, kv: twin(q, kv, kv, **t_kwargs)[0], q, kv)  # fmt: skip


def test_multihead_attention_dropout_only_in_training(rng):
    mha = nn.MultiheadAttention(8, 2, dropout=0.5)
    x = tg.tensor(rng.standard_normal((3, 2, 8)).astype(np.float32))
    out, weights = mha(x, x, x)
    assert (weights.numpy() == 0).any()  # dropped probabilities
    mha.eval()
    a, b = mha(x, x, x, need_weights=False)[0], mha(x, x, x, need_weights=False)[0]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert nn.MultiheadAttention(8, 2, kdim=4).k_proj_weight.shape == (8, 4)
    positional = nn.MultiheadAttention(8, 2, 0.1, False, False, False, None, None, True)
    assert positional.batch_first and positional.dropout == 0.1 and positional.in_proj_bias is None


@pytest.mark.parametrize("name", ["ConstantPad3d", "ZeroPad3d", "ReflectionPad3d",
                                  "ReplicationPad3d", "CircularPad3d"])  # fmt: skip
def test_3d_padding_layers_pad_the_three_last_axes(name):
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4, 5))
    widths = (1, 2, 1, 0, 2, 1)
    args = (widths, 0.5) if name == "ConstantPad3d" else (widths,)
    got = getattr(nn, name)(*args)(tg.tensor(x)).numpy()
    mode = {"ConstantPad3d": "constant", "ZeroPad3d": "constant", "ReflectionPad3d": "reflect",
            "ReplicationPad3d": "edge", "CircularPad3d": "wrap"}[name]  # fmt: skip
    pairs = ((0, 0), (0, 0), (2, 1), (1, 0), (1, 2))
    extra = (
        {"constant_values": 0.5 if name == "ConstantPad3d" else 0.0} if mode == "constant" else {}
    )
    np.testing.assert_array_equal(got, np.pad(x, pairs, mode=mode, **extra))


UINT8_RESIZES = [
    dict(size=(9, 7), mode="bilinear"),
    dict(size=(9, 7), mode="bilinear", antialias=True),
    dict(size=(30, 20), mode="bicubic"),  # upsampling: the cubic overshoots, clamped
    dict(size=(9, 7), mode="bicubic", antialias=True),
    dict(size=(30, 25), mode="bilinear", align_corners=True),
    dict(size=(25, 8), mode="bicubic"),  # up one way, down the other
]


def uint8_image():
    return np.random.default_rng(0).integers(0, 256, (2, 3, 17, 13)).astype(np.uint8)


@pytest.mark.parametrize("kw", UINT8_RESIZES)
def test_uint8_images_resize_as_pytorchs_kernels(kw):
    """A uint8 image resizes to uint8, as PyTorch's: along the width, rounded (and clamped) to
    uint8, then along the height from that, rounded again; here from the float resizes."""
    x = uint8_image()
    got = F.interpolate(tg.tensor(x), **kw)
    assert got.dtype == np.uint8
    size, rest = kw["size"], {k: v for k, v in kw.items() if k != "size"}
    wide = F.interpolate(tg.tensor(x.astype(np.float32)), size=(x.shape[2], size[1]), **rest)
    wide = np.clip(np.round(wide.numpy()), 0, 255)
    want = F.interpolate(tg.tensor(wide), size=size, **rest).numpy()
    np.testing.assert_array_equal(got.numpy(), np.clip(np.round(want), 0, 255).astype(np.uint8))


@pytest.mark.parametrize("kw", UINT8_RESIZES)
def test_uint8_resizes_within_one_of_pytorchs(kw):
    torch = pytest.importorskip("torch")
    x = uint8_image()
    want = torch.nn.functional.interpolate(torch.from_numpy(x), **kw).numpy()
    got = F.interpolate(tg.tensor(x), **kw).numpy()
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # its weights are fixed-point


def test_integer_images_other_than_uint8_are_refused():
    with pytest.raises(NotImplementedError, match="int64"):
        F.interpolate(tg.tensor(np.zeros((1, 1, 4, 4), np.int64)), size=(2, 2), mode="bilinear")
    nearest = F.interpolate(tg.tensor(np.arange(16).reshape(1, 1, 4, 4)), size=(2, 2))
    assert nearest.dtype == np.int64  # nearest copies: any dtype

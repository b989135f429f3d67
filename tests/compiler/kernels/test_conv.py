"""The Numba backend's convolution kernels (`compiler.kernels.conv`): every geometry of the NumPy
paths' tests, against the direct reference (forward) and the NumPy versions (gradients), with
blocks of one output row, of one whole sample, of several samples, and as `_block` chooses;
kernels that cover the image (a matrix product of the batch), kernels cropped of the taps that
read only padding, depthwise ones over planes and over channels; inputs in any layout; a traced
step's plan."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.core.ops.test_conv import GEOMETRIES, reference
from tracegrad.compiler import lowering
from tracegrad.compiler.kernels import blas, conv
from tracegrad.compiler.kernels.native import compile_native
from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.ops import conv as C
from tracegrad.nn import functional as F

pytestmark = pytest.mark.skipif(
    blas.gemm_symbols() is None, reason="NumPy's BLAS is not an OpenBLAS with cblas routines"
)
EXTRA = [
    ((3, 4, 5, 6), 6, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),  # the sample is its columns
    ((1, 4, 5, 6), 6, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 2),  # one sample, two threads
    ((1, 4, 7, 6), 6, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),  # its rows split, padded
    ((1, 3, 9, 5), 4, (5, 3), (2, 1), ((2, 2), (1, 1)), (1, 1), 1),  # the same, stride 2
    ((5, 4, 3, 2), 3, (3, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),  # the kernel is the image
    ((5, 4, 3, 3), 6, (3, 3), (2, 2), ((0, 1), (0, 1)), (1, 1), 2),  # the same, in 2 groups
    ((4, 2, 1, 1), 5, (4, 4), (1, 1), ((3, 0), (0, 3)), (1, 1), 1),  # a 1 x 1 input, padded
    ((4, 2, 7, 6), 3, (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),  # unpadded, a row unread
    ((3, 4, 6, 6), 5, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),  # a 1 x 1 kernel, stride 2
    ((4, 6, 1, 1), 5, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # 3 x 3 over 1 x 1: its centre
    ((3, 4, 2, 2), 6, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 2),  # taps reading only padding
    ((3, 4, 1, 3), 5, (5, 3), (1, 1), ((2, 2), (1, 1)), (1, 1), 1),  # cropped in height only
    ((2, 3, 2, 2), 2, (1, 1), (5, 5), ((2, 2), (2, 2)), (1, 1), 1),  # no tap reads the image
    ((3, 4, 6, 5), 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 4),  # depthwise: no products
    ((3, 4, 7, 7), 8, (3, 3), (2, 2), ((0, 1), (0, 1)), (1, 1), 4),  # two outputs a channel
    ((2, 3, 6, 6), 3, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 3),  # dilated depthwise
    ((2, 4, 9, 8), 4, (7, 7), (1, 1), ((3, 3), (3, 3)), (1, 1), 4),  # ConvNeXt's 7 x 7
    ((2, 3, 6, 5), 3, (3, 2), (1, 2), ((0, 0), (0, 0)), (1, 1), 3),  # depthwise, unpadded
    ((2, 5, 9, 9), 5, (5, 5), (2, 2), ((2, 2), (2, 2)), (1, 1), 5),  # depthwise, stride 2
    ((2, 3, 10, 11), 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # rows copied row by row
    ((2, 4, 9, 18), 4, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 2),  # the same, stride 2
]
BLOCKS = {"row": lambda oh: (1, 1), "sample": lambda oh: (oh, 1), "samples": lambda oh: (oh, 3)}


def kernels(x, w, y, attrs):
    """The forward, input-gradient and weight-gradient kernels for these shapes."""
    v = lambda a: Value(a.shape, a.dtype)  # noqa: E731
    nodes = [
        Node(P.conv2d, [v(x), v(w)], [v(y)], attrs),
        Node(P.conv2d_input_grad, [v(y), v(w)], [v(x)], dict(attrs, shape=x.shape)),
        Node(P.conv2d_weight_grad, [v(x), v(y)], [v(w)], dict(attrs, shape=w.shape)),
    ]
    compiled = compile_native(nodes)
    assert all(ok for ok, _ in compiled)
    return [k for _, k in compiled]


def run(kernel, a, b, like):
    out = np.full(like.shape, np.nan, like.dtype)  # every element must be written
    kernel(a, b, out)
    return out


@pytest.mark.parametrize("geometry", GEOMETRIES + EXTRA)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", ["chosen", *BLOCKS])
def test_kernels_match_reference_and_numpy(monkeypatch, geometry, dtype, block):
    if block in BLOCKS:
        monkeypatch.setattr(conv, "_block", lambda node: BLOCKS[block](conv._shapes(node)[2][0]))
    check_kernels(geometry, dtype)


@pytest.mark.parametrize("geometry", [g for g in GEOMETRIES + EXTRA if g[0][1] != g[-1]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_gradients_split_by_output_channels_match(monkeypatch, geometry, dtype):
    """The weight gradient with each thread's share of the output channels over the whole
    batch (`_splits_channels`, chosen for few positions and many channels), on every geometry."""
    monkeypatch.setattr(conv, "_by_planes", lambda node: False)  # products of columns
    monkeypatch.setattr(conv, "_splits_channels", lambda node: conv.OPS[node.prim] == "weight_grad")
    check_kernels(geometry, dtype)


def test_weight_gradients_split_by_output_channels_where_the_batch_has_few_positions():
    def node(x, o):
        f32, gy = np.dtype(np.float32), (x[0], o, *x[2:])
        attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
        return Node(P.conv2d_weight_grad, [Value(x, f32), Value(gy, f32)],
                    [Value((o, x[1], 3, 3), f32)], dict(attrs, shape=(o, x[1], 3, 3)))  # fmt: skip

    assert conv._splits_channels(node((32, 256, 2, 2), 256))  # 128 positions, 256 channels
    assert not conv._splits_channels(node((32, 64, 8, 8), 64))  # 2,048 positions


@pytest.mark.parametrize("geometry", GEOMETRIES + EXTRA)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_geometry_runs_over_planes_too(monkeypatch, geometry, dtype):
    """The depthwise loops over any number of input channels a group (`_by_planes`, chosen for
    few output channels), forced on every geometry."""
    monkeypatch.setattr(conv, "_by_planes", lambda node: True)
    check_kernels(geometry, dtype)


def test_few_output_channels_run_over_planes():
    def node(op, x, o, k=3, pad=1):
        f32, w = np.dtype(np.float32), (o, x[1], k, k)
        y = (x[0], o, x[2] + 2 * pad - k + 1, x[3] + 2 * pad - k + 1)
        attrs = dict(stride=(1, 1), padding=((pad, pad), (pad, pad)), dilation=(1, 1), groups=1)
        ins, out = {P.conv2d: ((x, w), y), P.conv2d_input_grad: ((y, w), x),
                    P.conv2d_weight_grad: ((x, y), w)}[op]  # fmt: skip
        extra = {} if op is P.conv2d else {"shape": out}
        return Node(op, [Value(s, f32) for s in ins], [Value(out, f32)], dict(attrs, **extra))

    rgb = (16, 32, 32, 32)  # into 3 channels: the weight's gradient only
    assert conv._by_planes(node(P.conv2d_weight_grad, rgb, 3))
    assert not conv._by_planes(node(P.conv2d_input_grad, rgb, 3))
    assert not conv._by_planes(node(P.conv2d, rgb, 3))
    assert conv._by_planes(node(P.conv2d, rgb, 1))  # a one-class head: all three
    assert conv._by_planes(node(P.conv2d_input_grad, rgb, 1))
    assert not conv._by_planes(node(P.conv2d_weight_grad, rgb, 1, k=1, pad=0))  # 1 x 1 kernel
    assert not conv._by_planes(node(P.conv2d_weight_grad, rgb, 16))
    assert not conv._by_planes(node(P.conv2d_weight_grad, (4, 8, 4, 4), 1, k=4, pad=0))  # 1 x 1


@pytest.mark.parametrize("geometry", [g for g in EXTRA if g[-1] > 1 and g[0][1] == g[-1]])
@pytest.mark.parametrize("width", [0, 1 << 30])  # the depthwise loops over planes, over channels
def test_depthwise_kernels_both_ways(monkeypatch, geometry, width):
    monkeypatch.setattr(conv, "CHANNELS_LAST_WIDTH", width)
    check_kernels(geometry, np.float64)
    check_kernels(geometry, np.float32)


def check_kernels(geometry, dtype):
    """The three kernels against the reference, the NumPy versions and the adjoint identities;
    their operands left as they were."""
    shape, out, kernel, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((out, shape[1] // groups, *kernel)).astype(dtype)
    a = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = reference(x, w, **a)
    g = rng.standard_normal(y.shape).astype(dtype)
    forward, input_grad, weight_grad = kernels(x, w, y, a)
    x0, w0, g0 = x.copy(), w.copy(), g.copy()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(run(forward, x, w, y), y, rtol=tol, atol=tol)
    dx, dw = run(input_grad, g, w, x), run(weight_grad, x, g, w)
    np.testing.assert_allclose(dx, C.input_grad(g, w, x.shape, **a), rtol=tol, atol=tol)
    np.testing.assert_allclose(dw, C.weight_grad(x, g, w.shape, **a), rtol=tol, atol=tol)
    inner = float(np.vdot(y.astype(np.float64), g))  # the adjoint identities, independently
    scale = np.abs(y).sum() * np.abs(g).max()
    assert abs(float(np.vdot(x, dx)) - inner) <= tol * scale
    assert abs(float(np.vdot(w, dw)) - inner) <= tol * scale
    for before, now in ((x0, x), (w0, w), (g0, g)):
        np.testing.assert_array_equal(before, now)


def activated(x, scale, shift, slope):
    """A batch norm's scale and shift, then a leaky ReLU (a ReLU where the slope is 0)."""
    t = x * scale + shift
    return np.where(t > 0, t, t * slope)


def prologue(x, scale, shift, slope):
    """`activated` as a prologue graph: the image, then its numbers (a 0-d slope, a constant)."""
    v = lambda a: Value(np.shape(a), x.dtype)  # noqa: E731
    image, s, b, k, zero = v(x), v(scale), v(shift), v(slope), Value((), x.dtype, np.zeros(()))
    scaled, shifted, above, sloped, out = v(x), v(x), Value(x.shape, bool), v(x), v(x)
    nodes = [Node(P.mul, [image, s], [scaled]), Node(P.add, [scaled, b], [shifted]),
             Node(P.greater, [shifted, zero], [above]), Node(P.mul, [shifted, k], [sloped]),
             Node(P.where, [above, shifted, sloped], [out])]  # fmt: skip
    return Graph([image, s, b, k, zero], nodes, [out])


def columns_case(monkeypatch, geometry, block, seed):
    """A geometry's image, weight, a norm's scale and shift, attrs and the generator, its
    convolutions run as products of columns in `block`s (depthwise ones too: their loops over
    planes take no prologue or epilogue)."""
    if block in BLOCKS:
        monkeypatch.setattr(conv, "_block", lambda node: BLOCKS[block](conv._shapes(node)[2][0]))
    monkeypatch.setattr(conv, "_by_planes", lambda node: False)  # products of columns
    shape, out, kernel, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((out, shape[1] // groups, *kernel))
    scale, shift = rng.uniform(0.5, 2, (1, shape[1], 1, 1)), rng.uniform(0.5, 1, (shape[1], 1, 1))
    a = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return x, w, scale, shift, a, rng


@pytest.mark.parametrize("geometry", GEOMETRIES + EXTRA)
@pytest.mark.parametrize("block", ["chosen", *BLOCKS])
@pytest.mark.parametrize("slope", [0.0, 0.2])
def test_forward_and_weight_gradient_read_their_image_through_a_prologue(
    monkeypatch, geometry, block, slope
):
    """Forward and the weight gradient apply a prologue (`prologue_source`) to each sample as they
    copy it, and only to the image: the padding stays zero, though the shift would move it; the
    geometries whose products read the image itself (1 x 1, the whole image) lay out columns
    then. (Depthwise ones too, as products of columns: their loops over planes take none.)"""
    x, w, scale, shift, a, rng = columns_case(monkeypatch, geometry, block, 11)
    image = activated(x, scale, shift, slope)
    y = reference(image, w, **a)
    g = rng.standard_normal(y.shape)
    body = prologue(x, scale, shift, np.asarray(slope))
    v = lambda arr: Value(arr.shape, arr.dtype)  # noqa: E731
    numbers = [v(scale), v(shift), v(np.asarray(slope)), body.inputs[-1]]
    nodes = [Node(P.conv2d, [v(x), v(w), *numbers], [v(y)], dict(a, prologue=body)),
             Node(P.conv2d_weight_grad, [v(x), v(g), *numbers], [v(w)],
                  dict(a, shape=w.shape, prologue=body))]  # fmt: skip
    params = (scale, shift, np.asarray(slope), np.zeros(()))
    want = {P.conv2d: y, P.conv2d_weight_grad: C.weight_grad(image, g, w.shape, **a)}
    for node, (ok, kernel) in zip(nodes, compile_native(nodes), strict=True):
        assert ok, node.op
        got = np.full_like(want[node.prim], np.nan)
        kernel(x, w if node.prim is P.conv2d else g, *params, got)
        np.testing.assert_allclose(got, want[node.prim], rtol=1e-12, atol=1e-12, err_msg=node.op)


def epilogue(y, bias, slope):
    """A bias, then a leaky ReLU (`activated`'s), as an epilogue graph: the result, then its
    numbers (a 0-d slope, a constant)."""
    v = lambda a: Value(np.shape(a), y.dtype)  # noqa: E731
    value, b, k, zero = v(y), v(bias), v(slope), Value((), y.dtype, np.zeros(()))
    shifted, above, sloped, out = v(y), Value(y.shape, bool), v(y), v(y)
    nodes = [
        Node(P.add, [value, b], [shifted]),
        Node(P.greater, [shifted, zero], [above]),
        Node(P.mul, [shifted, k], [sloped]),
        Node(P.where, [above, shifted, sloped], [out]),
    ]
    return Graph([value, b, k, zero], nodes, [out])


@pytest.mark.parametrize("geometry", GEOMETRIES + EXTRA)
@pytest.mark.parametrize("block", ["chosen", *BLOCKS])
@pytest.mark.parametrize("case", ["forward", "forward after a prologue", "input gradient"])
def test_results_go_through_an_epilogue(monkeypatch, geometry, block, case):
    """Forward, and the input gradient (a transposed convolution), apply an epilogue
    (`epilogue_source`) to their results as they are written, whatever the block: a sample's
    rows, a whole sample, several samples from one product, the batch's rows where the kernel
    covers the image, a 1 x 1 kernel's sample itself, a padded image stored or an unpadded one
    added in place; forward's after a prologue too."""
    x, w, scale, shift, a, rng = columns_case(monkeypatch, geometry, block, 12)
    prologued = case == "forward after a prologue"
    y = reference(activated(x, scale, shift, 0.2) if prologued else x, w, **a)
    v = lambda arr: Value(np.shape(arr), arr.dtype)  # noqa: E731
    if case == "input gradient":
        g = rng.standard_normal(y.shape)
        result, node, operands = C.input_grad(g, w, x.shape, **a), P.conv2d_input_grad, (g, w)
        a = dict(a, shape=x.shape)
    else:
        result, node, operands = y, P.conv2d, (x, w)
    bias, slope = rng.standard_normal((result.shape[1], 1, 1)), np.asarray(0.1)
    end = epilogue(result, bias, slope)
    attrs, numbers, params = dict(a, epilogue=end), [], []
    if prologued:
        attrs["prologue"] = body = prologue(x, scale, shift, np.asarray(0.2))
        numbers, params = body.inputs[1:], [scale, shift, np.asarray(0.2), np.zeros(())]
    inputs = [*map(v, operands), *numbers, *end.inputs[1:]]
    ((ok, kernel),) = compile_native([Node(node, inputs, end.outputs, attrs)])
    assert ok
    got = np.full_like(result, np.nan)
    kernel(*operands, *params, bias, slope, np.zeros(()), got)
    np.testing.assert_allclose(got, activated(result, 1.0, bias, slope), rtol=1e-12, atol=1e-12)


def test_kernels_read_any_layout_and_read_only_operands():
    shape, out, kernel, stride, padding, dilation, groups = GEOMETRIES[8]
    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((out, shape[1] // groups, *kernel))
    a = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = reference(x, w, **a)
    forward, _, weight_grad = kernels(x, w, y, a)
    xf, wr = np.asfortranarray(x), w.copy()
    wr.flags.writeable = False
    np.testing.assert_allclose(run(forward, xf, wr, y), y, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(y.shape)
    want = C.weight_grad(x, g, w.shape, **a)
    np.testing.assert_allclose(run(weight_grad, xf, g[:, ::-1][:, ::-1], w), want, rtol=1e-12)
    with pytest.raises(ValueError, match="C-contiguous"):
        forward(x, w, np.empty(y.shape[::-1]).T)


def test_numpy_versions_write_into_out():
    """The plan's buffers: the NumPy versions write them (the NumPy backend, and a traced step
    before its kernels are ready)."""
    rng = np.random.default_rng(9)
    a = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    x, w = rng.standard_normal((2, 3, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    y = np.full((2, 4, 5, 5), np.nan)
    assert np.shares_memory(C.forward(x, w, out=y, **a), y)
    np.testing.assert_allclose(y, reference(x, w, **a), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(y.shape)
    for op, args, like in ((C.input_grad, (g, w, x.shape), x),
                           (C.weight_grad, (x, g, w.shape), w)):  # fmt: skip
        out = np.full(like.shape, np.nan)
        result = op(*args, out=out, **a)
        assert np.shares_memory(result, out)
        np.testing.assert_allclose(out, op(*args, **a), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="C-contiguous"):
        C.forward(x, w, out=np.empty((5, 5, 4, 2)).T, **a)


def test_traced_conv_step_runs_the_kernels_and_matches_eager(rng):
    conv_layer = tg.nn.Conv2d(3, 8, 3, padding=1)
    x = tg.tensor(rng.standard_normal((16, 3, 24, 24)).astype(np.float32))

    def step(x):
        loss = (F.relu(conv_layer(x)) ** 2).mean()
        loss.backward()
        return loss

    want = float(step(x))
    grads = [p.grad.numpy().copy() for p in conv_layer.parameters()]
    for p in conv_layer.parameters():
        p.grad = None
    traced = tg.trace(step, backend="numba")
    for _ in range(2):  # the first call runs NumPy while the kernels compile
        got = float(traced(x))
        traced.wait_for_kernels()
        for p, want_grad in zip(conv_layer.parameters(), grads, strict=True):
            np.testing.assert_allclose(p.grad.numpy(), want_grad, rtol=1e-4, atol=1e-6)
            p.grad = None
        assert got == pytest.approx(want, rel=1e-5)
    source = traced.latest.source
    assert "conv2d kernel" in source and "conv2d_weight_grad kernel" in source


TRANSPOSED = [  # (N, in, H, W), out, kernel, stride, padding, output_padding, groups, dilation
    ((3, 5, 1, 1), 4, 4, 1, 0, 0, 1, 1),  # DCGAN's first layer: 1 x 1 to 4 x 4
    ((3, 4, 4, 4), 3, 4, 2, 1, 0, 1, 1),  # DCGAN's upsampling
    ((2, 4, 3, 3), 6, 3, 3, 1, 2, 2, 1),  # stride 3, output_padding, groups
    ((2, 2, 5, 4), 3, 5, 1, 2, 0, 1, 1),  # stride 1, 5 x 5
    ((3, 3, 4, 4), 2, 1, 2, 0, 1, 1, 1),  # a 1 x 1 kernel of stride 2
    ((2, 2, 3, 3), 2, 3, 2, 1, 1, 1, 2),  # dilation
]


@pytest.mark.parametrize("shape, out, k, stride, padding, extra, groups, dilation", TRANSPOSED)
def test_traced_transposed_convolution_runs_the_kernels_and_matches_eager_and_torch(
    monkeypatch, shape, out, k, stride, padding, extra, groups, dilation
):
    """A transposed convolution's forward and both gradients, in float64, by the kernels of a
    traced step (the Numba backend; the NumPy backend too) against eager and PyTorch."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((shape[1], out // groups, k, k))
    args = (None, stride, padding, extra, groups, dilation)
    probe = rng.standard_normal(F.conv_transpose2d(x, w, *args).shape)
    xt, wt = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
    pt = tg.tensor(probe)  # an argument: a constant gradient would run the NumPy versions

    def step(xt, wt, pt):
        y = F.conv_transpose2d(xt, wt, *args)
        (y * pt).sum().backward()
        return y

    want = [step(xt, wt, pt).numpy(), xt.grad.numpy().copy(), wt.grad.numpy().copy()]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        ty = torch.nn.functional.conv_transpose2d(tx, tw, *args)
        (ty * torch.tensor(probe)).sum().backward()
        for mine, theirs in zip(want, (ty.detach(), tx.grad, tw.grad), strict=True):
            np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-10, atol=1e-10)
    for backend in ("numba", "numpy"):
        traced = tg.trace(step, backend=backend)
        for _ in range(2):  # the first call runs NumPy while the kernels compile
            xt.grad = wt.grad = None
            got = [traced(xt, wt, pt).numpy(), xt.grad.numpy(), wt.grad.numpy()]
            traced.wait_for_kernels()
            for mine, theirs in zip(got, want, strict=True):
                np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-10)
        if backend == "numba":
            source = traced.latest.source
            assert "conv2d_input_grad kernel" in source and "conv2d kernel" in source


def test_a_sample_of_many_positions_is_a_block_of_its_own():
    """A first layer's columns are thin (K = 9 here), so BLOCK_BYTES holds several 28 x 28
    samples, but their products were then gathered and spread: the output copied once more.
    A sample of MIN_COLUMNS positions or more is a block of its own (its product written in
    place); only samples smaller than that are joined (8 x 8 ones here)."""
    attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)

    def block(x_shape, out_channels):
        w = (out_channels, x_shape[1], 3, 3)
        y = (x_shape[0], out_channels, *C.output_size(x_shape, w, **attrs))
        node = Node(P.conv2d, [Value(x_shape, np.float32), Value(w, np.float32)],
                    [Value(y, np.float32)], attrs)  # fmt: skip
        return conv._block(node)

    assert 28 * 28 >= conv.MIN_COLUMNS
    assert block((256, 1, 28, 28), 32) == (28, 1)
    rows, samples = block((64, 64, 8, 8), 64)
    assert rows == 8 and samples > 1


@pytest.mark.parametrize("geometry", [GEOMETRIES[0], EXTRA[2], EXTRA[11]])
def test_kernels_of_an_empty_batch(geometry):
    """A batch of no samples (a detector's mask head once no box is left): the outputs are
    empty and the weight's gradient zero, as NumPy's."""
    shape, out, kernel, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(3)
    x = np.zeros((0, *shape[1:]), np.float32)
    w = rng.standard_normal((out, shape[1] // groups, *kernel)).astype(np.float32)
    a = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = reference(x, w, **a)
    forward, input_grad, weight_grad = kernels(x, w, y, a)
    assert run(forward, x, w, y).shape == y.shape
    assert run(input_grad, y, w, x).shape == x.shape
    np.testing.assert_array_equal(run(weight_grad, x, y, w), np.zeros_like(w))

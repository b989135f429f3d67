"""The convolution primitives' code paths: both column layouts ("samples": a stacked matmul per
chunk, "columns": one GEMM per chunk and group), several chunks with a shorter last one, the
"same" geometry copied as flat runs (with and without an unshifted tap, with taps that read only
padding) and the strided windows of any other geometry. Values against a direct reference; the
input and weight gradients as the adjoints of the convolution (<conv(x, w), g> = <x, dx> =
<w, dw>); gradients against finite differences."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tests.conftest import check_grad
from tracegrad.core import primitives as P
from tracegrad.core.ops import conv as C

# (N, C, H, W), out, (kh, kw), stride, ((top, bottom), (left, right)), dilation, groups
GEOMETRIES = [
    ((5, 3, 6, 7), 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # "same", a centre tap
    ((5, 4, 6, 7), 6, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),  # the same, in 2 groups
    ((4, 2, 6, 6), 4, (2, 2), (1, 1), ((0, 1), (1, 0)), (1, 1), 1),  # "same", even kernel
    ((4, 2, 6, 7), 3, (2, 3), (1, 1), ((1, 2), (2, 2)), (3, 2), 1),  # "same", no unshifted tap
    ((3, 2, 2, 3), 2, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 1),  # taps reading only padding
    ((3, 4, 2, 3), 4, (5, 5), (1, 1), ((4, 0), (0, 4)), (1, 1), 2),  # the same, one-sided
    ((5, 2, 7, 6), 3, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),  # stride 2
    ((4, 2, 9, 8), 4, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 1),  # dilation 2, "same"
    ((4, 2, 9, 8), 4, (3, 2), (2, 1), ((0, 3), (2, 0)), (1, 3), 2),  # everything asymmetric
    ((5, 3, 6, 5), 2, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),  # no padding
    ((3, 2, 1, 9), 2, (1, 3), (1, 2), ((0, 0), (1, 1)), (1, 2), 1),  # a height of one
    ((3, 4, 6, 5), 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 4),  # depthwise: whole-batch taps
    ((2, 3, 7, 6), 3, (3, 2), (2, 1), ((0, 2), (1, 0)), (2, 1), 3),  # depthwise, all asymmetric
    ((2, 2, 3, 3), 2, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 2),  # depthwise, taps on padding
]
LAYOUTS = {"samples": 1 << 60, "columns": 0}  # BLAS_ONE_THREAD: each sample's GEMM is small


def reference(x, w, stride, padding, dilation, groups):
    """The cross-correlation, a tap and a group at a time."""
    xp = np.pad(x, ((0, 0), (0, 0), *padding))
    (n, _, h, wd), (o, cg, kh, kw), (sh, sw), (dh, dw) = xp.shape, w.shape, stride, dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    y = np.zeros((n, o, oh, ow), np.result_type(x, w))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg : (g + 1) * cg, i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                           j * dw : j * dw + sw * (ow - 1) + 1 : sw]  # fmt: skip
                y[:, g * og : (g + 1) * og] += np.einsum(
                    "ncyx,oc->noyx", patch, w[g * og : (g + 1) * og, :, i, j]
                )
    return y


@pytest.fixture(params=list(LAYOUTS))
def layout(request, monkeypatch):
    monkeypatch.setattr(C, "BLAS_ONE_THREAD", LAYOUTS[request.param])
    return request.param


def chunk_by(monkeypatch, samples, x, w, out, stride, padding, dilation, groups):
    """Temporaries for `samples` samples a chunk (all the batch if None), or "bands" of two
    output rows of a sample (of two columns of a single row)."""
    args = (x.shape, w.shape, out, stride, padding, dilation, groups, np.result_type(x, w))
    if samples == "bands":
        length = out[0] if out[0] > 1 else out[1]  # rows, or a single row's columns
        monkeypatch.setattr(C, "BAND_BYTES", -(-2 * C._sample_bytes(*args) // length))
        bands = C._bands(*args)
        assert bands is None if length <= 2 else len(bands) == -(-length // 2)
    elif samples is not None:
        monkeypatch.setattr(C, "CHUNK_BYTES", samples * C._Conv(*args).sample_bytes)
        assert C._Conv(*args).chunk == samples


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("chunk", [None, 2, "bands"])
def test_conv_ops_match_reference_and_are_adjoints(layout, monkeypatch, geometry, dtype, chunk):
    shape, out, kernel, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((out, shape[1] // groups, *kernel)).astype(dtype)
    a = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = C.forward(x, w, **a)
    g = rng.standard_normal(y.shape).astype(dtype)
    whole = C.input_grad(g, w, x.shape, **a), C.weight_grad(x, g, w.shape, **a)
    chunk_by(monkeypatch, chunk, x, w, y.shape[2:], **a)  # 2 samples a chunk: 3 chunks of 5
    x0, w0 = x.copy(), w.copy()
    y = C.forward(x, w, **a)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(y, reference(x, w, **a), rtol=tol, atol=tol)
    g0 = g.copy()
    dx = C.input_grad(g, w, x.shape, **a)
    dw = C.weight_grad(x, g, w.shape, **a)
    for chunked, one in zip((dx, dw), whole, strict=True):  # as the whole sample at once
        np.testing.assert_allclose(chunked, one, rtol=tol, atol=tol * np.abs(one).max())
    for r, like in ((y, None), (dx, x), (dw, w)):
        assert r.dtype == dtype and r.flags.c_contiguous
        assert like is None or (r.shape == like.shape and not np.shares_memory(r, like))
    for before, now in ((x0, x), (w0, w), (g0, g)):  # the inputs are only read
        np.testing.assert_array_equal(before, now)
    inner = float(np.vdot(y.astype(np.float64), g))
    scale = np.abs(y).sum() * np.abs(g).max()
    assert abs(float(np.vdot(x, dx)) - inner) <= tol * scale
    assert abs(float(np.vdot(w, dw)) - inner) <= tol * scale


def test_conv_ops_promote_mixed_dtypes_and_read_any_strides(layout, monkeypatch):
    rng = np.random.default_rng(4)
    a = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    x = rng.standard_normal((5, 2, 6, 7)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3))
    chunk_by(monkeypatch, 2, x, w, (6, 7), **a)
    y = C.forward(x, w, **a)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, reference(x.astype(np.float64), w, **a), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(y.shape).astype(np.float32)
    assert C.input_grad(g, w, x.shape, **a).dtype == np.float64
    assert C.weight_grad(x, g, w.shape, **a).dtype == np.float32
    xt = np.asfortranarray(x)  # not C-contiguous, nor are the views below
    np.testing.assert_allclose(C.forward(xt, w, **a), y, rtol=1e-12, atol=1e-12)
    gt = np.ascontiguousarray(g[::-1])[::-1]
    np.testing.assert_array_equal(C.weight_grad(xt, gt, w.shape, **a),
                                  C.weight_grad(x, g, w.shape, **a))  # fmt: skip


@pytest.mark.parametrize("geometry", [GEOMETRIES[i] for i in (1, 3, 5, 8)])
def test_conv2d_gradients_match_finite_differences_on_each_path(layout, monkeypatch, geometry):
    """Through the primitive: F.conv2d pads symmetrically (or "same")."""
    shape, out, kernel, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(shape), rng.standard_normal((out, shape[1] // groups, *kernel))
    a = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    chunk_by(monkeypatch, 2, x, w, C.forward(x, w, **a).shape[2:], **a)
    check_grad(lambda x, w: P.conv2d(x, w, **a), x, w)


@pytest.mark.parametrize("op", ["conv2d", "input_grad", "weight_grad"])
def test_a_large_image_goes_in_bands_within_the_scratch_it_declares(monkeypatch, op):
    """One sample's columns would be k * k * C times its image (a 9 x 9 kernel over a megapixel
    photo: gigabytes); by bands the temporaries stay within what `scratch` tells the memory
    plan, measured by tracemalloc."""
    monkeypatch.setattr(C, "BAND_BYTES", 1 << 20)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 8, 160, 150)).astype(np.float32)
    w = rng.standard_normal((3, 8, 9, 9)).astype(np.float32)
    a = dict(stride=(1, 1), padding=((4, 4), (4, 4)), dilation=(1, 1), groups=1)
    g = rng.standard_normal((1, 3, 160, 150)).astype(np.float32)
    run = {"conv2d": lambda: C.forward(x, w, **a),
           "input_grad": lambda: C.input_grad(g, w, x.shape, **a),
           "weight_grad": lambda: C.weight_grad(x, g, w.shape, **a)}[op]  # fmt: skip
    declared = C.scratch(op, x.shape, w.shape, np.float32, **a)
    whole = C._sample_bytes(x.shape, w.shape, (160, 150), *a.values(), np.float32)
    assert declared < whole / 5  # (the whole sample's columns: 7 MiB)
    tracemalloc.start()
    result = run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= declared + result.nbytes + (64 << 10)  # and Python's objects (the bands)

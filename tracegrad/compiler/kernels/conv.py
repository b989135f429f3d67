"""Convolution kernels on Numba's threads: each thread takes its share of the batch and, sample
by sample, lays out a block of the sample's patches ("columns", K x positions, K = C / groups *
kh * kw, ordered as the weight's (channel, i, j)) in a buffer of its own and runs the block's
product through NumPy's OpenBLAS on that thread (`gemm.declarations`):

- forward: y[n] = w (O, K) @ columns, written in place;
- input gradient: columns = w^T @ g[n], added back where each patch came from (col2im);
- weight gradient: each thread sums columns @ g[n]^T (K, O) over its samples; the threads'
  sums are added (and transposed) after.

`core.ops.conv` has the NumPy versions and the contract. Why per sample: the NumPy version
lays out the patches of a chunk of samples with NumPy copies on one thread and multiplies them
by the weight in one product whose (O, K) side is small, which OpenBLAS runs well below a
core's peak and wakes its threads for; here a block of columns is written and multiplied while
it is in the core's cache, both threads busy throughout (docs/kernels.md). Blocks
span whole output rows, at most BLOCK_BYTES of columns; a 1 x 1 kernel of stride 1 without
padding reads the sample itself. Dilation and groups are supported; modules are per op and
dtype, the geometry an argument."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels.blas import gemm_symbols
from tracegrad.compiler.kernels.cache import GeneratedKernel, in_c_order, named
from tracegrad.compiler.kernels.gemm import declarations
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node

OPS = {P.conv2d: "output", P.conv2d_input_grad: "input_grad", P.conv2d_weight_grad: "weight_grad"}
DTYPES = ("float32", "float64")
BLOCK_BYTES = 1 << 19  # a thread's columns: within its core's L2 cache

_HELPERS = '''
@njit(cache=True)
def geometry(g):
    """(sh, sw, ph, pw, dh, dw, kh, kw, OH, OW, rows of a block) from the launcher's array."""
    return g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10]


@njit(cache=True)
def sizes(images, weights, g, groups):
    """(N, K, itemsize, OH, OW, rows of a block, O and C per group, OH * OW) of a kernel over
    images (N, C, H, W), an input or its gradient, and weights (O, K), or their gradient."""
    oh_, ow_, rows = g[8], g[9], g[10]
    og, cg = weights.shape[0] // groups, images.shape[1] // groups
    return images.shape[0], weights.shape[1], images.itemsize, oh_, ow_, rows, og, cg, oh_ * ow_


@njit(cache=True)
def direct(g):
    """Whether the columns are the image itself: a 1 x 1 kernel, stride 1, no padding."""
    return g[6] == 1 and g[7] == 1 and g[0] == 1 and g[1] == 1 and g[2] == 0 and g[3] == 0


@njit(cache=True)
def runs(g, w):
    """Whether a tap's row of columns is the image shifted by a constant, read as one run (stride
    1, the output as wide as the input), then zeroed where it reads past a row's ends."""
    return g[0] == 1 and g[1] == 1 and g[9] == w


@njit(cache=True)
def valid(g, w, j):
    """The offset of kernel column j, and the output columns [lo, hi) that read inside the image."""
    sw, pw, dw, ow_ = g[1], g[3], g[5], g[9]
    off = j * dw - pw
    lo = min(ow_, max(0, -(off // sw)))
    return off, lo, max(lo, min(ow_, (w - 1 - off) // sw + 1))


@njit(cache=True)
def zero_ends(row, lo, hi, ow_, n_rows):
    """Zero, in each of n_rows output rows of a row of columns, the columns outside [lo, hi)."""
    if lo > 0 or hi < ow_:
        for r in range(n_rows):  # a column or two each: scalar stores beat slices
            for q in range(r * ow_, r * ow_ + lo):
                row[q] = 0
            for q in range(r * ow_ + hi, (r + 1) * ow_):
                row[q] = 0


@njit(cache=True)
def rows_at(a, n, channel, g, r0):
    """The address of output row r0 of plane (n, channel) of a C-contiguous a (N, C, ...) whose
    planes hold OH * OW positions (an output, or a 1 x 1 convolution's input): BLAS reads a
    group's planes from there with leading dimension OH * OW."""
    return a.ctypes.data + ((n * a.shape[1] + channel) * g[8] * g[9] + r0 * g[9]) * a.itemsize


@njit(cache=True)
def columns_at(cols, x, n, c0, cg, g, r0, r1):
    """Output rows [r0, r1) of the columns of sample n, channels c0.. c0 + cg, as BLAS reads
    them (address, leading dimension): the sample's own rows where it is its columns
    (`direct`), else laid out in cols."""
    if direct(g):
        return rows_at(x, n, c0, g, r0), g[8] * g[9]
    columns_of(cols, x, n, c0, cg, g, r0, r1)
    return cols.ctypes.data, cols.shape[1]


@njit(cache=True)
def columns_of(cols, x, n, c0, cg, g, r0, r1):
    """Output rows [r0, r1) of the patches of sample n, channels c0.. c0 + cg, into cols (K x
    (r1 - r0) * OW): row (c, i, j) holds input (c, oh * sh - ph + i * dh, ow * sw - pw + j *
    dw), zero off the image."""
    sh, sw, ph, pw, dh, dw, kh, kw, oh_, ow_, _ = geometry(g)
    h, w = x.shape[2], x.shape[3]
    p0, p1 = r0 * ow_, r1 * ow_
    for c in range(cg):
        plane = x[n, c0 + c]
        flat = plane.reshape(h * w)
        for i in range(kh):
            for j in range(kw):
                row = cols[(c * kh + i) * kw + j]
                off, lo, hi = valid(g, w, j)
                if runs(g, w):
                    shift = (i * dh - ph) * w + off
                    a = min(max(p0, -shift), p1)
                    b = max(min(p1, h * w - shift), a)
                    row[: a - p0] = 0
                    row[a - p0 : b - p0] = flat[a + shift : b + shift]
                    row[b - p0 : p1 - p0] = 0
                    zero_ends(row, lo, hi, ow_, r1 - r0)
                    continue
                for oh in range(r0, r1):
                    seg = row[(oh - r0) * ow_ : (oh - r0 + 1) * ow_]
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= h:
                        seg[:] = 0
                        continue
                    src = plane[ih]
                    seg[:lo] = 0
                    for ow in range(lo, hi):
                        seg[ow] = src[ow * sw + off]
                    seg[hi:] = 0


@njit(cache=True)
def add_columns(dx, cols, n, c0, cg, g, r0, r1):
    """The inverse of `columns_of`: each patch's gradient added back into dx[n] (cols is
    overwritten)."""
    sh, sw, ph, pw, dh, dw, kh, kw, oh_, ow_, _ = geometry(g)
    h, w = dx.shape[2], dx.shape[3]
    p0, p1 = r0 * ow_, r1 * ow_
    for c in range(cg):
        plane = dx[n, c0 + c]
        flat = plane.reshape(h * w)
        for i in range(kh):
            for j in range(kw):
                row = cols[(c * kh + i) * kw + j]
                off, lo, hi = valid(g, w, j)
                if runs(g, w):  # what reads past a row's ends adds nothing
                    zero_ends(row, lo, hi, ow_, r1 - r0)
                    shift = (i * dh - ph) * w + off
                    a = min(max(p0, -shift), p1)
                    b = max(min(p1, h * w - shift), a)
                    flat[a + shift : b + shift] += row[a - p0 : b - p0]
                    continue
                for oh in range(r0, r1):
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= h:
                        continue
                    seg, dst = row[(oh - r0) * ow_ :], plane[ih]
                    for ow in range(lo, hi):
                        dst[ow * sw + off] += seg[ow]
'''

_FORWARD = '''
@njit("void({dtype}[:, :, :, ::1], {dtype}[:, ::1], int64[::1], int64, {dtype}[:, :, ::1], int64)",
      parallel=True, cache=True)
def kernel(x, w, g, groups, y, threads):
    """y[n] (O, OH * OW) = w (O, K) @ the columns of x[n], group by group."""
    batch, k, size, oh_, ow_, rows, og, cg, positions = sizes(x, w, g, groups)
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    for part in prange(threads):
        cols = np.empty((k, rows * ow_), D)
        for n in range(part * batch // threads, (part + 1) * batch // threads):
            for grp in range(groups):
                for r0 in range(0, oh_, rows):
                    r1 = min(oh_, r0 + rows)
                    src, ld = columns_at(cols, x, n, grp * cg, cg, g, r0, r1)
                    gemm(ROW_MAJOR, AS_IS, AS_IS, og, (r1 - r0) * ow_, k, T(1),
                         w.ctypes.data + grp * og * k * size, k, src, ld, T(0),
                         rows_at(y, n, grp * og, g, r0), positions)
    set_blas_threads(blas_threads)
'''

_INPUT_GRAD = '''
@njit("void({dtype}[:, :, ::1], {dtype}[:, ::1], int64[::1], int64, {dtype}[:, :, :, ::1], int64)",
      parallel=True, cache=True)
def kernel(gy, w, g, groups, dx, threads):
    """The columns of dx[n] = w^T (K, O) @ gy[n], added back where they came from."""
    batch, k, size, oh_, ow_, rows, og, cg, positions = sizes(dx, w, g, groups)
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    for part in prange(threads):
        cols = np.empty((k, rows * ow_), D)
        for n in range(part * batch // threads, (part + 1) * batch // threads):
            in_place = direct(g)  # the columns are dx[n]'s own rows: written, not added
            if not in_place:
                dx[n] = 0
            for grp in range(groups):
                for r0 in range(0, oh_, rows):
                    r1 = min(oh_, r0 + rows)
                    if in_place:
                        dst, ld = rows_at(dx, n, grp * cg, g, r0), positions
                    else:
                        dst, ld = cols.ctypes.data, rows * ow_
                    gemm(ROW_MAJOR, TRANSPOSED, AS_IS, k, (r1 - r0) * ow_, og, T(1),
                         w.ctypes.data + grp * og * k * size, k, rows_at(gy, n, grp * og, g, r0),
                         positions, T(0), dst, ld)
                    if not in_place:
                        add_columns(dx, cols, n, grp * cg, cg, g, r0, r1)
    set_blas_threads(blas_threads)
'''

_WEIGHT_GRAD = '''
@njit("void({dtype}[:, :, :, ::1], {dtype}[:, :, ::1], int64[::1], int64, {dtype}[:, ::1], int64)",
      parallel=True, cache=True)
def kernel(x, gy, g, groups, dw, threads):
    """dw (O, K) = the sum over samples of gy[n] @ (the columns of x[n])^T, group by group:
    each thread sums its samples' as columns @ gy[n]^T (K, O / groups), the orientation
    OpenBLAS runs faster for these shapes, then the threads' sums are added and transposed."""
    batch, k, size, oh_, ow_, rows, og, cg, positions = sizes(x, dw, g, groups)
    sums = np.zeros((threads, groups, k, og), D)
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    for part in prange(threads):
        cols = np.empty((k, rows * ow_), D)
        for n in range(part * batch // threads, (part + 1) * batch // threads):
            for grp in range(groups):
                for r0 in range(0, oh_, rows):
                    r1 = min(oh_, r0 + rows)
                    src, ld = columns_at(cols, x, n, grp * cg, cg, g, r0, r1)
                    gemm(ROW_MAJOR, AS_IS, TRANSPOSED, k, og, (r1 - r0) * ow_, T(1), src, ld,
                         rows_at(gy, n, grp * og, g, r0), positions, T(1),
                         sums.ctypes.data + (part * groups + grp) * k * og * size, og)
    set_blas_threads(blas_threads)
    for grp in range(groups):  # loops: array expressions here compiled into more parallel code
        for i in range(og):
            for j in range(k):
                total = sums[0, grp, j, i]
                for part in range(1, threads):
                    total += sums[part, grp, j, i]
                dw[grp * og + i, j] = total
'''

_KERNELS = {"output": _FORWARD, "input_grad": _INPUT_GRAD, "weight_grad": _WEIGHT_GRAD}

_HEAD = '''"""Convolution {op} ({dtype}) on Numba's threads: compiler.kernels.conv generated it."""

import numpy as np
from numba import njit, prange

{declarations}
D = np.{dtype}

'''


def generate_source(op: str, dtype: str, ints: str) -> str:
    """The text of the module of `op`'s kernel for `dtype`, BLAS sizes of integer type `ints`."""
    head = _HEAD.format(
        op=op.replace("_", " "), dtype=dtype, declarations=declarations(dtype, ints)
    )
    return head + _HELPERS + _KERNELS[op].format(dtype=dtype)


def module(node: Node) -> tuple[str, str]:
    """The name and text of a convolution node's kernel module; NotImplementedError unless its
    operands are of its result's dtype, float32 or float64, not constants, and NumPy's OpenBLAS
    has the routines."""
    dtype = node.outputs[0].dtype.name
    ints = gemm_symbols()
    if (
        ints is None
        or dtype not in DTYPES
        or any(v.dtype.name != dtype or v.const is not None for v in node.inputs)
    ):
        raise NotImplementedError(f"no convolution kernel for {[v.type_str for v in node.inputs]}")
    return named("conv", generate_source(OPS[node.prim], dtype, ints))


class ConvKernel(GeneratedKernel):
    """`kernel(a, b, out)` for one node: the operands made C-contiguous and writeable, the
    weight (or its gradient) seen as (O, K), the gradient of the output as (N, O, OH * OW)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.op, a = OPS[node.prim], node.attrs
        (_, (_, cg, kh, kw), (oh, ow)), rows = _shapes(node), _rows(node)
        (sh, sw), ((ph, _), (pw, _)), (dh, dw) = a["stride"], a["padding"], a["dilation"]
        self.geometry = np.array([sh, sw, ph, pw, dh, dw, kh, kw, oh, ow, rows], np.int64)
        self.groups, self.k = a["groups"], cg * kh * kw
        self.threads = numba.get_num_threads()  # as many shares of the batch, from now on
        self.scratch = scratch(node)

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError(f"convolution kernels write C-contiguous results, not {out.strides}")
        a, b = in_c_order(a), in_c_order(b)
        if self.op == "output":
            args = (a, b.reshape(b.shape[0], self.k), out.reshape(*out.shape[:2], -1))
        elif self.op == "input_grad":
            args = (a.reshape(*a.shape[:2], -1), b.reshape(b.shape[0], self.k), out)
        else:
            args = (a, b.reshape(*b.shape[:2], -1), out.reshape(out.shape[0], self.k))
        self.compiled(*args[:2], self.geometry, self.groups, args[2], self.threads)


def _shapes(node: Node) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The node's input, weight and output sizes: (N, C, H, W), (O, C / groups, kh, kw) and
    (OH, OW)."""
    op, (a, b), out = OPS[node.prim], (v.shape for v in node.inputs), node.outputs[0].shape
    x, w, y = {"output": (a, b, out), "input_grad": (out, b, a), "weight_grad": (a, out, b)}[op]
    return x, w, y[2:]


def _rows(node: Node) -> int:
    """Output rows a block of columns spans: as many as BLOCK_BYTES hold, at least one."""
    _, (_, cg, kh, kw), (oh, ow) = _shapes(node)
    per_row = cg * kh * kw * ow * node.outputs[0].dtype.itemsize
    return max(1, min(oh, BLOCK_BYTES // per_row))


def scratch(node: Node) -> int:
    """Bytes the node's kernel allocates: each thread's columns, and for the weight's gradient
    the threads' sums and their total. (The memory plan counts these, not the NumPy version's.)"""
    threads, item = numba.get_num_threads(), node.outputs[0].dtype.itemsize
    _, (o, cg, kh, kw), (_, ow) = _shapes(node)
    total = threads * cg * kh * kw * _rows(node) * ow * item
    if OPS[node.prim] == "weight_grad":
        total += (threads + 1) * o * cg * kh * kw * item
    return total


def launcher(node: Node, compiled: Callable, path: Path) -> ConvKernel:
    return ConvKernel(node, compiled, path)

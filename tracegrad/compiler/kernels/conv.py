"""Convolution kernels on Numba's threads: each thread takes its share of the batch (the forward,
where a block is a sample's rows: of the blocks, so that one image keeps every thread busy) and,
block by block, lays out the block's patches ("columns", K x positions, K = C / groups * kh * kw,
ordered as the weight's (channel, i, j)) in a buffer of its own and runs the block's product
through the plan's GEMM routine on that thread (`gemm.declarations`: MKL's or NumPy's
OpenBLAS's, single-threaded):

- forward: y = w (O, K) @ columns;
- input gradient: columns = w^T @ g, added back where each patch came from (col2im);
- weight gradient: each thread sums columns @ g^T (K, O) over its blocks; the threads' sums
  are added (and transposed) after.

A transposed convolution is the input gradient (its gradients the forward and the weight
gradient), so these three serve both. A depthwise convolution (a group one input channel) takes
no columns and no products: its taps are runs of multiply-adds over planes split by stride phase,
or, where output rows are short, over channels-last samples (`depthwise`, `depthwise_last`); the
loops over planes also run the ops whose groups have few output channels (`_by_planes`).
`core.ops.conv` has the NumPy versions and the contract.

Blocks: a block holds at most BLOCK_BYTES of columns, but at least MIN_COLUMNS of them. Where a
sample has MIN_COLUMNS positions or more, a block is one sample (or a few of its output rows):
its product reads the gradient and writes the output where they lie. Only where a sample has
fewer are several whole samples side by side (their gradients gathered into one operand, their
outputs spread from one product), so that small images (4 x 4, 8 x 8 with many channels) still
make products wide enough for BLAS to run near its rate; the gathering and spreading copy the
output once more, as much memory traffic as a first layer's whole product (K = 9..27). A block
is written and multiplied while it is in the core's cache, both threads busy throughout
(docs/kernels.md). The patches are read from a
padded copy of the sample's group of channels (and the input gradient added into one, then
stored): then every row of columns is a whole strided run without bounds tests, copied output
row by output row, or, where those rows are short (`SHORT_ROWS`), as one run over the block's
positions through a table of where each reads (`by_positions`). Two geometries
need no columns: a 1 x 1 kernel of stride 1 without padding reads the sample itself, and a
kernel that covers the image exactly (a 1 x 1 output: DCGAN's first and last layers) is one
matrix product of the batch's rows. Dilation and groups are supported; modules are per op and
dtype, the geometry an argument. Forward and the weight gradient may read their image through a
prologue (`prologue_source`: a norm and activation), and forward and the input gradient (a
transposed convolution) write their results through an epilogue (`epilogue_source`: a bias and
what follows it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import fastmath, team
from tracegrad.compiler.kernels.blas import gemm_symbols
from tracegrad.compiler.kernels.cache import GeneratedKernel, in_c_order, named
from tracegrad.compiler.kernels.fused import scalar_cast
from tracegrad.compiler.kernels.gemm import declarations
from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node

OPS = {P.conv2d: "output", P.conv2d_input_grad: "input_grad", P.conv2d_weight_grad: "weight_grad"}
DTYPES = ("float32", "float64")
# a kernel at any size (`lowering`): the NumPy versions are a call per tap or per group whatever
# the size (a depthwise 7 x 7 is 49 passes over windows a few elements wide)
KERNEL_MIN = 0
BLOCK_BYTES = 1 << 19  # a thread's columns and product: within its core's L2 cache
MIN_COLUMNS = 256  # a block's product is at least this wide, even past BLOCK_BYTES

_HELPERS = '''
U = numba.uint64  # indices the compiler knows are not negative: no wraparound test per access


@njit(cache=True)
def geometry(g):
    """(sh, sw, ph, pw, dh, dw, kh, kw, OH, OW) from the launcher's array."""
    return g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9]


@njit(cache=True)
def sizes(images, weights, g, groups):
    """(N, K, itemsize, OH, OW, rows of a block, samples of a block, O and C per group, OH *
    OW) of a kernel over images (N, C, H, W), an input or its gradient, and weights (O, K), or
    their gradient."""
    oh_, ow_ = g[8], g[9]
    og, cg = weights.shape[0] // groups, images.shape[1] // groups
    return (images.shape[0], weights.shape[1], images.itemsize, oh_, ow_, g[10], g[11], og, cg,
            oh_ * ow_)


@njit(cache=True)
def direct(g):
    """Whether the columns are the image itself: a 1 x 1 kernel, stride 1, no padding (and no
    prologue to apply to it)."""
    return (not PROLOGUE and g[6] == 1 and g[7] == 1 and g[0] == 1 and g[1] == 1 and g[2] == 0
            and g[3] == 0)


@njit(cache=True)
def dense(g, x):
    """Whether the kernel covers the image exactly, once (a 1 x 1 output, no padding or
    dilation): each sample's columns are the sample itself, in order, and the convolution a
    matrix product of the batch's rows, x (N, C * H * W) by w (O, K) per group (and no
    prologue to apply to it)."""
    return (not PROLOGUE and g[8] == 1 and g[9] == 1 and g[2] == 0 and g[3] == 0 and g[4] == 1
            and g[5] == 1 and x.shape[2] == g[6] and x.shape[3] == g[7])


@njit(cache=True)
def rows_at(a, n, channel, g, r0):
    """The address of output row r0 of plane (n, channel) of a C-contiguous a (N, C, ...) whose
    planes hold OH * OW positions (an output, or a 1 x 1 convolution's input): BLAS reads a
    group's planes from there with leading dimension OH * OW."""
    return a.ctypes.data + ((n * a.shape[1] + channel) * g[8] * g[9] + r0 * g[9]) * a.itemsize


@njit(cache=True)
def extent(x, g):
    """(hp, wp): big enough for the image at (ph, pw) and for every position a tap reads."""
    sh, sw, ph, pw, dh, dw, kh, kw, oh_, ow_ = geometry(g)
    return (max(ph + x.shape[2], (oh_ - 1) * sh + (kh - 1) * dh + 1),
            max(pw + x.shape[3], (ow_ - 1) * sw + (kw - 1) * dw + 1))


@njit(cache=True)
def padded(x, g, cg):
    """A zeroed image of cg channels of `extent`: the padded copy of a sample's group of
    channels."""
    hp, wp = extent(x, g)
    return np.zeros((cg, hp, wp), D)


@njit(cache=True)
def load(pad, x, n, c0, g, p):
    """The padded image `pad` = channels c0.. of x[n] (its border stays zero), through the
    `prologue` (its numbers per channel p). Flat indices, here and below: a view costs two
    atomic updates of the array's reference count, which the threads contend for, and more than
    a short row's copy."""
    cg, hp, wp = pad.shape
    h, w, ph, pw = x.shape[2], x.shape[3], g[2], g[3]
    pf, xf = pad.reshape(pad.size), x.reshape(x.size)
    for c in range(cg):
        q = numbers(p, c0 + c)
        for a in range(h):
            dst, src = U((c * hp + a + ph) * wp + pw), U(((n * x.shape[1] + c0 + c) * h + a) * w)
            for b in range(U(w)):
                pf[dst + b] = prologue(xf[src + b], q)


@njit(cache=True)
def store(dx, pad, n, c0, g, e):
    """The inverse of `load`: channels c0.. of dx[n] = pad's image, through the `epilogue`
    (its numbers per channel e)."""
    cg, hp, wp = pad.shape
    h, w, ph, pw = dx.shape[2], dx.shape[3], g[2], g[3]
    pf, xf = pad.reshape(pad.size), dx.reshape(dx.size)
    for c in range(cg):
        q = out_numbers(e, c0 + c)
        for a in range(h):
            src, dst = U((c * hp + a + ph) * wp + pw), U(((n * dx.shape[1] + c0 + c) * h + a) * w)
            for b in range(U(w)):
                xf[dst + b] = epilogue(pf[src + b], q)


@njit(cache=True)
def unpadded(x, g):
    """Whether every position a tap reads is inside the image: the patches are read from the
    sample itself, without a padded copy."""
    sh, sw, ph, pw, dh, dw, kh, kw, oh_, ow_ = geometry(g)
    return (ph == 0 and pw == 0 and (oh_ - 1) * sh + (kh - 1) * dh < x.shape[2]
            and (ow_ - 1) * sw + (kw - 1) * dw < x.shape[3])


@njit(cache=True)
def source(x, pad, n, c0, g, r0, p):
    """Where the patches of channels c0.. of x[n] are read, (flat array, offset of the first
    channel, rows, columns): x itself if `unpadded` (and without a prologue), else pad (loaded
    at the first row block)."""
    h, w = x.shape[2], x.shape[3]
    if not PROLOGUE and unpadded(x, g):
        return x.reshape(x.size), (n * x.shape[1] + c0) * h * w, h, w
    if r0 == 0:
        load(pad, x, n, c0, g, p)
    return pad.reshape(pad.size), 0, pad.shape[1], pad.shape[2]


@njit(cache=True)
def target(dx, pad, n, c0, g, r0):
    """Where the patches' gradients for channels c0.. of dx[n] are added (as `source`): zeroed
    at the first row block."""
    cg = pad.shape[0]
    if unpadded(dx, g):
        flat, base = dx.reshape(dx.size), (n * dx.shape[1] + c0) * dx.shape[2] * dx.shape[3]
        if r0 == 0:
            for e in range(U(base), U(base + cg * dx.shape[2] * dx.shape[3])):
                flat[e] = 0
        return flat, base, dx.shape[2], dx.shape[3]
    if r0 == 0:
        pad[:] = 0
    return pad.reshape(pad.size), 0, pad.shape[1], pad.shape[2]


SHORT_ROWS = 8  # output rows narrower than this are copied `by_positions`


@njit(cache=True)
def positions_of(g, wp, r0, r1):
    """Where each position of output rows [r0, r1) reads its first tap, from the first tap of
    row 0, in an image wp wide: rows of fewer than SHORT_ROWS positions are copied as one run
    over the block's positions through these offsets, for a loop per row of a few elements
    costs more than its copies (a ResNet's 2 x 2 and 4 x 4 images)."""
    sh, sw, ow_ = g[0], g[1], g[9]
    at = np.empty((r1 - r0) * ow_, np.int64)
    for oh in range(r0, r1):
        for ow in range(ow_):
            at[(oh - r0) * ow_ + ow] = oh * sh * wp + ow * sw
    return at


@njit(cache=True)
def by_positions(cols, col0, img, base, cg, hp, wp, g, r0, r1, adding):
    """`columns_of` (or, `adding`, `add_columns`) for rows narrower than SHORT_ROWS: each row of
    columns one run over the block's positions (`positions_of`)."""
    sh, sw, ph, pw, dh, dw, kh, kw, oh_, ow_ = geometry(g)
    cf, at = cols.reshape(cols.size), positions_of(g, wp, r0, r1)
    for c in range(cg):
        for i in range(kh):
            for j in range(kw):
                q = U(((c * kh + i) * kw + j) * cols.shape[1] + col0)
                tap = U(base + (c * hp + i * dh) * wp + j * dw)
                for t in range(U(at.size)):
                    if adding:
                        img[tap + U(at[t])] += cf[q + t]
                    else:
                        cf[q + t] = img[tap + U(at[t])]


@njit(cache=True)
def columns_of(cols, col0, src, base, cg, hp, wp, g, r0, r1):
    """Output rows [r0, r1) of the patches of an image of cg channels of hp x wp at src[base:]
    (`source`) into the columns col0.. col0 + (r1 - r0) * OW of cols (K rows): row (c, i, j)
    holds (c, oh * sh + i * dh, ow * sw + j * dw). Padded (or inside the image), every row is
    whole: no bounds to test."""
    sh, sw, ph, pw, dh, dw, kh, kw, oh_, ow_ = geometry(g)
    cf, width, step = cols.reshape(cols.size), U(ow_), U(sw)
    if ow_ < SHORT_ROWS:
        by_positions(cols, col0, src, base, cg, hp, wp, g, r0, r1, False)
        return
    for c in range(cg):
        for i in range(kh):
            for j in range(kw):
                q = U(((c * kh + i) * kw + j) * cols.shape[1] + col0)
                for oh in range(r0, r1):
                    at = U(base + (c * hp + oh * sh + i * dh) * wp + j * dw)
                    if sw == 1:
                        for t in range(width):
                            cf[q + t] = src[at + t]
                    else:
                        for t in range(width):
                            cf[q + t] = src[at + t * step]
                    q += width


@njit(cache=True)
def add_columns(dst, base, cg, hp, wp, cols, col0, g, r0, r1):
    """The inverse of `columns_of`: each patch's gradient, in the columns col0.. of cols, added
    where the patch came from, into an image at dst[base:] (`target`)."""
    sh, sw, ph, pw, dh, dw, kh, kw, oh_, ow_ = geometry(g)
    cf, width, step = cols.reshape(cols.size), U(ow_), U(sw)
    if ow_ < SHORT_ROWS:
        by_positions(cols, col0, dst, base, cg, hp, wp, g, r0, r1, True)
        return
    for c in range(cg):
        for i in range(kh):
            for j in range(kw):
                q = U(((c * kh + i) * kw + j) * cols.shape[1] + col0)
                for oh in range(r0, r1):
                    at = U(base + (c * hp + oh * sh + i * dh) * wp + j * dw)
                    if sw == 1:
                        for t in range(width):
                            dst[at + t] += cf[q + t]
                    else:
                        for t in range(width):
                            dst[at + t * step] += cf[q + t]
                    q += width


@njit(cache=True)
def gather(block, a, n0, n1, channel, count, p0, p1):
    """Positions [p0, p1) of planes channel.. channel + count of samples n0.. n1 of a (N, C,
    positions), side by side in block (count, (n1 - n0) * (p1 - p0)): a block's gradient of the
    output, as the product reads it."""
    width = p1 - p0
    for m in range(n1 - n0):
        for o in range(count):
            for t in range(width):
                block[o, m * width + t] = a[n0 + m, channel + o, p0 + t]


@njit(cache=True)
def row_blocks(part, threads, batch, groups, oh_, rows):
    """A thread's share [u0, u1) of the (sample, group, row block) blocks, and the row blocks a
    sample has: blocks of one sample's rows, shared so that one image keeps every thread busy."""
    blocks = (oh_ + rows - 1) // rows
    units = batch * groups * blocks
    return part * units // threads, (part + 1) * units // threads, blocks


@njit(cache=True)
def row_block(u, groups, blocks, rows, oh_):
    """Block u's (sample, group, first row, end row)."""
    r0 = u % blocks * rows
    return u // (groups * blocks), u // blocks % groups, r0, min(oh_, r0 + rows)


@njit(cache=True)
def block_columns(x, pad, cols, n, c0, cg, g, r0, r1, p, first, positions):
    """(address, leading dimension) of the columns of rows [r0, r1) of channels c0.. of x[n]:
    the sample itself where the kernel reads it `direct`ly, else laid out in `cols` (the
    thread's `first` block loads its padded image, as a sample's first row block does)."""
    if direct(g):
        return rows_at(x, n, c0, g, r0), positions
    flat, base, hp, wp = source(x, pad, n, c0, g, 0 if first else r0, p)
    columns_of(cols, 0, flat, base, cg, hp, wp, g, r0, r1)
    return cols.ctypes.data, cols.shape[1]


@njit(cache=True)
def spread(a, block, n0, n1, channel, count, p0, p1, e):
    """The inverse of `gather`: a block's product written into the outputs of its samples,
    through the `epilogue` (its numbers per output channel e)."""
    width = p1 - p0
    for m in range(n1 - n0):
        for o in range(count):
            q = out_numbers(e, channel + o)
            for t in range(width):
                a[n0 + m, channel + o, p0 + t] = epilogue(block[o, m * width + t], q)


@njit(cache=True)
def finish(y, e, n, c0, count, p0, p1):
    """Positions [p0, p1) of channels c0.. c0 + count of y[n] (N, C, positions or H, W) through
    the `epilogue`, in place, while what just wrote them is in cache."""
    if not EPILOGUE or y.size == 0:
        return
    yf, positions = y.reshape(y.size), y.size // (y.shape[0] * y.shape[1])
    for c in range(c0, c0 + count):
        q = out_numbers(e, c)
        at = U((n * y.shape[1] + c) * positions)
        for t in range(U(p0), U(p1)):
            yf[at + t] = epilogue(yf[at + t], q)


@njit(cache=True)
def complete(dx, pad, n, c0, cg, g, e):
    """Channels c0.. of dx[n], whose patches are all added: stored from the padded image, or,
    added in place, through the `epilogue` there."""
    if unpadded(dx, g):
        finish(dx, e, n, c0, cg, 0, dx.shape[2] * dx.shape[3])
    else:
        store(dx, pad, n, c0, g, e)


'''

_FORWARD = '''
@njit("void({dtype}[:, :, :, ::1], {dtype}[:, ::1], int64[::1], int64, {dtype}[:, ::1], "
      "{dtype}[:, ::1], {dtype}[:, :, ::1], int64)", parallel=True, cache=True)
def kernel(x, w, g, groups, p, e, y, threads):
    """y[n] (O, OH * OW) = w (O, K) @ the columns of x[n], group by group; a block of several
    samples is one product, whose result is then spread over their outputs. Blocks of one
    sample's rows are shared among the threads (the input gradient's cannot be: neighbouring
    rows' patches add into the same input rows). Each block's results go through the
    `epilogue` (its numbers e) as they are written."""
    batch, k, size, oh_, ow_, rows, nb, og, cg, positions = sizes(x, w, g, groups)
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    for part in prange(threads):
        first, last = part * batch // threads, (part + 1) * batch // threads
        if dense(g, x):  # y (share, O) = x (share, K) @ w^T, group by group
            for grp in range(groups if last > first else 0):
                gemm(ROW_MAJOR, AS_IS, TRANSPOSED, last - first, og, k, T(1),
                     x.ctypes.data + (first * groups + grp) * k * size, groups * k,
                     w.ctypes.data + grp * og * k * size, k, T(0),
                     y.ctypes.data + (first * groups + grp) * og * size, groups * og)
                for n in range(first, last):
                    finish(y, e, n, grp * og, og, 0, 1)
            continue
        cols = np.empty((k, nb * rows * ow_), D)
        prod = np.empty((og, nb * rows * ow_ if nb > 1 else 0), D)
        pad = padded(x, g, cg)
        if nb == 1:  # blocks of one sample's rows, each product straight into y[n]
            u0, u1, blocks = row_blocks(part, threads, batch, groups, oh_, rows)
            for u in range(u0, u1):
                n, grp, r0, r1 = row_block(u, groups, blocks, rows, oh_)
                src, ld = block_columns(x, pad, cols, n, grp * cg, cg, g, r0, r1, p, u == u0,
                                        positions)
                gemm(ROW_MAJOR, AS_IS, AS_IS, og, (r1 - r0) * ow_, k, T(1),
                     w.ctypes.data + grp * og * k * size, k, src, ld, T(0),
                     rows_at(y, n, grp * og, g, r0), positions)
                finish(y, e, n, grp * og, og, r0 * ow_, r1 * ow_)
            continue
        for n0 in range(first, last, nb):
            n1 = min(last, n0 + nb)
            for grp in range(groups):
                wg = w.ctypes.data + grp * og * k * size
                for r0 in range(0, oh_, rows):
                    r1 = min(oh_, r0 + rows)
                    width = (r1 - r0) * ow_
                    for n in range(n0, n1):  # a block of several samples spans all the rows
                        flat, base, hp, wp = source(x, pad, n, grp * cg, g, r0, p)
                        columns_of(cols, (n - n0) * width, flat, base, cg, hp, wp, g, r0, r1)
                    gemm(ROW_MAJOR, AS_IS, AS_IS, og, (n1 - n0) * width, k, T(1), wg, k,
                         cols.ctypes.data, cols.shape[1], T(0), prod.ctypes.data, prod.shape[1])
                    spread(y, prod, n0, n1, grp * og, og, r0 * ow_, r1 * ow_, e)
    set_blas_threads(blas_threads)
'''

_INPUT_GRAD = '''
@njit("void({dtype}[:, :, ::1], {dtype}[:, ::1], int64[::1], int64, {dtype}[:, ::1], "
      "{dtype}[:, :, :, ::1], int64)", parallel=True, cache=True)
def kernel(gy, w, g, groups, e, dx, threads):
    """The columns of dx[n] = w^T (K, O) @ gy[n], added back where they came from, in a padded
    image stored into dx[n] once whole; a block of several samples is one product, of their
    gradients gathered side by side. Each sample goes through the `epilogue` (its numbers e)
    once whole (a transposed convolution's bias)."""
    batch, k, size, oh_, ow_, rows, nb, og, cg, positions = sizes(dx, w, g, groups)
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    for part in prange(threads):
        first, last = part * batch // threads, (part + 1) * batch // threads
        if dense(g, dx):  # dx (share, K) = gy (share, O) @ w, group by group
            for grp in range(groups if last > first else 0):
                gemm(ROW_MAJOR, AS_IS, AS_IS, last - first, k, og, T(1),
                     gy.ctypes.data + (first * groups + grp) * og * size, groups * og,
                     w.ctypes.data + grp * og * k * size, k, T(0),
                     dx.ctypes.data + (first * groups + grp) * k * size, groups * k)
                for n in range(first, last):
                    finish(dx, e, n, grp * cg, cg, 0, dx.shape[2] * dx.shape[3])
            continue
        cols = np.empty((k, nb * rows * ow_), D)
        block = np.empty((og, nb * rows * ow_ if nb > 1 else 0), D)
        pad = padded(dx, g, cg)
        for n0 in range(first, last, nb):
            n1 = min(last, n0 + nb)
            for grp in range(groups):
                wg = w.ctypes.data + grp * og * k * size
                for r0 in range(0, oh_, rows):
                    r1 = min(oh_, r0 + rows)
                    width = (r1 - r0) * ow_
                    if n1 - n0 == 1:
                        in_place = direct(g)  # the columns are dx[n]'s own rows
                        dst, ld = rows_at(dx, n0, grp * cg, g, r0), positions
                        if not in_place:
                            dst, ld = cols.ctypes.data, cols.shape[1]
                        gemm(ROW_MAJOR, TRANSPOSED, AS_IS, k, width, og, T(1), wg, k,
                             rows_at(gy, n0, grp * og, g, r0), positions, T(0), dst, ld)
                        if in_place:
                            finish(dx, e, n0, grp * cg, cg, r0 * ow_, r1 * ow_)
                            continue
                        flat, base, hp, wp = target(dx, pad, n0, grp * cg, g, r0)
                        add_columns(flat, base, cg, hp, wp, cols, 0, g, r0, r1)
                        if r1 == oh_:
                            complete(dx, pad, n0, grp * cg, cg, g, e)
                        continue
                    gather(block, gy, n0, n1, grp * og, og, r0 * ow_, r1 * ow_)
                    gemm(ROW_MAJOR, TRANSPOSED, AS_IS, k, (n1 - n0) * width, og, T(1), wg, k,
                         block.ctypes.data, block.shape[1], T(0), cols.ctypes.data,
                         cols.shape[1])
                    for n in range(n0, n1):  # a block of several samples spans all the rows
                        flat, base, hp, wp = target(dx, pad, n, grp * cg, g, r0)
                        add_columns(flat, base, cg, hp, wp, cols, (n - n0) * width, g, r0, r1)
                        complete(dx, pad, n, grp * cg, cg, g, e)
    set_blas_threads(blas_threads)
'''

_WEIGHT_GRAD = '''
@njit(cache=True)
def thin(og, k):
    """Whether a group's O output channels are few: BLAS then runs the weight gradient's
    product nearer its rate with O as the product's columns than as its rows, however short K
    is (a first layer's 9); with many channels it is the other way round (docs/kernels.md)."""
    return og <= 64


@njit(cache=True)
def accumulate(acc, gy, ldg, cols, ldc, og, k, width, beta):
    """acc = beta acc + one block's product: (K, O) columns (K, width) @ gy^T where the output
    channels are few (`thin`), else (O, K) gy (O, width) @ columns^T."""
    if thin(og, k):
        gemm(ROW_MAJOR, AS_IS, TRANSPOSED, k, og, width, T(1), cols, ldc, gy, ldg, beta, acc, og)
    else:
        gemm(ROW_MAJOR, AS_IS, TRANSPOSED, og, k, width, T(1), gy, ldg, cols, ldc, beta, acc, k)


@njit(parallel=True, cache=True)
def add_up(sums, dw, og, k, threads):
    """dw = the sum of the threads' sums (each (O, K) or (K, O), `thin`), on all threads: a
    large weight's sums (DCGAN's 512 x 4096) take longer to add on one thread than its
    product's share."""
    tall, groups = thin(og, k), sums.shape[1]
    for row in prange(groups * og):
        grp, i = row // og, row % og
        for j in range(k):
            at = j * og + i if tall else i * k + j
            total = sums[0, grp, at]
            for part in range(1, threads):
                total += sums[part, grp, at]
            dw[row, j] = total


@njit(cache=True)
def zero_untouched(sums, part, touched):
    """A thread's sums of the groups it had no block of."""
    for grp in range(sums.shape[1]):
        if not touched[grp]:
            sums[part, grp, :] = 0


@njit("void({dtype}[:, :, :, ::1], {dtype}[:, :, ::1], int64[::1], int64, {dtype}[:, ::1], "
      "{dtype}[:, ::1], int64)", parallel=True, cache=True)
def kernel(x, gy, g, groups, p, dw, threads):
    """dw (O, K) = the sum over samples of gy[n] @ (the columns of x[n])^T, group by group:
    each thread sums its blocks' in an (O, K) or (K, O) of its own (`accumulate`; blocks of one
    sample's rows are shared among the threads, as the forward's), then the threads' sums are
    added; or, where the batch has fewer positions than the group output
    channels (`_splits_channels`), the threads lay out the columns of the whole batch, each its
    share of the samples, then each computes its share of the rows of dw in one product."""
    batch, k, size, oh_, ow_, rows, nb, og, cg, positions = sizes(x, dw, g, groups)
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    if dense(g, x):  # dw (O, K) = gy^T (O, N) @ x (N, K), each thread a share of its rows
        for part in prange(threads):
            for grp in range(groups):
                o0, o1 = part * og // threads, (part + 1) * og // threads
                if o1 > o0:
                    gemm(ROW_MAJOR, TRANSPOSED, AS_IS, o1 - o0, k, batch, T(1),
                         gy.ctypes.data + (grp * og + o0) * size, groups * og,
                         x.ctypes.data + grp * k * size, groups * k, T(0),
                         dw.ctypes.data + (grp * og + o0) * k * size, k)
        set_blas_threads(blas_threads)
        return
    if g[13]:  # few positions, many channels: the batch's columns, each thread a share of O
        width = batch * positions
        cols = np.empty((groups, k, width), D)
        for part in prange(threads):  # the threads lay out their samples' columns
            pad = padded(x, g, cg)
            for grp in range(groups):
                for n in range(part * batch // threads, (part + 1) * batch // threads):
                    flat, base, hp, wp = source(x, pad, n, grp * cg, g, 0, p)
                    columns_of(cols[grp], n * positions, flat, base, cg, hp, wp, g, 0, oh_)
        for part in prange(threads):  # then multiply them by their share of the gradient
            block = np.empty((-(-og // threads), width), D)
            for grp in range(groups):
                o0, o1 = part * og // threads, (part + 1) * og // threads
                if o1 == o0:
                    continue
                gather(block, gy, 0, batch, grp * og + o0, o1 - o0, 0, positions)
                gemm(ROW_MAJOR, AS_IS, TRANSPOSED, o1 - o0, k, width, T(1), block.ctypes.data,
                     width, cols.ctypes.data + grp * k * width * size, width, T(0),
                     dw.ctypes.data + (grp * og + o0) * k * size, k)
        set_blas_threads(blas_threads)
        return
    sums = np.empty((threads, groups, og * k), D)  # each thread's first block overwrites
    for part in prange(threads):
        first, last = part * batch // threads, (part + 1) * batch // threads
        cols = np.empty((k, nb * rows * ow_), D)
        block = np.empty((og, nb * rows * ow_ if nb > 1 else 0), D)
        pad = padded(x, g, cg)
        touched = np.zeros(groups, np.bool_)
        if nb == 1:  # blocks of one sample's rows, shared by the threads (as the forward's)
            u0, u1, blocks = row_blocks(part, threads, batch, groups, oh_, rows)
            for u in range(u0, u1):
                n, grp, r0, r1 = row_block(u, groups, blocks, rows, oh_)
                src, ld = block_columns(x, pad, cols, n, grp * cg, cg, g, r0, r1, p, u == u0,
                                        positions)
                accumulate(sums.ctypes.data + (part * groups + grp) * og * k * size,
                           rows_at(gy, n, grp * og, g, r0), positions, src, ld, og, k,
                           (r1 - r0) * ow_, T(1) if touched[grp] else T(0))
                touched[grp] = True
            zero_untouched(sums, part, touched)
            continue
        for n0 in range(first, last, nb):
            n1 = min(last, n0 + nb)
            for grp in range(groups):
                acc = sums.ctypes.data + (part * groups + grp) * og * k * size
                for r0 in range(0, oh_, rows):
                    r1 = min(oh_, r0 + rows)
                    width = (r1 - r0) * ow_
                    for n in range(n0, n1):  # a block of several samples spans all the rows
                        flat, base, hp, wp = source(x, pad, n, grp * cg, g, r0, p)
                        columns_of(cols, (n - n0) * width, flat, base, cg, hp, wp, g, r0, r1)
                    gather(block, gy, n0, n1, grp * og, og, r0 * ow_, r1 * ow_)
                    accumulate(acc, block.ctypes.data, block.shape[1], cols.ctypes.data,
                               cols.shape[1], og, k, (n1 - n0) * width,
                               T(1) if touched[grp] else T(0))
                    touched[grp] = True
        zero_untouched(sums, part, touched)
    set_blas_threads(blas_threads)
    add_up(sums, dw, og, k, threads)
'''


_DEPTHWISE = '''
# Depthwise convolutions (each group reads one input channel: MobileNet's, ConvNeXt's) take no
# columns and no products: the products would be one row by kh * kw, far below BLAS's rate, and
# the columns kh * kw copies of the input for so little arithmetic. Each output plane is a sum
# of kh * kw shifted, scaled copies of its channel's padded plane instead, made contiguous runs:
# the padded plane is split by stride phase (element (r, c) to phase (r % sh, c % sw), at (r //
# sh, c // sw)), so that tap (i, j) reads phase (i dh % sh, j dw % sw) from (i dh // sh, j dw //
# sw) on; and output (oh, ow) lies at oh * wq + ow of a grid as wide as a phase (wq), so that a
# tap is one run over the whole grid (the wq - OW columns between rows computed and dropped),
# which vectorizes.


@njit(cache=True)
def phases_of(x, g, cg):
    """A thread's zeroed buffer of the padded planes of a group's cg channels, each split by
    phase: (cg, sh * sw, hq, wq)."""
    (hp, wp), sh, sw = extent(x, g), g[0], g[1]
    return np.zeros((cg, sh * sw, -(-hp // sh), -(-wp // sw)), D)


@njit(inline="always", cache=True)
def tap_at(i, j, g, hq, wq):
    """Where in the flat phase buffer tap (i, j) reads the grid's first position."""
    sh, sw, dh, dw = g[0], g[1], g[4] * i, g[5] * j
    return U((((dh % sh) * sw + dw % sw) * hq + dh // sh) * wq + dw // sw)


@njit(inline="always", cache=True)
def split(pf, base, hq, wq, xf, plane, h, w, g, back):
    """Plane `plane` of an image (flat, h * w) into the phase buffer at pf[base:], or, `back`,
    the buffer's image positions back into that plane; the padding's positions are not
    touched."""
    sh, sw, ph, pw = g[0], g[1], g[2], g[3]
    for a in range(h):
        r = a + ph
        for p in range(sw):
            b0 = (p - pw) % sw  # the first column of phase p
            at = U(base + (((r % sh) * sw + p) * hq + r // sh) * wq + (b0 + pw) // sw)
            src, step = U(plane + a * w + b0), U(sw)
            for t in range(U(max(0, -(-(w - b0) // sw)))):
                if back:
                    xf[src + t * step] = pf[at + t]
                else:
                    pf[at + t] = xf[src + t * step]


@njit(inline="always", cache=True)
def to_grid(grid, a, plane, g, wq):
    """Plane `plane` of a (flat, OH * OW a plane) laid on the grid, zeros between its rows."""
    oh_, ow_ = g[8], g[9]
    for oh in range(oh_):
        row, q = U(oh * wq), U(plane + oh * ow_)
        for t in range(U(ow_)):
            grid[row + t] = a[q + t]
        for t in range(U(ow_), U(wq if oh < oh_ - 1 else ow_)):
            grid[row + t] = 0


@njit(inline="always", cache=True)
def triple_at(i, j, g, hq, wq):
    """Where taps j, j + 1 and j + 2 of kernel row i read (`tap_at`); past the row's end, where
    its last tap reads (with weight 0, `triple_weights`)."""
    kw = g[7]
    return (tap_at(i, j, g, hq, wq), tap_at(i, min(j + 1, kw - 1), g, hq, wq),
            tap_at(i, min(j + 2, kw - 1), g, hq, wq))


@njit(inline="always", cache=True)
def triple_weights(w, wo, row, j, kw):
    """The weights of taps j, j + 1 and j + 2 of row `row` (channel c's row i: c * kh + i) of
    kernel wo (0 past the row's end)."""
    at = row * kw + j
    return (w[wo, at], w[wo, at + 1] if j + 1 < kw else D(0),
            w[wo, at + 2] if j + 2 < kw else D(0))


# Small planes (a few positions a row) make short runs, whose loops cost more than their work;
# there the depthwise loops go channels-last instead (`_channels_last`): a sample laid out as
# (rows, columns, C), each tap of each position is one run over the C channels.


@njit(cache=True)
def image_rows(t, x, n, g, back):
    """Sample n of x (N, C, H, W) into the (hp, wp, C) buffer t at (ph, pw), or, `back`, t's
    image positions back into it; the padding's positions are not touched."""
    hp, wp, c_ = t.shape
    ph, pw, h, w = g[2], g[3], x.shape[2], x.shape[3]
    xf, tf, step = x.reshape(x.size), t.reshape(t.size), U(c_)
    for c in range(c_):
        for a in range(h):
            src, dst = U(((n * c_ + c) * h + a) * w), U(((a + ph) * wp + pw) * c_ + c)
            for b in range(U(w)):
                if back:
                    xf[src + b] = tf[dst + b * step]
                else:
                    tf[dst + b * step] = xf[src + b]


@njit(cache=True)
def plane_rows(t, a, n, back):
    """Sample n of a (N, C, P) into t (P, C), or, `back`, t into it."""
    c_, p_ = a.shape[1], a.shape[2]
    af, tf, step = a.reshape(a.size), t.reshape(t.size), U(c_)
    for c in range(c_):
        src = U((n * c_ + c) * p_)
        for q in range(U(p_)):
            if back:
                af[src + q] = tf[q * step + U(c)]
            else:
                tf[q * step + U(c)] = af[src + q]


@njit(cache=True)
def image_buffer(x, g):
    """A thread's zeroed (hp, wp, C) buffer of a padded sample, channels last."""
    hp, wp = extent(x, g)
    return np.zeros((hp, wp, x.shape[1]), D)


@njit(inline="always", cache=True)
def tap_run(oh, ow, i, j, g, wp, c_):
    """Where tap (i, j) of output (oh, ow) reads in a channels-last padded sample."""
    return U(((oh * g[0] + i * g[4]) * wp + ow * g[1] + j * g[5]) * c_)


@njit(fastmath={{"reassoc", "contract", "nsz"}}, cache=True)
def dot3(a, b, b0, b1, b2, n):
    """The sums of a[:n] * b[b0:b0 + n], and at b1 and b2: one pass, reassociated so that it runs
    in SIMD lanes."""
    s0, s1, s2 = D(0), D(0), D(0)
    for t in range(U(n)):
        v = a[t]
        s0 += v * b[b0 + t]
        s1 += v * b[b1 + t]
        s2 += v * b[b2 + t]
    return s0, s1, s2


@njit(fastmath={{"contract"}}, cache=True)
def depthwise_last(x, w, g, y, first, last):
    """`depthwise` channels-last, one output channel a group."""
    kh, kw, oh_, ow_ = g[6], g[7], g[8], g[9]
    t, c_ = image_buffer(x, g), x.shape[1]
    wt, out = np.ascontiguousarray(w.T), np.empty((oh_ * ow_, c_), D)
    tf, wf, of = t.reshape(t.size), wt.reshape(wt.size), out.reshape(out.size)
    wp, step = t.shape[1], U(c_)
    for n in range(first, last):
        image_rows(t, x, n, g, False)
        for oh in range(oh_):
            for ow in range(ow_):
                q = U(oh * ow_ + ow) * step
                for c in range(step):
                    of[q + c] = 0
                for i in range(kh):
                    for j in range(kw):
                        at, wq = tap_run(oh, ow, i, j, g, wp, c_), U(i * kw + j) * step
                        for c in range(step):
                            of[q + c] += wf[wq + c] * tf[at + c]
        plane_rows(out, y, n, True)


@njit(fastmath={{"contract"}}, cache=True)
def depthwise(x, w, g, groups, y, first, last):
    """y[first:last] of a convolution of few channels a group (a depthwise one: one), as runs
    of multiply-adds over each channel's phases (see `phases_of`)."""
    kh, kw, oh_, ow_ = g[6], g[7], g[8], g[9]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    phases = phases_of(x, g, cg)
    (_, _, hq, wq), size = phases.shape, U(phases[0].size)
    pf, xf, yf = phases.reshape(phases.size), x.reshape(x.size), y.reshape(y.size)
    length, h, wd = U((oh_ - 1) * wq + ow_), x.shape[2], x.shape[3]
    grid = np.empty(length, D)
    for n in range(first, last):
        for grp in range(groups):
            for c in range(cg):
                plane = U((n * x.shape[1] + grp * cg + c) * h * wd)
                split(pf, U(c) * size, hq, wq, xf, plane, h, wd, g, False)
            for o in range(og):
                plane, wo = U((n * y.shape[1] + grp * og + o) * oh_ * ow_), grp * og + o
                for c, i in np.ndindex(cg, kh):
                    for j in range(0, kw, 3):  # three taps a pass: the grid read once for them
                        w0, w1, w2 = triple_weights(w, wo, c * kh + i, j, kw)
                        a0, a1, a2 = triple_at(i, j, g, hq, wq)
                        a0, a1, a2 = a0 + U(c) * size, a1 + U(c) * size, a2 + U(c) * size
                        if c == 0 and i == 0 and j == 0:
                            for e in range(length):
                                grid[e] = w0 * pf[a0 + e] + w1 * pf[a1 + e] + w2 * pf[a2 + e]
                        else:
                            for e in range(length):
                                grid[e] += w0 * pf[a0 + e] + w1 * pf[a1 + e] + w2 * pf[a2 + e]
                for oh in range(oh_):
                    for t in range(U(ow_)):
                        yf[plane + U(oh * ow_) + t] = grid[U(oh * wq) + t]


@njit(fastmath={{"contract"}}, cache=True)
def depthwise_input_last(gy, w, g, dx, first, last):
    """`depthwise_input` channels-last, one output channel a group."""
    kh, kw, oh_, ow_ = g[6], g[7], g[8], g[9]
    t, c_ = image_buffer(dx, g), dx.shape[1]
    wt, grad = np.ascontiguousarray(w.T), np.empty((oh_ * ow_, c_), D)
    tf, wf, gf = t.reshape(t.size), wt.reshape(wt.size), grad.reshape(grad.size)
    wp, step = t.shape[1], U(c_)
    for n in range(first, last):
        plane_rows(grad, gy, n, False)
        for e in range(U(tf.size)):
            tf[e] = 0
        for oh in range(oh_):
            for ow in range(ow_):
                q = U(oh * ow_ + ow) * step
                for i in range(kh):
                    for j in range(kw):
                        at, wq = tap_run(oh, ow, i, j, g, wp, c_), U(i * kw + j) * step
                        for c in range(step):
                            tf[at + c] += wf[wq + c] * gf[q + c]
        image_rows(t, dx, n, g, True)


@njit(fastmath={{"contract"}}, cache=True)
def depthwise_input(gy, w, g, groups, dx, first, last):
    """The input gradient of `depthwise`: each tap's scaled gradient plane added where the tap
    read, in the phase buffer, whose image positions then go to dx."""
    kh, kw, oh_, ow_ = g[6], g[7], g[8], g[9]
    cg, og = dx.shape[1] // groups, w.shape[0] // groups
    phases = phases_of(dx, g, cg)
    (_, _, hq, wq), size = phases.shape, U(phases[0].size)
    pf, gf, xf = phases.reshape(phases.size), gy.reshape(gy.size), dx.reshape(dx.size)
    length, h, wd = U((oh_ - 1) * wq + ow_), dx.shape[2], dx.shape[3]
    grid = np.empty(length, D)
    for n in range(first, last):
        for grp in range(groups):
            for e in range(U(pf.size)):
                pf[e] = 0
            for o in range(og):
                wo = grp * og + o
                to_grid(grid, gf, U((n * gy.shape[1] + wo) * oh_ * ow_), g, wq)
                for c, i, j in np.ndindex(cg, kh, kw):
                    wv = w[wo, (c * kh + i) * kw + j]
                    at = U(c) * size + tap_at(i, j, g, hq, wq)
                    for e in range(length):
                        pf[at + e] += wv * grid[e]
            for c in range(cg):
                plane = U((n * dx.shape[1] + grp * cg + c) * h * wd)
                split(pf, U(c) * size, hq, wq, xf, plane, h, wd, g, True)


@njit(fastmath={{"contract"}}, cache=True)
def depthwise_weights_last(x, gy, g, sums, first, last):
    """`depthwise_weights` channels-last, one output channel a group: into sums (C, K)."""
    kh, kw, oh_, ow_ = g[6], g[7], g[8], g[9]
    t, c_ = image_buffer(x, g), x.shape[1]
    acc, grad = np.zeros((kh * kw, c_), D), np.empty((oh_ * ow_, c_), D)
    tf, af, gf = t.reshape(t.size), acc.reshape(acc.size), grad.reshape(grad.size)
    wp, step = t.shape[1], U(c_)
    for n in range(first, last):
        image_rows(t, x, n, g, False)
        plane_rows(grad, gy, n, False)
        for oh in range(oh_):
            for ow in range(ow_):
                q = U(oh * ow_ + ow) * step
                for i in range(kh):
                    for j in range(kw):
                        at, aq = tap_run(oh, ow, i, j, g, wp, c_), U(i * kw + j) * step
                        for c in range(step):
                            af[aq + c] += gf[q + c] * tf[at + c]
    for c in range(c_):
        for tap in range(kh * kw):
            sums[c, tap] += acc[tap, c]


@njit(cache=True)
def depthwise_weights(x, gy, g, groups, sums, first, last):
    """`depthwise`'s weight gradient over samples first..last, added into sums (O, K): each
    tap's the dot product of the output's gradient with what the tap read."""
    kh, kw, oh_, ow_ = g[6], g[7], g[8], g[9]
    cg, og = x.shape[1] // groups, sums.shape[0] // groups
    phases = phases_of(x, g, cg)
    (_, _, hq, wq), size = phases.shape, U(phases[0].size)
    pf, xf, gf = phases.reshape(phases.size), x.reshape(x.size), gy.reshape(gy.size)
    length, h, wd = U((oh_ - 1) * wq + ow_), x.shape[2], x.shape[3]
    grid = np.empty(length, D)
    for n in range(first, last):
        for grp in range(groups):
            for c in range(cg):
                plane = U((n * x.shape[1] + grp * cg + c) * h * wd)
                split(pf, U(c) * size, hq, wq, xf, plane, h, wd, g, False)
            for o in range(og):
                to_grid(grid, gf, U((n * gy.shape[1] + grp * og + o) * oh_ * ow_), g, wq)
                for c, i in np.ndindex(cg, kh):
                    for j in range(0, kw, 3):  # three taps a pass: the grid read once for them
                        a0, a1, a2 = triple_at(i, j, g, hq, wq)
                        at = U(c) * size
                        sums3 = dot3(grid, pf, a0 + at, a1 + at, a2 + at, length)
                        row = (c * kh + i) * kw
                        for tap in range(row + j, row + min(j + 3, kw)):
                            sums[grp * og + o, tap] += sums3[tap - row - j]
'''

_DEPTHWISE_KERNELS = {
    "output": '''
@njit("void({dtype}[:, :, :, ::1], {dtype}[:, ::1], int64[::1], int64, {dtype}[:, ::1], "
      "{dtype}[:, ::1], {dtype}[:, :, ::1], int64)", parallel=True, cache=True)
def kernel(x, w, g, groups, p, e, y, threads):
    """y of a depthwise convolution, each thread its share of the batch (no epilogue: e is
    empty)."""
    for part in prange(threads):
        first, last = part * x.shape[0] // threads, (part + 1) * x.shape[0] // threads
        if g[12]:
            depthwise_last(x, w, g, y, first, last)
        else:
            depthwise(x, w, g, groups, y, first, last)
''',
    "input_grad": """
@njit("void({dtype}[:, :, ::1], {dtype}[:, ::1], int64[::1], int64, {dtype}[:, ::1], "
      "{dtype}[:, :, :, ::1], int64)", parallel=True, cache=True)
def kernel(gy, w, g, groups, e, dx, threads):
    for part in prange(threads):
        first, last = part * dx.shape[0] // threads, (part + 1) * dx.shape[0] // threads
        if g[12]:
            depthwise_input_last(gy, w, g, dx, first, last)
        else:
            depthwise_input(gy, w, g, groups, dx, first, last)
""",
    "weight_grad": '''
@njit("void({dtype}[:, :, :, ::1], {dtype}[:, :, ::1], int64[::1], int64, {dtype}[:, ::1], "
      "{dtype}[:, ::1], int64)", parallel=True, cache=True)
def kernel(x, gy, g, groups, p, dw, threads):
    """Each thread sums its samples' gradient in an (O, K) of its own; the sums are added."""
    sums = np.zeros((threads, dw.shape[0], dw.shape[1]), D)
    for part in prange(threads):
        first, last = part * x.shape[0] // threads, (part + 1) * x.shape[0] // threads
        if g[12]:
            depthwise_weights_last(x, gy, g, sums[part], first, last)
        else:
            depthwise_weights(x, gy, g, groups, sums[part], first, last)
    for i in range(dw.shape[0]):  # loops: array expressions here compiled into more parallel code
        for j in range(dw.shape[1]):
            total = sums[0, i, j]
            for part in range(1, threads):
                total += sums[part, i, j]
            dw[i, j] = total
''',
}

_KERNELS = {"output": _FORWARD, "input_grad": _INPUT_GRAD, "weight_grad": _WEIGHT_GRAD}

_HEAD = '''"""Convolution {op} ({dtype}) on Numba's threads: compiler.kernels.conv generated it."""

import numba
import numpy as np
from numba import njit, prange

{declarations}
D = np.{dtype}

'''


_NO_PROLOGUE = """
PROLOGUE = False


@njit(inline="always", cache=True)
def numbers(p, c):
    return ()


@njit(inline="always", cache=True)
def prologue(v, q):
    return v
"""

_NO_EPILOGUE = """
EPILOGUE = False


@njit(inline="always", cache=True)
def out_numbers(e, c):
    return ()


@njit(inline="always", cache=True)
def epilogue(v, q):
    return v
"""

_ELEMENTWISE = """{imports}
{flag} = True  # {why}


@njit(inline="always", cache=True)
def {numbers}(p, c):
    \"\"\"Channel c's numbers, p[:, c], taken once a plane: loaded in the loop, they would be
    loaded again for every value (p might alias the buffer written), which keeps it scalar.\"\"\"
    return ({taken})


@njit(inline="always", fastmath={flags}, error_model="numpy", cache=True)
def {function}(v0, q):
    \"\"\"{ops} of the value v0, with its channel's numbers q (`{numbers}`).\"\"\"
{lines}
"""


def prologue_source(body: Graph) -> str:
    """The `prologue` function of a convolution that reads its image through the elementwise
    `body` (`lowering._conv_prologues`): its first input the image, the others a number per
    input channel, rows of the parameters `p` (`ConvKernel`)."""
    why = "the image is read through `prologue`: always into a padded copy"
    return _elementwise_source(body, "PROLOGUE", "prologue", "numbers", why)


def epilogue_source(body: Graph) -> str:
    """The `epilogue` function of a forward convolution whose results go through the
    elementwise `body` (`lowering._conv_epilogues`): its first input the product's value, the
    others a number per output channel, rows of the parameters `e` (`ConvKernel`)."""
    why = "each block of results goes through `epilogue` as it is written"
    return _elementwise_source(body, "EPILOGUE", "epilogue", "out_numbers", why)


def _elementwise_source(body: Graph, flag: str, function: str, numbers: str, why: str) -> str:
    """A prologue's or an epilogue's module text: each op's scalar template, as the fused
    kernels compute it."""
    slots = {v: k for k, v in enumerate(body.inputs)}
    lines = [f"    v{k} = q[{k - 1}]" for k in range(1, len(body.inputs))]
    for n in body.nodes:
        expr = n.prim.scalar.format(*(f"v{slots[v]}" for v in n.inputs))
        slots[n.outputs[0]] = len(slots)
        lines.append(f"    v{len(slots) - 1} = {scalar_cast(n.outputs[0].dtype.name)}({expr})")
    lines.append(f"    return v{slots[body.outputs[0]]}")
    helpers = sorted({h for n in body.nodes for h in n.prim.helpers})
    imports = "".join(f"from tracegrad.compiler.kernels.scalar import {h}\n" for h in helpers)
    return _ELEMENTWISE.format(
        imports=imports,
        flag=flag,
        why=why,
        numbers=numbers,
        function=function,
        flags=fastmath.flags_literal(fastmath.FLAGS),
        taken="".join(f"p[{k}, c], " for k in range(len(body.inputs) - 1)),
        ops=", ".join(n.op for n in body.nodes),
        lines="\n".join(lines),
    )


def generate_source(op: str, dtype: str, ints: str, depthwise: bool = False,
                    prologue: str = _NO_PROLOGUE, epilogue: str = _NO_EPILOGUE) -> str:  # fmt: skip
    """The text of the module of `op`'s kernel for `dtype`, BLAS sizes of integer type `ints`:
    the im2col kernel, or the depthwise one (a module of its own, so that neither compiles the
    other's loops); the image read through `prologue` (`prologue_source`), the results written
    through `epilogue` (`epilogue_source`)."""
    head = _HEAD.format(
        op=op.replace("_", " "), dtype=dtype, declarations=declarations(dtype, ints)
    )
    kernels = _KERNELS[op]
    if depthwise:
        kernels = _DEPTHWISE + _DEPTHWISE_KERNELS[op]
    return head + prologue + epilogue + _HELPERS + kernels.format(dtype=dtype)


def module(node: Node) -> tuple[str, str]:
    """The name and text of a convolution node's kernel module; NotImplementedError unless its
    operands (the prologue's parameters aside) are of its result's dtype, float32 or float64,
    not constants, and there are GEMM routines to call (`blas.gemm_symbols`)."""
    dtype = node.outputs[0].dtype.name
    ints = gemm_symbols()
    if (
        ints is None
        or dtype not in DTYPES
        or any(v.dtype.name != dtype or v.const is not None for v in node.inputs[:2])
    ):
        raise NotImplementedError(f"no convolution kernel for {[v.type_str for v in node.inputs]}")
    body, end = node.attrs.get("prologue"), node.attrs.get("epilogue")
    if body is not None and (OPS[node.prim] == "input_grad" or _by_planes(node)):
        raise NotImplementedError(f"a prologue in a {node.op} kernel without columns")
    if end is not None and not takes_epilogue(node):
        raise NotImplementedError(f"an epilogue in a {node.op} kernel without products")
    text = _NO_PROLOGUE if body is None else prologue_source(body)
    last = _NO_EPILOGUE if end is None else epilogue_source(end)
    return named("conv", generate_source(OPS[node.prim], dtype, ints, _by_planes(node), text,
                                         last))  # fmt: skip


class ConvKernel(GeneratedKernel):
    """`kernel(a, b, *parameters, out)` for one node: the operands made C-contiguous and
    writeable, the weight (or its gradient) seen as (O, K), the gradient of the output as (N, O,
    OH * OW); the kernel's taps that read only padding cropped off (`_live`); the prologue's
    parameters, if any, as rows of a number per input channel, then the epilogue's, as rows of
    a number per output channel."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.op, a = OPS[node.prim], node.attrs
        (_, (_, cg, kh, kw), (oh, ow)), (rows, samples) = _shapes(node), _block(node)
        (sh, sw), (dh, dw) = a["stride"], a["dilation"]
        self.live = _live(node)
        if self.live == (slice(0, kh), slice(0, kw)):
            self.live = None
        (ph, pw), (kh, kw) = _kernel(node)
        self.geometry = np.array([sh, sw, ph, pw, dh, dw, kh, kw, oh, ow, rows, samples,
                                  _channels_last(node), _splits_channels(node)],
                                 np.int64)  # fmt: skip
        self.groups, self.k = a["groups"], cg * kh * kw
        self.threads = numba.get_num_threads()  # as many shares of the batch, from now on
        self.scratch = scratch(node)
        self.none = np.empty((0, 1), node.outputs[0].dtype)  # no prologue, no parameters
        self.prologue = len(a["prologue"].inputs) - 1 if "prologue" in a else 0  # its numbers

    def __call__(self, a: np.ndarray, b: np.ndarray, *rest: np.ndarray) -> None:
        *parameters, out = rest
        if not out.flags.c_contiguous:
            raise ValueError(f"convolution kernels write C-contiguous results, not {out.strides}")
        if a.size == 0 or b.size == 0 or out.size == 0:  # an empty batch (no detections left)
            out[...] = 0
            return
        if self.live is not None and self.op != "weight_grad":
            b = b[:, :, self.live[0], self.live[1]]
        a, b = in_c_order(a), in_c_order(b)
        p = self.parameters(parameters[: self.prologue], a.shape[1], out.dtype)
        e = self.parameters(parameters[self.prologue :], out.shape[1], out.dtype)
        if self.op == "output":
            args = (a, b.reshape(b.shape[0], self.k), p, e, out.reshape(*out.shape[:2], -1))
        elif self.op == "input_grad":
            args = (a.reshape(*a.shape[:2], -1), b.reshape(b.shape[0], self.k), e, out)
        elif self.live is None:
            args = (a, b.reshape(*b.shape[:2], -1), p, out.reshape(out.shape[0], self.k))
        else:  # the cropped kernel's gradient, the rest of it zero
            cropped = np.empty((out.shape[0], self.k), out.dtype)
            self.compiled(a, b.reshape(*b.shape[:2], -1), self.geometry, self.groups, p, cropped,
                          self.threads)  # fmt: skip
            out[...] = 0
            kernel = cropped.reshape(*out.shape[:2], *self.geometry[6:8])
            out[:, :, self.live[0], self.live[1]] = kernel
            return
        self.compiled(*args[:2], self.geometry, self.groups, *args[2:], self.threads)
        team.finished()

    def parameters(self, given: list[np.ndarray], channels: int, dtype: np.dtype) -> np.ndarray:
        """A prologue's or an epilogue's parameters as one C-contiguous (count, channels)
        array: each a number per channel or one for all."""
        if not given:
            return self.none
        rows = [np.broadcast_to(np.asarray(q, dtype).reshape(-1), (channels,)) for q in given]
        return np.stack(rows)


CHANNELS_LAST_WIDTH = 16  # a depthwise convolution's outputs narrower than this go channels-last


# A group's output channels up to which each op runs as runs over planes (`_by_planes`): its
# products of columns would be that thin (docs/kernels.md, "Few output channels").
PLANES_MAX = {"output": 1, "input_grad": 2, "weight_grad": 4}


def _by_planes(node: Node) -> bool:
    """Whether the node's convolution runs as runs of multiply-adds over planes (the depthwise
    loops, over any number of input channels a group) rather than as products of columns: a
    depthwise convolution, or one whose groups have at most PLANES_MAX output channels (an RGB
    or a one-class output layer), unless its kernel is 1 x 1 (a product of the sample itself,
    `direct`, or of few columns) or its output is (one product of the batch's rows, `dense`,
    or a few taps a plane)."""
    if _depthwise(node):
        return True
    (_, (o, _, kh, kw), out) = _shapes(node)
    few = o // node.attrs["groups"] <= PLANES_MAX[OPS[node.prim]]
    return few and (kh, kw) != (1, 1) and out != (1, 1)


def takes_prologue(node: Node) -> bool:
    """Whether the node's kernel can read its image through a prologue (`prologue_source`) and
    gain from it: forward's or the weight gradient's, which copy each sample into a padded
    buffer anyway. Not the loops over planes (`_by_planes`: a prologue in their copy by phase
    made MobileNetV2's depthwise convolutions slower than the pass it saved), nor the geometries
    whose products read the image itself (`direct`, `dense`): there the copy would be one
    more."""
    if OPS[node.prim] == "input_grad" or _by_planes(node):
        return False
    ((_, _, h, w), _, out), (padding, (kh, kw)) = _shapes(node), _kernel(node)
    corner = padding == (0, 0)
    direct = corner and (kh, kw) == (1, 1) and node.attrs["stride"] == (1, 1)
    dense = corner and out == (1, 1) and node.attrs["dilation"] == (1, 1) and (h, w) == (kh, kw)
    return not (direct or dense)


def takes_epilogue(node: Node) -> bool:
    """Whether the node's kernel can write its results through an epilogue
    (`epilogue_source`): forward's and the input gradient's (a transposed convolution's)
    products of columns, not the loops over planes."""
    return OPS[node.prim] != "weight_grad" and not _by_planes(node)


def _depthwise(node: Node) -> bool:
    """Whether each group of the node's convolution reads one input channel."""
    return node.attrs["groups"] > 1 and _shapes(node)[1][1] == 1


def _channels_last(node: Node) -> bool:
    """Whether the node is a depthwise convolution with one output channel a group whose output
    rows are short: its loops then run over channels (`depthwise_last`)."""
    (_, _, _, _), (o, _, _, _), (_, ow) = _shapes(node)
    return _depthwise(node) and o == node.attrs["groups"] and ow < CHANNELS_LAST_WIDTH


def _splits_channels(node: Node) -> bool:
    """Whether a weight gradient's threads split its output channels rather than the batch: where
    the batch has fewer positions (N * OH * OW) than a group has output channels (a ResNet's
    last stages, 2 x 2 images of 256 channels), each thread's sum over its share of the batch
    is as large as dw and costs more to zero and add up than the product's work, while the
    columns of the whole batch are small."""
    if OPS[node.prim] != "weight_grad" or _by_planes(node):
        return False
    (n, *_), (o, *_), (oh, ow) = _shapes(node)
    return n * oh * ow < o // node.attrs["groups"]


def _shapes(node: Node) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The node's input, weight and output sizes: (N, C, H, W), (O, C / groups, kh, kw) and
    (OH, OW)."""
    op, (a, b), out = OPS[node.prim], (v.shape for v in node.inputs[:2]), node.outputs[0].shape
    x, w, y = {"output": (a, b, out), "input_grad": (out, b, a), "weight_grad": (a, out, b)}[op]
    return x, w, y[2:]


def _live(node: Node) -> tuple[slice, slice]:
    """The kernel's rows and columns between the first and the last through which some output
    reads inside the image: the taps outside them read only padding, so they multiply zeros and
    are cropped off (a 3 x 3 kernel with padding 1 over a 1 x 1 image is its centre, a matrix
    product). The first is kept at most at the padding, so that the cropped padding is not
    negative; all of the kernel if no tap reads inside."""
    a = node.attrs
    (_, _, h, w), (_, _, kh, kw), (oh, ow) = _shapes(node)
    found = []
    for size, k, out, s, (pad, _), d in zip((h, w), (kh, kw), (oh, ow), a["stride"],
                                            a["padding"], a["dilation"], strict=True):  # fmt: skip
        taps = [i for i in range(k) if _reads_inside(out, size, pad, i * d, s)]
        found.append(slice(min(taps[0], pad // d), taps[-1] + 1) if taps else slice(0, k))
    return found[0], found[1]


def _reads_inside(out: int, size: int, pad: int, offset: int, stride: int) -> bool:
    """Whether a tap at `offset` reads inside [0, size) for some of the `out` outputs."""
    return any(0 <= o * stride - pad + offset < size for o in range(out))


def _kernel(node: Node) -> tuple[tuple[int, int], tuple[int, int]]:
    """The cropped kernel's (`_live`) padding before the image, (ph, pw), so that its first tap
    reads where the first live one did, and its (kh, kw)."""
    (rows, cols), a = _live(node), node.attrs
    ((ph, _), (pw, _)), (dh, dw) = a["padding"], a["dilation"]
    size = (rows.stop - rows.start, cols.stop - cols.start)
    return (ph - rows.start * dh, pw - cols.start * dw), size


def _block(node: Node) -> tuple[int, int]:
    """(output rows, samples) a block of columns spans: as many positions as BLOCK_BYTES hold
    of columns and product (K + O / groups rows), but at least MIN_COLUMNS (a narrower product
    runs far below BLAS's rate, and a block's weight operand is read whole for each product): one
    sample, or a few of its rows, where a sample has MIN_COLUMNS positions (its product needs no
    gathering or spreading), else whole samples, as many as a thread's share of the batch has."""
    ((n, *_), (o, cg, _, _), (oh, ow)), (_, (kh, kw)) = _shapes(node), _kernel(node)
    per_position = (cg * kh * kw + o // node.attrs["groups"]) * node.outputs[0].dtype.itemsize
    columns = max(MIN_COLUMNS, BLOCK_BYTES // per_position)
    if oh * ow >= MIN_COLUMNS:
        return max(1, min(oh, columns // ow)), 1
    share = -(-n // numba.get_num_threads())
    return oh, max(1, min(share, columns // (oh * ow)))


def scratch(node: Node) -> int:
    """Bytes the node's kernel allocates: each thread's columns, product or gradient block and
    padded image, and for the weight's gradient the threads' sums. (The memory plan counts
    these, not the NumPy version's.)"""
    threads, item, a = numba.get_num_threads(), node.outputs[0].dtype.itemsize, node.attrs
    ((n, _, h, w), (o, cg, _, _), (oh, ow)), (rows, samples) = _shapes(node), _block(node)
    (sh, sw), (dh, dw) = a["stride"], a["dilation"]
    (ph, pw), (kh, kw) = _kernel(node)
    width = samples * rows * ow  # a block's columns, and its product's (several samples)
    hp = max(ph + h, (oh - 1) * sh + (kh - 1) * dh + 1)  # the padded image (`padded`)
    wp = max(pw + w, (ow - 1) * sw + (kw - 1) * dw + 1)
    each = (cg * kh * kw + (o // a["groups"] if samples > 1 else 0)) * width + cg * hp * wp
    split, shared = _splits_channels(node), 0
    if split:  # the batch's columns, shared; a thread's share of the group's gradient rows
        shared = a["groups"] * cg * kh * kw * n * oh * ow
        each = -(-o // a["groups"] // threads) * n * oh * ow + cg * hp * wp
    elif _channels_last(node):  # the sample channels-last, its output's rows, the taps' weights
        each = (hp * wp + oh * ow + 2 * kh * kw) * o
    elif _by_planes(node):  # the phases of a group's padded planes, and the grid (`depthwise`)
        wq = -(-wp // sw)
        each = cg * sh * sw * -(-hp // sh) * wq + oh * wq
    total = threads * each + shared
    if OPS[node.prim] == "weight_grad":  # the threads' sums, and the cropped kernel's gradient
        total += (1 if split else threads + 1) * o * cg * kh * kw
    return total * item


def launcher(node: Node, compiled: Callable, path: Path) -> ConvKernel:
    return ConvKernel(node, compiled, path)

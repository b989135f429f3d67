"""The convolution ops' implementations (their records at the end): im2col feeding a
few large BLAS matmuls, col2im for the input's gradient. Eager and the NumPy backend run these;
the Numba backend has kernels of its own (`tracegrad.compiler.kernels.conv`: per sample, on every
thread), and runs these while they compile.

The batch goes through in chunks, so the temporaries ("columns": the patches, and the
product) stay within CHUNK_BYTES whatever the batch. A column row is one kernel tap
(i, j) of one input channel, rows ordered (group, i, j, channel), so that one tap's block of
columns is long contiguous runs. When the output has the input's size with stride 1 ("same"
padding), a tap's block is the image shifted by a constant number of flat positions: it is
copied (or, for the input's gradient, added back) as long 1-d runs, and the positions that
read padding are zeroed after. Other geometries copy each tap as a strided window into a
zeroed buffer. (NumPy pays its per-call overhead for every short row, so long runs are far
faster; `np.pad` and a 6-d strided copy into the columns cost more than the product itself.)

Two layouts. By "columns", (C / groups * kh * kw, chunk * OH * OW) per group: one large GEMM
per chunk and group; the product is transposed into place. By "samples", (chunk, ..., L) with
NumPy's stacked matmul, writing each sample's product in place: taken when a sample's product
is small enough that OpenBLAS runs it on one thread (2**18 multiply-adds), since OpenBLAS wakes
its threads for each larger product, which costs more than many such products compute.

An image whose one sample alone would pass BAND_BYTES (a 9 x 9 kernel over a megapixel image:
gigabytes of columns) goes through in bands of output rows, each a convolution of the input
rows it reads with its own padding (`_bands`), so that the temporaries stay within BAND_BYTES
whatever the image. A band's columns are copied as strided windows, not long runs, so bands
larger than a chunk keep its products and copies at their rate.

The chunk size trades cache for BLAS calls: a chunk's columns should stay near the caches, and
each GEMM call should be large enough to run at BLAS's rate. 8 MiB does both for the shapes of
a small CNN (docs/benchmarks.md has the measurements that chose it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core.vocabulary import Kind, Primitive

CHUNK_BYTES = 8 << 20  # the temporaries of one chunk of the batch
BAND_BYTES = 4 * CHUNK_BYTES  # the temporaries of one band of a sample's output rows
BLAS_ONE_THREAD = 1 << 18  # OpenBLAS computes a GEMM with m * n * k up to this on one thread


def _size(size, pad, k, s, d):
    return (size + pad[0] + pad[1] - d * (k - 1) - 1) // s + 1


def output_size(x_shape, w_shape, stride, padding, dilation, groups):
    """The output's (OH, OW); checks the layouts (N, C, H, W) and (O, C / groups, kh, kw)."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ValueError(f"input {x_shape} and weight {w_shape}: expected 4-d (N, C, H, W) and "
                         "(out, in / groups, kh, kw)")  # fmt: skip
    c, (o, cg, kh, kw) = x_shape[1], w_shape
    if c != cg * groups or o % groups:
        raise ValueError(f"input {x_shape} with weight {w_shape} and groups={groups}: the input "
                         f"needs {cg * groups} channels and {o} must divide by groups")  # fmt: skip
    out = tuple(_size(x_shape[2 + i], padding[i], (kh, kw)[i], stride[i], dilation[i])
                for i in range(2))  # fmt: skip
    if min(out) < 1:
        raise ValueError(f"input {x_shape} is smaller than the (dilated) kernel {w_shape[2:]}")
    return out


def _tap_range(out, size, pad, offset, s):
    """The outputs [lo, hi) that read inside [0, size) at o * s + offset - pad, and the first
    input position they read."""
    lo = max(0, -((offset - pad) // s))
    hi = min(out, (size - 1 + pad - offset) // s + 1)
    return lo, hi, lo * s + offset - pad


class _Conv:
    """One convolution's geometry, its chunks of the batch and the layout of their columns.

    A tap is (i, j, rows, cols), with rows (and cols): the outputs [lo, hi) that read inside the
    image and the first input they read. By "samples" an image (as `fill` reads it and `scatter`
    writes it) is (chunk, C, H, W) and a tap's block of columns (chunk, C / groups, OH, OW); by
    "columns" they are (C, chunk, H, W) and (C / groups, chunk, OH, OW)."""

    def __init__(self, x_shape, w_shape, out, stride, padding, dilation, groups, dtype):
        (self.n, self.c, h, w), (self.o, self.cg, kh, kw) = x_shape, w_shape
        self.hw, self.out, self.kernel, self.stride = (h, w), tuple(out), (kh, kw), stride
        self.groups, self.dtype = groups, np.dtype(dtype)
        self.og, self.k, self.l = self.o // groups, self.cg * kh * kw, out[0] * out[1]
        self.rows = [_tap_range(out[0], h, padding[0][0], i * dilation[0], stride[0])
                     for i in range(kh)]  # fmt: skip
        self.cols = [_tap_range(out[1], w, padding[1][0], j * dilation[1], stride[1])
                     for j in range(kw)]  # fmt: skip
        self.taps = [
            (i, j, rows, cols)
            for i, rows in enumerate(self.rows)
            for j, cols in enumerate(self.cols)
            if rows[1] > rows[0] and cols[1] > cols[0]
        ]  # the taps that read some input
        self.same = stride == (1, 1) and self.out == (h, w)
        # the "same" tap that reads the image unshifted: it covers all of it
        self.center = next((t for t in self.taps if self.same and self._shift(t) == 0), None)
        self.samples = self.og * self.k * self.l <= BLAS_ONE_THREAD
        per_sample = groups * self.k * self.l
        if not self.samples:  # also the product (O, chunk * L) and an image (C, chunk, H, W)
            per_sample += self.o * self.l + (self.c * h * w if self.same else 0)
        self.sample_bytes = max(1, per_sample * self.dtype.itemsize)  # temporaries
        most = max(1, CHUNK_BYTES // self.sample_bytes)
        chunks = max(1, -(-self.n // most))
        self.chunk = max(1, -(-self.n // chunks))  # equal chunks (but the last) <= most

    def _shift(self, tap):
        """A "same" tap's constant offset from an output's flat position to the one it reads."""
        _, _, rows, cols = tap
        return (rows[2] - rows[0]) * self.hw[1] + cols[2] - cols[0]

    def chunks(self, zero):
        """(start, stop, cols, prod, img) for each chunk of the batch: its columns (zero where
        they read padding, if `zero`); by columns also a buffer for the product (O, chunk * L)
        and, for "same" geometry, one for an image (C, chunk, H, W). The buffers are reused."""
        (kh, kw), (h, w), b = self.kernel, self.hw, self.chunk
        zeroed = zero and not self.same  # a "same" fill zeroes what it must itself
        col_buf = (np.zeros if zeroed else np.empty)(b * self.groups * self.k * self.l, self.dtype)
        by_columns = not self.samples
        prod_buf = np.empty(b * self.o * self.l, self.dtype) if by_columns else None
        img_buf = np.empty(b * self.c * h * w, self.dtype) if by_columns and self.same else None
        for n0 in range(0, self.n, b):
            m = min(b, self.n - n0)  # the last chunk lays out the buffers anew
            cols = col_buf[: m * self.groups * self.k * self.l]
            if m < b and zeroed:
                cols[...] = 0
            if self.samples:
                cols = cols.reshape(m, self.groups, kh, kw, self.cg, *self.out)
                yield n0, n0 + m, cols, None, None
                continue
            cols = cols.reshape(self.groups, kh, kw, self.cg, m, *self.out)
            prod = prod_buf[: m * self.o * self.l].reshape(self.o, m * self.l)
            img = None
            if img_buf is not None:
                img = img_buf[: m * self.c * h * w].reshape(self.c, m, h, w)
            yield n0, n0 + m, cols, prod, img

    def matrices(self, cols):
        """Each group's columns as a product's operand: (chunk, k, L) by samples, (k, chunk * L)
        by columns."""
        m = cols.shape[0 if self.samples else 4]
        if self.samples:
            return [cols[:, g].reshape(m, self.k, self.l) for g in range(self.groups)]
        return [cols[g].reshape(self.k, m * self.l) for g in range(self.groups)]

    def weights(self, w):
        """(O, C / groups, kh, kw) as (groups, O / groups, k), k ordered (i, j, channel)."""
        wk = w.transpose(0, 2, 3, 1).reshape(self.groups, self.og, self.k)
        return wk.astype(self.dtype, copy=False)

    def image(self, x, buf):
        """A chunk (chunk, C, H, W) of the input as `fill` reads it: by columns transposed, into
        `buf` (for "same" geometry, which reads long runs)."""
        if self.samples:
            return x
        if buf is None:
            return x.transpose(1, 0, 2, 3)
        buf[...] = x.transpose(1, 0, 2, 3)
        return buf

    def _blocks(self, cols, img, taps):
        """(tap, its block of the columns, the channels of the image it reads) for each tap of
        each group."""
        for g in range(self.groups):
            channels = slice(g * self.cg, (g + 1) * self.cg)
            part = img[:, channels] if self.samples else img[channels]
            for tap in taps:
                i, j = tap[:2]
                yield tap, cols[:, g, i, j] if self.samples else cols[g, i, j], part

    def _runs(self, tap, block, part):
        """A "same" tap's block and image part as 2-d runs, and the range [l0, l1) of a block's
        run that reads inside the image's run at l + s, and s."""
        a, n, s = block.shape[0], math.prod(block.shape[1:]), self._shift(tap)
        runs, part = block.reshape(a, n), part.reshape(a, n)  # ("same": as many as the block's)
        return runs, part, max(0, -s), min(n, n - s), s

    def _zero_padding(self, cols):
        """Zeroes the columns of a "same" geometry that read padding (or, read as runs, a
        neighbouring row or image): by kernel row, the output rows above or below the image, by
        kernel column those left or right of it."""
        every, at = slice(None), 2 if self.samples else 1  # the axis of i; j's is next
        for axis, ranges, size in ((at, self.rows, self.out[0]), (at + 1, self.cols, self.out[1])):
            out_axis = -2 if axis == at else -1
            for t, (lo, hi, _) in enumerate(ranges):
                where = [every] * cols.ndim
                where[axis] = t
                for a, b in [(0, size)] if hi <= lo else [(0, lo), (hi, size)]:
                    if b > a:
                        where[out_axis] = slice(a, b)
                        cols[tuple(where)] = 0

    def _window(self, tap):
        """A tap's outputs in its block and the inputs they read, as (row, column) slices."""
        _, _, rows, cols = tap
        sh, sw = self.stride
        return ((slice(rows[0], rows[1]), slice(cols[0], cols[1])),
                (slice(rows[2], rows[2] + sh * (rows[1] - rows[0] - 1) + 1, sh),
                 slice(cols[2], cols[2] + sw * (cols[1] - cols[0] - 1) + 1, sw)))  # fmt: skip

    def fill(self, cols, img):
        """The patches of `img` into `cols`."""
        for tap, block, part in self._blocks(cols, img, self.taps):
            if self.same:
                runs, src, l0, l1, s = self._runs(tap, block, part)
                runs[:, l0:l1] = src[:, l0 + s : l1 + s]
            else:
                out, inp = self._window(tap)
                block[:, :, out[0], out[1]] = part[:, :, inp[0], inp[1]]
        if self.same:
            self._zero_padding(cols)

    def scatter(self, img, cols):
        """Adds the gradient of each patch, in `cols`, back into `img` where the patch came from
        (the inverse of `fill`). `img` starts as zeros, or else holds anything and the `center`
        tap is assigned first."""
        if self.same:
            self._zero_padding(cols)
        taps = sorted(self.taps, key=lambda t: t is not self.center)
        for tap, block, part in self._blocks(cols, img, taps):
            if self.same:
                runs, dst, l0, l1, s = self._runs(tap, block, part)
                if tap is self.center:
                    dst[...] = runs
                    continue
                dst = dst[:, l0 + s : l1 + s]
                dst += runs[:, l0:l1]
            else:
                out, inp = self._window(tap)
                dst = part[:, :, inp[0], inp[1]]
                dst += block[:, :, out[0], out[1]]


def scratch(op, x_shape, w_shape, dtype, stride, padding, dilation, groups, shape=None) -> int:
    """Bytes of the temporaries one call of `op` ("conv2d", "input_grad", "weight_grad") holds at
    once: a chunk's columns (by columns also its product and image), and the weight gradient's
    per-sample products and partial sums. For the memory plan."""
    out = output_size(x_shape, w_shape, stride, padding, dilation, groups)
    if bands := _bands(x_shape, w_shape, out, stride, padding, dilation, groups, dtype):
        kinds = {(_part(x_shape, in_at), pad) for _, in_at, pad in bands}  # each geometry once
        return max(_band_scratch(op, w_shape, dtype, stride, dilation, groups, *band)
                   for band in kinds)  # fmt: skip
    if _depthwise(x_shape, w_shape, groups):
        dw = _Depthwise(x_shape, w_shape, out, stride, padding, dilation, dtype)
        return min(dw.chunk, dw.n) * dw.sample_bytes + (w_shape[0] * dw.dtype.itemsize
                                                        * len(dw.taps))  # fmt: skip
    cv = _Conv(x_shape, w_shape, out, stride, padding, dilation, groups, dtype)
    total = cv.chunk * cv.sample_bytes
    if op == "weight_grad":
        total += cv.groups * cv.k * cv.og * 2 * cv.dtype.itemsize  # dw and one part
        if cv.samples:
            total += cv.chunk * cv.k * cv.og * cv.dtype.itemsize  # a group's stacked products
    return total


def _band_scratch(op, w_shape, dtype, stride, dilation, groups, band_x, pad):
    """One band's temporaries (`_by_bands`): its own, its operands made contiguous, the weight
    laid out, and its result before it is placed."""
    band_y = (band_x[0], w_shape[0], *output_size(band_x, w_shape, stride, pad, dilation, groups))
    result = {"conv2d": band_y, "input_grad": band_x, "weight_grad": w_shape}[op]
    held = math.prod(band_x) + math.prod(band_y) + math.prod(w_shape) + math.prod(result)
    own = scratch(op, band_x, w_shape, dtype, stride, pad, dilation, groups)
    return own + held * np.dtype(dtype).itemsize


def _result(out, shape, dtype, zeros=False):
    """`out`, the plan's buffer (zeroed if `zeros`), or a new array."""
    if out is None:
        return (np.zeros if zeros else np.empty)(shape, dtype)
    if not out.flags.c_contiguous:
        raise ValueError(f"convolutions write C-contiguous results, not strides {out.strides}")
    if zeros:
        out[...] = 0
    return out


# --- depthwise convolutions (a group one input and one output channel): no columns, no products


def _depthwise(x_shape, w_shape, groups) -> bool:
    """Whether each group reads one input channel into one output channel: its products would
    be one row by kh * kw each, a Python loop over the channels; whole-batch taps instead."""
    return groups > 1 and w_shape[1] == 1 and w_shape[0] == groups == x_shape[1]


class _Depthwise:
    """A depthwise convolution's taps, each the strided window of a zero-padded chunk of the
    batch it reads, and its chunks: a padded image and one tap's product within CHUNK_BYTES."""

    def __init__(self, x_shape, w_shape, size, stride, padding, dilation, dtype):
        (self.n, c, self.h, self.w), (kh, kw), (oh, ow) = x_shape, w_shape[2:], size
        (self.top, bottom), (self.left, right) = padding
        self.hp, self.wp = self.h + self.top + bottom, self.w + self.left + right
        (sh, sw), (dh, dw) = stride, dilation
        self.taps = [(i, j, slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
                      slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))
                     for i in range(kh) for j in range(kw)]  # fmt: skip
        self.dtype = np.dtype(dtype)
        self.sample_bytes = c * (self.hp * self.wp + oh * ow) * self.dtype.itemsize
        self.chunk = max(1, CHUNK_BYTES // self.sample_bytes)

    def padded(self, x):
        """A chunk of the batch, zero-padded."""
        xp = np.zeros((x.shape[0], x.shape[1], self.hp, self.wp), self.dtype)
        xp[:, :, self.top : self.top + self.h, self.left : self.left + self.w] = x
        return xp

    def inside(self, xp):
        return xp[:, :, self.top : self.top + self.h, self.left : self.left + self.w]

    def forward(self, x, w, y):
        for n0 in range(0, self.n, self.chunk):
            xp, ys = self.padded(x[n0 : n0 + self.chunk]), y[n0 : n0 + self.chunk]
            tmp = np.empty_like(ys)
            for k, (i, j, rows, cols) in enumerate(self.taps):
                np.multiply(xp[:, :, rows, cols], w[:, 0, i, j, None, None], out=tmp if k else ys)
                if k:
                    ys += tmp
        return y

    def input_grad(self, g, w, dx):
        for n0 in range(0, self.n, self.chunk):
            gs = g[n0 : n0 + self.chunk]
            dxp = np.zeros((gs.shape[0], gs.shape[1], self.hp, self.wp), self.dtype)
            tmp = np.empty_like(gs)
            for i, j, rows, cols in self.taps:
                dxp[:, :, rows, cols] += np.multiply(gs, w[:, 0, i, j, None, None], out=tmp)
            dx[n0 : n0 + self.chunk] = self.inside(dxp)
        return dx

    def weight_grad(self, x, g, dw):
        sums = np.zeros(dw.shape, self.dtype)
        for n0 in range(0, self.n, self.chunk):
            xp, gs = self.padded(x[n0 : n0 + self.chunk]), g[n0 : n0 + self.chunk]
            tmp = np.empty_like(gs)
            for i, j, rows, cols in self.taps:
                sums[:, 0, i, j] += np.multiply(xp[:, :, rows, cols], gs, out=tmp).sum((0, 2, 3))
        dw[...] = sums
        return dw


def _sample_bytes(x_shape, w_shape, out, stride, padding, dilation, groups, dtype) -> int:
    """The temporaries one sample needs (a chunk holds whole samples)."""
    if _depthwise(x_shape, w_shape, groups):
        return _Depthwise(x_shape, w_shape, out, stride, padding, dilation, dtype).sample_bytes
    return _Conv(x_shape, w_shape, out, stride, padding, dilation, groups, dtype).sample_bytes


def _bands(x_shape, w_shape, out, stride, padding, dilation, groups, dtype):
    """Where one sample's temporaries would pass BAND_BYTES, bands of its output rows (of its
    columns, for a single row: a long 1-d signal) that keep within it: [(where the band lies in
    the output, where the input it reads lies, the band's padding)]; else None."""
    (_, c, h, w), (o, _, kh, kw), positions = x_shape, w_shape, out[0] * out[1]
    padded = (h + sum(padding[0])) * (w + sum(padding[1]))
    bound = (c * kh * kw + o) * positions + c * padded
    if bound * np.dtype(dtype).itemsize <= BAND_BYTES:
        return None  # (a bound on either layout's temporaries: most calls stop here, cheaply)
    whole = _sample_bytes(x_shape, w_shape, out, stride, padding, dilation, groups, dtype)
    axis = 0 if out[0] > 1 else 1
    if whole <= BAND_BYTES or out[axis] == 1:
        return None
    step = max(1, int(BAND_BYTES // (whole / out[axis])))
    size, k, s, d = x_shape[2 + axis], w_shape[2 + axis], stride[axis], dilation[axis]
    bands = []
    for o0 in range(0, out[axis], step):
        o1 = min(out[axis], o0 + step)
        a = o0 * s - padding[axis][0]  # the inputs it reads, padding included: [a, b)
        b = a + (o1 - o0 - 1) * s + (k - 1) * d + 1
        i0, i1 = max(0, a), min(size, b)
        pad = (*padding[:axis], (i0 - a, b - i1), *padding[axis + 1 :])
        bands.append((_along(axis, o0, o1), _along(axis, i0, i1), pad))
    return bands


def _along(axis, lo, hi):
    """The index of [lo, hi) along an image's axis 0 (rows) or 1 (columns)."""
    return (slice(None),) * (2 + axis) + (slice(lo, hi),)


def _part(shape, where):
    """The shape of `where` (`_along`) of an array of `shape`."""
    last = where[-1]
    return (*shape[: len(where) - 1], last.stop - last.start, *shape[len(where) :])


def _by_bands(op, bands, x, w, shape, stride, dilation, groups, out):
    """`op` ("conv2d", "input_grad", "weight_grad") band by band (`_bands`): the output's bands
    written in turn, the input gradient's added up where bands overlap, the weight gradient's
    summed. `x` is the input, or for the input gradient the output's gradient."""
    zeros = op != "conv2d"
    result = _result(out, shape, np.result_type(x.dtype, w.dtype), zeros=zeros)
    for out_at, in_at, pad in bands:
        if op == "conv2d":
            result[out_at] = forward(x[in_at], w, stride, pad, dilation, groups)
        elif op == "input_grad":
            band = _part(shape, in_at)
            result[in_at] += input_grad(x[out_at], w, band, stride, pad, dilation, groups)
        else:  # `w` is the output's gradient
            result += weight_grad(x[in_at], w[out_at], shape, stride, pad, dilation, groups)
    return result


def forward(x, w, stride, padding, dilation, groups, out=None):
    size = output_size(x.shape, w.shape, stride, padding, dilation, groups)
    dtype = np.result_type(x.dtype, w.dtype)
    if bands := _bands(x.shape, w.shape, size, stride, padding, dilation, groups, dtype):
        return _by_bands("conv2d", bands, x, w, (x.shape[0], w.shape[0], *size), stride,
                         dilation, groups, out)  # fmt: skip
    if _depthwise(x.shape, w.shape, groups):
        dw = _Depthwise(x.shape, w.shape, size, stride, padding, dilation,
                        np.result_type(x.dtype, w.dtype))  # fmt: skip
        return dw.forward(x, w, _result(out, (x.shape[0], w.shape[0], *size), dw.dtype))
    cv = _Conv(x.shape, w.shape, size, stride, padding, dilation, groups,
               np.result_type(x.dtype, w.dtype))  # fmt: skip
    x, wk, og = np.ascontiguousarray(x), cv.weights(w), cv.og
    y = _result(out, (cv.n, cv.o, *size), cv.dtype).reshape(cv.n, cv.o, cv.l)
    for n0, n1, cols, prod, img in cv.chunks(zero=True):
        cv.fill(cols, cv.image(x[n0:n1], img))
        mats = cv.matrices(cols)
        if cv.samples:  # each sample's product straight into y
            ys = y[n0:n1].reshape(n1 - n0, cv.groups, og, cv.l)
            for g in range(cv.groups):
                np.matmul(wk[g], mats[g], out=ys[:, g])
            continue
        for g in range(cv.groups):
            np.matmul(wk[g], mats[g], out=prod[g * og : (g + 1) * og])
        y[n0:n1] = prod.reshape(cv.o, n1 - n0, cv.l).transpose(1, 0, 2)
    return y.reshape(cv.n, cv.o, *size)


def input_grad(g, w, shape, stride, padding, dilation, groups, out=None):
    """The transposed convolution: each patch's gradient added back where the patch came from."""
    dtype = np.result_type(g.dtype, w.dtype)
    if bands := _bands(shape, w.shape, g.shape[2:], stride, padding, dilation, groups, dtype):
        return _by_bands("input_grad", bands, g, w, shape, stride, dilation, groups, out)
    if _depthwise(shape, w.shape, groups):
        dw = _Depthwise(shape, w.shape, g.shape[2:], stride, padding, dilation,
                        np.result_type(g.dtype, w.dtype))  # fmt: skip
        return dw.input_grad(g, w, _result(out, shape, dw.dtype))
    cv = _Conv(shape, w.shape, g.shape[2:], stride, padding, dilation, groups,
               np.result_type(g.dtype, w.dtype))  # fmt: skip
    wk, og = cv.weights(w), cv.og
    g = np.ascontiguousarray(g).reshape(cv.n, cv.o, cv.l)
    direct = cv.samples or not cv.same  # the patches added into dx itself, else via an image
    dx = _result(out, shape, cv.dtype, zeros=direct and cv.center is None)
    for n0, n1, cols, prod, img in cv.chunks(zero=False):
        mats, m = cv.matrices(cols), n1 - n0
        if cv.samples:
            gs = g[n0:n1].reshape(m, cv.groups, og, cv.l)
            for k in range(cv.groups):
                np.matmul(wk[k].T, gs[:, k], out=mats[k])
            cv.scatter(dx[n0:n1], cols)
            continue
        prod.reshape(cv.o, m, cv.l)[...] = g[n0:n1].transpose(1, 0, 2)
        for k in range(cv.groups):
            np.matmul(wk[k].T, prod[k * og : (k + 1) * og], out=mats[k])
        if direct:
            cv.scatter(dx[n0:n1].transpose(1, 0, 2, 3), cols)
            continue
        if cv.center is None:
            img[...] = 0
        cv.scatter(img, cols)
        dx[n0:n1] = img.transpose(1, 0, 2, 3)
    return dx


def weight_grad(x, g, shape, stride, padding, dilation, groups, out=None):
    dtype = np.result_type(x.dtype, g.dtype)
    if bands := _bands(x.shape, shape, g.shape[2:], stride, padding, dilation, groups, dtype):
        return _by_bands("weight_grad", bands, x, g, shape, stride, dilation, groups, out)
    if _depthwise(x.shape, shape, groups):
        dw = _Depthwise(x.shape, shape, g.shape[2:], stride, padding, dilation,
                        np.result_type(x.dtype, g.dtype))  # fmt: skip
        return dw.weight_grad(x, g, _result(out, shape, dw.dtype))
    cv = _Conv(x.shape, shape, g.shape[2:], stride, padding, dilation, groups,
               np.result_type(x.dtype, g.dtype))  # fmt: skip
    og, (kh, kw) = cv.og, cv.kernel
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g).reshape(cv.n, cv.o, cv.l)
    dw = np.zeros((cv.groups, cv.k, og), cv.dtype)  # each group's (k, O / groups)
    part = np.empty((cv.k, og), cv.dtype)
    for n0, n1, cols, prod, img in cv.chunks(zero=True):
        cv.fill(cols, cv.image(x[n0:n1], img))
        mats, m = cv.matrices(cols), n1 - n0
        if cv.samples:
            gs = g[n0:n1].reshape(m, cv.groups, og, cv.l)
            for k in range(cv.groups):
                dw[k] += np.matmul(mats[k], gs[:, k].transpose(0, 2, 1)).sum(0)
            continue
        prod.reshape(cv.o, m, cv.l)[...] = g[n0:n1].transpose(1, 0, 2)
        for k in range(cv.groups):
            np.matmul(mats[k], prod[k * og : (k + 1) * og].T, out=part)
            dw[k] += part
    dw = dw.reshape(cv.groups, kh, kw, cv.cg, og).transpose(0, 4, 3, 1, 2)
    result = _result(out, shape, cv.dtype)
    result.reshape(dw.shape)[...] = dw
    return result


# --- the records ----------------------------------------------------------------------

# --- convolution (above: im2col feeding BLAS; the Numba backend has kernels of its own)
# Attributes: stride (sh, sw), padding ((top, bottom), (left, right)), dilation (dh, dw), groups.
# The three ops are each other's VJPs (each is bilinear), so every order of derivative is exact.


def _conv2d_rule(x, w, stride, padding, dilation, groups):
    oh, ow = output_size(x.shape, w.shape, stride, padding, dilation, groups)
    return (x.shape[0], w.shape[0], oh, ow), np.result_type(x.dtype, w.dtype)


def _conv_scratch(op: str) -> Callable:
    """The bytes of `op`'s temporaries (`scratch`); a gradient op's `shape` attribute
    is the input's or the weight's."""

    def temporaries(ins: Sequence[Any], a: dict) -> int:
        x = a["shape"] if op == "input_grad" else ins[0].shape
        w = a["shape"] if op == "weight_grad" else ins[1].shape
        return scratch(op, x, w, np.result_type(*(v.dtype for v in ins)), **a)

    return temporaries


def _conv_grad_rule(a, b, shape, stride, padding, dilation, groups):
    return shape, np.result_type(a.dtype, b.dtype)


conv2d = Primitive(
    "conv2d",
    forward,
    _conv2d_rule,
    (lambda g, out, x, w, **a: conv2d_input_grad(g, w, shape=x.shape, **a),
     lambda g, out, x, w, **a: conv2d_weight_grad(x, g, shape=w.shape, **a)),
    "in",
    kind=Kind.CONTRACTION,
    accepts_out=True,
    scratch=_conv_scratch("conv2d"),
)  # fmt: skip
conv2d_input_grad = Primitive(
    "conv2d_input_grad",
    input_grad,
    _conv_grad_rule,
    (lambda c, out, g, w, shape, **a: conv2d(c, w, **a),
     lambda c, out, g, w, shape, **a: conv2d_weight_grad(c, g, shape=w.shape, **a)),
    "in",
    kind=Kind.CONTRACTION,
    accepts_out=True,
    scratch=_conv_scratch("input_grad"),
)  # fmt: skip
conv2d_weight_grad = Primitive(
    "conv2d_weight_grad",
    weight_grad,
    _conv_grad_rule,
    (lambda c, out, x, g, shape, **a: conv2d_input_grad(g, c, shape=x.shape, **a),
     lambda c, out, x, g, shape, **a: conv2d(x, c, **a)),
    "in",
    kind=Kind.CONTRACTION,
    accepts_out=True,
    scratch=_conv_scratch("weight_grad"),
)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]

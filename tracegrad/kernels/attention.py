"""Attention kernels: `softmax(q k^T * scale [causal]) v` and its VJP, each one Numba kernel.
`tracegrad.attention` has the NumPy versions and the contract.

A kernel runs a `prange` over the (batch, head) pairs; each pair's keys and values are copied
once into small arrays of its own (transposed where a product wants rows), and the queries go
four rows at a time, each product as dot products of four rows with two others at once (every
element loaded serves several sums); a row's scores, its softmax and its output stay in the L1
cache. Nothing of size (queries x keys) leaves the pair: the backward kernel rebuilds each
block's probabilities from q and k (its `out` gives the softmax's correction term,
sum(g * out)). A causal pair computes only the keys a block of rows may see, about half of the
work. On the GPT of `benchmarks/models.py` (16 x 4 pairs of 128 x 64, float32, causal, two
threads), alone, the fastest of 100 calls: forward 2.3 ms and backward 4.7 ms (2.5 and 5.5 ms
when each product updated four output rows per element it read), against 8.4 and 13.2 ms for
NumPy's composition of the same products and softmax (docs/kernels.md).

Modules are generated per dtype; the scale and causality are arguments. Inputs are 4-D arrays
of any layout (batch, heads, rows, features); outputs are C-contiguous. Cached like the fused
kernels (`KernelCache`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tracegrad import primitives as P
from tracegrad.ir import Node

from . import rows
from .cache import GeneratedKernel, named

OPS = {P.attention: "forward", P.attention_grad: "backward"}
DTYPES = ("float32", "float64")

_HELPERS = '''

@_inner
def up(n, m):
    """n rounded up to a multiple of m."""
    return (n + m - 1) // m * m


@_inner
def seen(i, n_keys, causal):
    """How many keys row i sees."""
    return min(i + 1, n_keys) if causal else n_keys


@_inner
def softmax(s, rows, n_keys, i0, causal):
    """Row r of `s` (R x keys) becomes its probabilities over the keys it sees; the rest of the
    row, and rows past the block's `rows`, become 0 (the products after it read them). The max
    and the sum are loops of their own: a loop that also exps would not vectorize."""
    for r in range(R):
        seen_r = seen(i0 + r, n_keys, causal) if r < rows else 0
        x = s[r]
        if seen_r > 0:
            m = row_max(x, seen_r)
            for j in range(seen_r):
                x[j] = exp(x[j] - m)
            inv = T(1) / row_sum(x, seen_r)
            for j in range(seen_r):
                x[j] *= inv
        for j in range(seen_r, x.size):
            x[j] = 0


@_inner
def product(a, ac, b, j0, j1, m, out):
    """out[:R, :up(m, W)] = a[j0:j1, ac:ac + R]^T @ b[j0:j1, :up(m, W)], a tile at a time (b
    and out padded to whole tiles)."""
    for c in range(0, m, W):
        tile(a, ac, b, c, j0, j1, out, c)


@_inner
def transposed(x, b, h, scale, width):
    """x[b, h] transposed and scaled: (features x width), zero past x's rows. Written a row of
    the result at a time: the writes in order are what makes a transpose fast."""
    n, f = x.shape[2], x.shape[3]
    out = np.empty((f, width), T)
    for c in range(f):
        row = out[c]
        for i in range(n):
            row[i] = x[b, h, i, c] * scale
        for i in range(n, width):
            row[i] = 0
    return out


@_inner
def padded(x, b, h, rows, width):
    """x[b, h] (rows x width), zero past its rows and features."""
    n, f = x.shape[2], x.shape[3]
    out = np.empty((rows, width), T)
    for i in range(rows):
        row = out[i]
        if i < n:
            src = x[b, h, i]
            for c in range(f):
                row[c] = src[c]
        for c in range(f if i < n else 0, width):
            row[c] = 0
    return out


@_inner
def transpose_block(s, n, out):
    """out[:n, :R] = s[:R, :n]^T: a block's probabilities as the rows a product reads."""
    for j in range(n):
        for r in range(R):
            out[j, r] = s[r, j]
'''

_FORWARD = """

@_inner
def pair(q, k, v, scale, causal, out, b, h):
    n_rows, n_keys, f, e = q.shape[2], k.shape[2], q.shape[3], v.shape[3]
    qt = transposed(q, b, h, scale, up(n_rows, R))
    kt = transposed(k, b, h, T(1), up(n_keys, W))
    vp = padded(v, b, h, n_keys, up(e, W))
    s = np.empty((R, kt.shape[1]), T)
    pt = np.empty((kt.shape[1], R), T)
    o = np.empty((R, vp.shape[1]), T)
    for i0 in range(0, n_rows, R):
        rows = min(R, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        product(qt, i0, kt, 0, f, n, s)
        softmax(s, rows, n_keys, i0, causal)
        transpose_block(s, n, pt)
        product(pt, 0, vp, 0, n, e, o)
        for r in range(rows):
            out[b, h, i0 + r, :] = o[r, :e]


@_outer
def kernel(q, k, v, scale, causal, out):
    heads = q.shape[1]
    for p in prange(q.shape[0] * heads):
        pair(q, k, v, scale, causal, out, p // heads, p % heads)
"""

_BACKWARD = """

@_inner
def pair(q, k, v, o, g, scale, causal, dq, dk, dv, b, h):
    n_rows, n_keys, f, e = q.shape[2], k.shape[2], q.shape[3], v.shape[3]
    rows_p, keys_p = up(n_rows, R), up(n_keys, W)
    qt, gt = transposed(q, b, h, scale, rows_p), transposed(g, b, h, T(1), rows_p)
    kt, vt = transposed(k, b, h, T(1), keys_p), transposed(v, b, h, T(1), keys_p)
    kp, qp = padded(k, b, h, keys_p, up(f, W)), padded(q, b, h, rows_p, up(f, W))
    gp = padded(g, b, h, rows_p, up(e, W))
    p, ds = np.zeros((rows_p, keys_p), T), np.zeros((rows_p, keys_p), T)  # the pair's, whole
    s, dp = np.empty((R, keys_p), T), np.empty((R, keys_p), T)
    dst = np.empty((keys_p, R), T)
    acc = np.empty((R, max(kp.shape[1], gp.shape[1])), T)
    for i0 in range(0, n_rows, R):
        rows = min(R, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        product(qt, i0, kt, 0, f, n, s)
        softmax(s, rows, n_keys, i0, causal)
        product(gt, i0, vt, 0, e, n, dp)  # g v^T
        end = up(n, W)  # whole tiles: s is 0 past a row's keys, and dp finite
        for r in range(rows):
            i = i0 + r
            d = row_dot(g[b, h, i], o[b, h, i])
            pi, dsi, sr, dpr = p[i], ds[i], s[r], dp[r]
            for j0 in range(0, end, W):
                for j in range(j0, j0 + W):
                    pi[j] = sr[j]
                    dsi[j] = sr[j] * (dpr[j] - d) * scale  # d(scores) / d(q k^T)
        transpose_block(ds[i0:i0 + R], n, dst)
        product(dst, 0, kp, 0, n, f, acc)
        for r in range(rows):
            dq[b, h, i0 + r, :] = acc[r, :f]
    for c in range(0, n_keys, R):  # the keys' gradients, R keys at a time
        first = min(c, n_rows) if causal else 0  # no earlier row sees key c
        keys = min(R, n_keys - c)
        product(p, c, gp, first, n_rows, e, acc)
        for r in range(keys):
            dv[b, h, c + r, :] = acc[r, :e]
        product(ds, c, qp, first, n_rows, f, acc)
        for r in range(keys):
            dk[b, h, c + r, :] = acc[r, :f]


@_outer
def kernel(q, k, v, o, g, scale, causal, dq, dk, dv):
    heads = q.shape[1]
    for p in prange(q.shape[0] * heads):
        pair(q, k, v, o, g, scale, causal, dq, dk, dv, p // heads, p % heads)
"""


ROWS = 4  # R: rows of a tile, each a SIMD register of sums (64 bytes: W elements)


def tile_source(width: int) -> str:
    """`tile`: out[:R, oc:oc + W] = a[j0:j1, ac:ac + R]^T @ b[j0:j1, bc:bc + W], its R x W sums
    written out as scalars for the SLP vectorizer to pack into R registers of W lanes: each
    step loads one row of b and R numbers of a, and does R fused multiply-adds."""
    sums = [[f"s{r}_{c}" for c in range(width)] for r in range(ROWS)]
    a, b = [f"a{r}" for r in range(ROWS)], [f"b{c}" for c in range(width)]
    lines = ["@_inner", "def tile(a, ac, b, bc, j0, j1, out, oc):"]
    lines += [f"    {', '.join(row)} = {', '.join(['T(0)'] * width)}" for row in sums]
    lines += ["    for j in range(j0, j1):", "        aj, bj = a[j, ac:ac + R], b[j, bc:bc + W]"]
    lines += [f"        {', '.join(a)} = {', '.join(f'aj[{r}]' for r in range(ROWS))}"]
    lines += [f"        {', '.join(b)} = {', '.join(f'bj[{c}]' for c in range(width))}"]
    lines += [f"        {s} += {a[r]} * {b[c]}" for r, row in enumerate(sums)
              for c, s in enumerate(row)]  # fmt: skip
    for r, row in enumerate(sums):
        lines += [f"    o = out[{r}, oc:oc + W]"]
        lines += [f"    o[{c}] = {s}" for c, s in enumerate(row)]
    return "\n".join(lines) + "\n"


def generate_source(op: str, dtype: str) -> str:
    """The text of a kernel's module. Numba leaves LLVM's SLP vectorizer off (it miscompiled
    some integer code in older LLVMs); the module turns it on while its `kernel` compiles, which
    is when `tile` and the rest compile, and restores the setting after."""
    inputs = 3 if op == "forward" else 5
    outputs = 1 if op == "forward" else 3
    arrays = [f"{dtype}[:, :, :, :]"] * inputs + [dtype, "boolean"]
    arrays += [f"{dtype}[:, :, :, ::1]"] * outputs
    head = rows.head("Attention " + op, "tracegrad.kernels.attention", dtype,
                     f"void({', '.join(arrays)})")  # fmt: skip
    width = 64 // np.dtype(dtype).itemsize
    body = _FORWARD if op == "forward" else _BACKWARD
    kernel_at = body.index("@_outer")
    compiled = "    " + body[kernel_at:].replace("\n", "\n    ").rstrip() + "\n"
    return (
        head
        + f"\nfrom numba.core import config\n\nR, W = {ROWS}, {width}\n\n\n"
        + tile_source(width)
        + _HELPERS
        + body[:kernel_at]
        + "_SLP, config.SLP_VECTORIZE = config.SLP_VECTORIZE, 1\ntry:\n\n"
        + compiled
        + "finally:\n    config.SLP_VECTORIZE = _SLP\n"
    )


def module(node: Node) -> tuple[str, str]:
    """The name and text of an attention node's kernel module; NotImplementedError for other
    dtypes and for constant operands."""
    dtype = node.outputs[0].dtype.name
    if dtype not in DTYPES or any(v.const is not None or v.dtype.name != dtype
                                  for v in node.inputs):  # fmt: skip
        raise NotImplementedError(f"attention kernels for {dtype} or constants")
    return named("sdpa", generate_source(OPS[node.prim], dtype))


def as_pairs(a: np.ndarray) -> np.ndarray:
    """`a` (..., rows, features) as 4-D (batch, heads, rows, features), a view where it can."""
    lead = a.shape[:-2]
    heads = lead[-1] if lead else 1
    return a.reshape(math.prod(lead[:-1]), heads, *a.shape[-2:])


class AttentionKernel(GeneratedKernel):
    """`kernel(*input_arrays, out)` for one node: the forward writes `out`; the backward writes
    the flat (dq, dk, dv) it packs (`tracegrad.attention.unpack`)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.scale = node.outputs[0].dtype.type(node.attrs["scale"])
        self.causal = bool(node.attrs["causal"])
        self.backward = node.prim is P.attention_grad

    def __call__(self, *arrays: np.ndarray) -> None:
        from tracegrad.attention import unpack

        *inputs, out = arrays
        if not out.flags.c_contiguous:
            raise ValueError("attention kernels write C-contiguous outputs")
        pairs = [as_pairs(a) for a in inputs]
        if self.backward:
            outs = [as_pairs(a) for a in unpack(out, *inputs[:3])]
        else:
            outs = [out.reshape(*pairs[0].shape[:3], -1)]
        self.compiled(*pairs, self.scale, self.causal, *outs)


def launcher(node: Node, compiled: Callable, path: Path) -> AttentionKernel:
    return AttentionKernel(node, compiled, path)

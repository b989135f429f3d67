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
def seen(i, n_keys, causal):
    """How many keys row i sees."""
    return min(i + 1, n_keys) if causal else n_keys


@_inner
def softmax(s, rows, n, n_keys, i0, causal):
    """Row r of `s` (4 x n scores) becomes its probabilities; masked keys and rows past the
    block's `rows` get 0. The max and the sum are loops of their own: a loop that also exps
    would not vectorize."""
    for r in range(4):
        seen_r = seen(i0 + r, n_keys, causal) if r < rows else 0
        x = s[r]
        if seen_r > 0:
            m = row_max(x, seen_r)
            for j in range(seen_r):
                x[j] = exp(x[j] - m)
            inv = T(1) / row_sum(x, seen_r)
            for j in range(seen_r):
                x[j] *= inv
        for j in range(seen_r, n):
            x[j] = 0


@_reduce
def dots(left, right, k, m, out):
    """out[:, c] = left[:, :k] @ right[c, :k] for c < m, four rows of `left`: the products of
    four rows with two of `right` at a time, eight sums in SIMD lanes (every element loaded
    serves two or four of them: about twice the rate of updating four rows of `out` for each
    element of `right`, as this did before)."""
    l0, l1, l2, l3 = left[0], left[1], left[2], left[3]
    for c in range(0, m - 1, 2):
        x, y = right[c], right[c + 1]
        s0x = s0y = s1x = s1y = s2x = s2y = s3x = s3y = T(0)
        for j in range(k):
            a, b = x[j], y[j]
            s0x += l0[j] * a
            s0y += l0[j] * b
            s1x += l1[j] * a
            s1y += l1[j] * b
            s2x += l2[j] * a
            s2y += l2[j] * b
            s3x += l3[j] * a
            s3y += l3[j] * b
        out[0, c], out[0, c + 1], out[1, c], out[1, c + 1] = s0x, s0y, s1x, s1y
        out[2, c], out[2, c + 1], out[3, c], out[3, c + 1] = s2x, s2y, s3x, s3y
    if m % 2:
        x = right[m - 1]
        for r in range(4):
            out[r, m - 1] = row_dot(left[r, :k], x[:k])


@_inner
def add_outer(s, x, n, acc):
    """acc[:n] += s[:, :n]^T @ x (4 x F): the keys' share of four rows."""
    x0, x1, x2, x3 = x[0], x[1], x[2], x[3]
    for j in range(n):
        p0, p1, p2, p3 = s[0, j], s[1, j], s[2, j], s[3, j]
        aj = acc[j]
        for c in range(x.shape[1]):
            aj[c] += p0 * x0[c] + p1 * x1[c] + p2 * x2[c] + p3 * x3[c]


@_inner
def block(a, b, h, i0, scale, out):
    """out (4 x F) = rows i0.. of a[b, h] (the last row repeated past the end), times scale."""
    last = a.shape[2] - 1
    for r in range(4):
        i = min(i0 + r, last)
        for c in range(a.shape[3]):
            out[r, c] = a[b, h, i, c] * scale


@_inner
def rows_of(a, b, h):
    """a[b, h] (rows x F), C-contiguous."""
    out = np.empty((a.shape[2], a.shape[3]), T)
    for j in range(a.shape[2]):
        out[j] = a[b, h, j]
    return out


@_inner
def columns_of(a, b, h):
    """a[b, h] transposed (F x rows), C-contiguous."""
    n, f = a.shape[2], a.shape[3]
    out = np.empty((f, n), T)
    for j0 in range(0, n, 8):  # in 8 x F tiles: the rows' elements are read in order
        for c in range(f):
            for j in range(j0, min(j0 + 8, n)):
                out[c, j] = a[b, h, j, c]
    return out
'''

_FORWARD = """

@_inner
def pair(q, k, v, scale, causal, out, b, h):
    n_rows, n_keys = q.shape[2], k.shape[2]
    kb, vt = rows_of(k, b, h), columns_of(v, b, h)
    qb = np.empty((4, q.shape[3]), T)
    s = np.empty((4, n_keys), T)
    o = np.empty((4, v.shape[3]), T)
    for i0 in range(0, n_rows, 4):
        rows = min(4, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        block(q, b, h, i0, scale, qb)
        dots(qb, kb, qb.shape[1], n, s)
        softmax(s, rows, n, n_keys, i0, causal)
        dots(s, vt, n, vt.shape[0], o)
        for r in range(rows):
            out[b, h, i0 + r, :] = o[r]


@_outer
def kernel(q, k, v, scale, causal, out):
    heads = q.shape[1]
    for p in prange(q.shape[0] * heads):
        pair(q, k, v, scale, causal, out, p // heads, p % heads)
"""

_BACKWARD = """

@_inner
def pair(q, k, v, o, g, scale, causal, dq, dk, dv, b, h):
    n_rows, n_keys = q.shape[2], k.shape[2]
    kb, kt, vb = rows_of(k, b, h), columns_of(k, b, h), rows_of(v, b, h)
    dk_acc = np.zeros((n_keys, k.shape[3]), T)
    dv_acc = np.zeros((n_keys, v.shape[3]), T)
    qs, qb = np.empty((4, q.shape[3]), T), np.empty((4, q.shape[3]), T)
    gb, ob = np.empty((4, v.shape[3]), T), np.empty((4, v.shape[3]), T)
    s, ds = np.empty((4, n_keys), T), np.empty((4, n_keys), T)
    dqb = np.empty((4, q.shape[3]), T)
    for i0 in range(0, n_rows, 4):
        rows = min(4, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        block(q, b, h, i0, scale, qs)
        block(q, b, h, i0, T(1), qb)
        block(g, b, h, i0, T(1), gb)
        block(o, b, h, i0, T(1), ob)
        dots(qs, kb, qs.shape[1], n, s)
        softmax(s, rows, n, n_keys, i0, causal)  # probabilities p; 0 past the block's rows
        dots(gb, vb, gb.shape[1], n, ds)  # dp = g v^T
        for r in range(4):
            d, p, dp = row_dot(gb[r], ob[r]), s[r], ds[r]
            for j in range(n):
                dp[j] = p[j] * (dp[j] - d) * scale  # d(scores) / d(q k^T)
        add_outer(s, gb, n, dv_acc)
        add_outer(ds, qb, n, dk_acc)
        dots(ds, kt, n, kt.shape[0], dqb)
        for r in range(rows):
            dq[b, h, i0 + r, :] = dqb[r]
    dk[b, h] = dk_acc
    dv[b, h] = dv_acc


@_outer
def kernel(q, k, v, o, g, scale, causal, dq, dk, dv):
    heads = q.shape[1]
    for p in prange(q.shape[0] * heads):
        pair(q, k, v, o, g, scale, causal, dq, dk, dv, p // heads, p % heads)
"""


def generate_source(op: str, dtype: str) -> str:
    """The text of a kernel's module."""
    inputs = 3 if op == "forward" else 5
    outputs = 1 if op == "forward" else 3
    arrays = [f"{dtype}[:, :, :, :]"] * inputs + [dtype, "boolean"]
    arrays += [f"{dtype}[:, :, :, ::1]"] * outputs
    head = rows.head("Attention " + op, "tracegrad.kernels.attention", dtype,
                     f"void({', '.join(arrays)})")  # fmt: skip
    return head + _HELPERS + (_FORWARD if op == "forward" else _BACKWARD)


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

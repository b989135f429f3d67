"""Attention kernels: `softmax(q k^T * scale [causal]) v` and its VJP, each one Numba kernel.
`core.ops.attention` has the NumPy versions and the contract.

A kernel runs a `prange` over the (batch, head) pairs; each pair's products are GEMMs called
on that thread (`gemm.declarations`: MKL's or NumPy's OpenBLAS's, single-threaded), each
operand read where it lies: a pair of a strided input is a matrix whose rows are contiguous
(`flat`), which BLAS reads with its row stride as the leading dimension, either way round.
Forward: the scores q k^T * scale, the softmax of each row, its product with v.
Backward rebuilds the probabilities p from q and k, takes dp = g v^T, ds = p * (dp - sum(g *
out)) * scale, then dq = ds k, dk = ds^T q and dv = p^T g. The (queries x keys) arrays are the
pair's own and never leave the kernel. A causal pair goes BLOCK rows at a time, each block
multiplying only the keys its last row sees, and the keys' gradients BLOCK keys at a time from
the first row that sees them: about half the work. docs/kernels.md has the kernels' speed and
the tiled products they replaced.

Modules are generated per dtype; the scale and causality are arguments. Results are written
through views of the C-contiguous buffers the plan gives: the forward's laid out heads next to
features, the backward's as `core.ops.attention.unpack` lays them. Cached like the fused
kernels (`KernelCache`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tracegrad.compiler.kernels import rows
from tracegrad.compiler.kernels.blas import gemm_symbols
from tracegrad.compiler.kernels.cache import GeneratedKernel, named
from tracegrad.compiler.kernels.fused import threaded
from tracegrad.compiler.kernels.gemm import declarations
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node

OPS = {P.attention: "output", P.attention_grad: "grads"}
# a kernel at any size (`lowering`): the NumPy versions are a product, a softmax and a product
# (backward more), each several calls; the kernel is as fast on the smallest heads
KERNEL_MIN = 0
STRIDED = True  # reads operands where they lie (`lowering._slices_copied`)
DTYPES = ("float32", "float64")

_HELPERS = '''

@_inner
def seen(i, n_keys, causal):
    """How many keys row i sees."""
    return min(i + 1, n_keys) if causal else n_keys


@_inner
def start(d, b, h, i):
    """Where row i of pair (b, h) starts in a flat input of dims d (shape, element strides)."""
    return b * d[4] + h * d[5] + i * d[6]


@_inner
def at(x, d, b, h, i):
    """The address of row i of pair (b, h) of a flat input x, as BLAS takes it."""
    return x.ctypes.data + start(d, b, h, i) * x.itemsize


@_inner
def ld(d):
    """The leading dimension BLAS reads a pair's rows with: their stride (any, if one row)."""
    return d[6] if d[2] > 1 else max(d[3], 1)


@_inner
def probabilities(s, i, n_keys, causal):
    """Row i of the scores s (flat, rows of n_keys) becomes its softmax over the keys it sees,
    0 past them. The max and the sum are loops of their own: a loop that also exps would not
    vectorize."""
    n = seen(i, n_keys, causal)
    x = s[i * n_keys : (i + 1) * n_keys]
    m = row_max(x, n)
    for j in range(n):
        x[j] = exp(x[j] - m)
    inv = T(1) / row_sum(x, n)
    for j in range(n):
        x[j] *= inv
    for j in range(n, n_keys):
        x[j] = 0


@_inner
def blocks(n, causal):
    """The rows (or keys) a block spans: BLOCK where causal, else all of them."""
    return BLOCK if causal else max(n, 1)
'''

_FORWARD = """

@_inner
def pair(q, qd, k, kd, v, vd, scale, causal, out, od, b, h):
    n_rows, n_keys, f, e = qd[2], kd[2], qd[3], vd[3]
    s = np.empty(n_rows * n_keys, T)
    step, size = blocks(n_rows, causal), s.itemsize
    for i0 in range(0, n_rows, step):
        rows = min(step, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        s_at = s.ctypes.data + i0 * n_keys * size
        gemm(ROW_MAJOR, AS_IS, TRANSPOSED, rows, n, f, scale, at(q, qd, b, h, i0), ld(qd),
             at(k, kd, b, h, 0), ld(kd), T(0), s_at, n_keys)  # q k^T * scale
        for i in range(i0, i0 + rows):
            probabilities(s, i, n_keys, causal)
        gemm(ROW_MAJOR, AS_IS, AS_IS, rows, e, n, T(1), s_at, n_keys, at(v, vd, b, h, 0), ld(vd),
             T(0), at(out, od, b, h, i0), ld(od))  # p v


@_outer
def kernel(q, qd, k, kd, v, vd, scale, causal, out, od):
    heads = qd[1]
    blas_threads = get_blas_threads()
    set_blas_threads(1)  # for every thread of the process (OpenBLAS's count is global)
    for p in prange(qd[0] * heads):
        pair(q, qd, k, kd, v, vd, scale, causal, out, od, p // heads, p % heads)
    set_blas_threads(blas_threads)
"""
_BACKWARD = """

@_inner
def pair(q, qd, k, kd, v, vd, o, od, g, gd, scale, causal, dq, dqd, dk, dkd, dv, dvd, b, h):
    n_rows, n_keys, f, e = qd[2], kd[2], qd[3], vd[3]
    p, ds = np.empty(n_rows * n_keys, T), np.empty(n_rows * n_keys, T)
    step, size = blocks(n_rows, causal), p.itemsize
    for i0 in range(0, n_rows, step):
        rows = min(step, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        p_at, ds_at = p.ctypes.data + i0 * n_keys * size, ds.ctypes.data + i0 * n_keys * size
        gemm(ROW_MAJOR, AS_IS, TRANSPOSED, rows, n, f, scale, at(q, qd, b, h, i0), ld(qd),
             at(k, kd, b, h, 0), ld(kd), T(0), p_at, n_keys)  # q k^T * scale
        gemm(ROW_MAJOR, AS_IS, TRANSPOSED, rows, n, e, T(1), at(g, gd, b, h, i0), ld(gd),
             at(v, vd, b, h, 0), ld(vd), T(0), ds_at, n_keys)  # g v^T
        for i in range(i0, i0 + rows):
            probabilities(p, i, n_keys, causal)
            gi, oi = start(gd, b, h, i), start(od, b, h, i)
            d = row_dot(g[gi : gi + e], o[oi : oi + e])
            for j in range(i * n_keys, i * n_keys + n):
                ds[j] = p[j] * (ds[j] - d) * scale  # d(scores) / d(q k^T)
            for j in range(i * n_keys + n, (i + 1) * n_keys):
                ds[j] = 0
        gemm(ROW_MAJOR, AS_IS, AS_IS, rows, f, n, T(1), ds_at, n_keys, at(k, kd, b, h, 0), ld(kd),
             T(0), at(dq, dqd, b, h, i0), ld(dqd))  # ds k
    step = blocks(n_keys, causal)
    for c in range(0, n_keys, step):  # the keys' gradients, from the first row that sees them
        keys = min(step, n_keys - c)
        first = min(c, n_rows) if causal else 0
        p_at = p.ctypes.data + (first * n_keys + c) * size
        ds_at = ds.ctypes.data + (first * n_keys + c) * size
        gemm(ROW_MAJOR, TRANSPOSED, AS_IS, keys, f, n_rows - first, T(1), ds_at, n_keys,
             at(q, qd, b, h, first), ld(qd), T(0), at(dk, dkd, b, h, c), ld(dkd))  # ds^T q
        gemm(ROW_MAJOR, TRANSPOSED, AS_IS, keys, e, n_rows - first, T(1), p_at, n_keys,
             at(g, gd, b, h, first), ld(gd), T(0), at(dv, dvd, b, h, c), ld(dvd))  # p^T g


@_outer
def kernel(q, qd, k, kd, v, vd, o, od, g, gd, scale, causal, dq, dqd, dk, dkd, dv, dvd):
    heads = qd[1]
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    for p in prange(qd[0] * heads):
        pair(q, qd, k, kd, v, vd, o, od, g, gd, scale, causal, dq, dqd, dk, dkd, dv, dvd,
             p // heads, p % heads)
    set_blas_threads(blas_threads)
"""

BLOCK = 64  # rows (or keys) of a causal pair's block: small enough to skip about half the work
WORK_PER_ELEMENT = 32  # multiply-adds in the time an elementwise kernel takes per element


def generate_source(op: str, dtype: str, ints: str, parallel: bool = True) -> str:
    """The text of a kernel's module, BLAS sizes of integer type `ints`; its pairs on several
    threads if `parallel`."""
    inputs = 3 if op == "output" else 5
    arrays = [f"{dtype}[::1]", "int64[::1]"] * inputs + [dtype, "boolean"]  # `flat` inputs
    arrays += [f"{dtype}[::1]", "int64[::1]"] * (1 if op == "output" else 3)  # `flat` too
    head = rows.head("Attention " + op, "tracegrad.compiler.kernels.attention", dtype,
                     f"void({', '.join(arrays)})", parallel)  # fmt: skip
    # the declarations name the BLAS scalar type T too: the arrays' dtype is T again after them
    return (head + "\n" + declarations(dtype, ints) + f"T = np.{dtype}\nBLOCK = {BLOCK}\n\n"
            + _HELPERS + (_FORWARD if op == "output" else _BACKWARD))  # fmt: skip


def module(node: Node) -> tuple[str, str]:
    """The name and text of an attention node's kernel module; NotImplementedError for other
    dtypes, for constant operands, and unless there are GEMM routines (`blas.gemm_symbols`)."""
    dtype, ints = node.outputs[0].dtype.name, gemm_symbols()
    if ints is None or dtype not in DTYPES or any(v.const is not None or v.dtype.name != dtype
                                                  for v in node.inputs):  # fmt: skip
        raise NotImplementedError(f"attention kernels for {dtype} or constants")
    q, k = node.inputs[:2]
    work = q.size * k.shape[-2] // WORK_PER_ELEMENT  # q k^T's multiply-adds, as elements
    return named("sdpa", generate_source(OPS[node.prim], dtype, ints, threaded(work)))


def as_pairs(a: np.ndarray) -> np.ndarray:
    """`a` (..., rows, features) as 4-D (batch, heads, rows, features), a view where it can."""
    lead = a.shape[:-2]
    heads = lead[-1] if lead else 1
    return a.reshape(math.prod(lead[:-1]), heads, *a.shape[-2:])


def flat(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A 4-D input as the kernels read it: its memory as a 1-D view from its first element, and
    its dims (shape, then the first three strides in elements). Each pair must be a matrix
    BLAS reads in place, contiguous rows a row stride apart: an input that is not (rows that
    overlap or repeat, negative or odd strides) is copied first."""
    item, (rows, features) = a.itemsize, a.shape[-2:]
    if a.size and (features > 1 and a.strides[-1] != item
                   or rows > 1 and a.strides[-2] < features * item
                   or any(s < 0 or s % item for s in a.strides)):  # fmt: skip
        a = np.ascontiguousarray(a)
    strides = [s // item if n > 1 else 0 for n, s in zip(a.shape, a.strides, strict=True)]
    span = 1 + sum((n - 1) * s for n, s in zip(a.shape, strides, strict=True)) if a.size else 0
    memory = np.lib.stride_tricks.as_strided(a, (span,), (item,))
    return memory, np.array([*a.shape, *strides[:3]], np.int64)


class AttentionKernel(GeneratedKernel):
    """`kernel(*input_arrays, out)` for one node: the forward writes `out`; the backward writes
    the flat (dq, dk, dv) it packs (`core.ops.attention.unpack`)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.scale = node.outputs[0].dtype.type(node.attrs["scale"])
        self.causal = bool(node.attrs["causal"])
        self.backward = node.prim is P.attention_grad

    def __call__(self, *arrays: np.ndarray) -> None:
        from tracegrad.core.ops.attention import heads_next, unpack

        *inputs, out = arrays
        if not out.flags.c_contiguous:
            raise ValueError("attention kernels write C-contiguous outputs")
        pairs = [as_pairs(a) for a in inputs]
        # out is C-contiguous, so the views of it written through have contiguous rows
        views = unpack(out, *inputs[:3]) if self.backward else [heads_next(out)]
        outs = [x for a in views for x in flat(as_pairs(a))]
        if not all(np.may_share_memory(x, out) for x in outs[::2]):
            raise ValueError(f"attention kernels: a result view of {out.shape} was copied")
        flats = [x for a in pairs for x in flat(a)]
        self.compiled(*flats, self.scale, self.causal, *outs)


def launcher(node: Node, compiled: Callable, path: Path) -> AttentionKernel:
    return AttentionKernel(node, compiled, path)

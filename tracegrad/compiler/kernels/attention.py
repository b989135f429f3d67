"""Attention kernels: `softmax(q k^T * scale [causal]) v` and its VJP, each one Numba kernel.
`core.ops.attention` has the NumPy versions and the contract.

A kernel runs a `prange` over the (batch, head) pairs and the queries four rows (R) at a time.
Every product is made of tiles (`tile`, `wide_tile`): R x W or R x 2W sums held in SIMD
registers (W lanes fill one: `vector_bytes`), each step one row of the right operand loaded and
R numbers of the left one broadcast into fused multiply-adds, at about NumPy's GEMM rate (a
dot-product form spends as long in horizontal sums as in products). The right operand is read
by rows, so the keys and values are transposed once per pair where a product sums over
features (q k^T, g v^T); everything else is read in place, the inputs passed as flat memory
with strides (`flat`), a row of which is known to be contiguous.
Nothing of size (queries x keys) leaves the pair: the backward kernel rebuilds the
probabilities from q and k (its `out` gives the softmax's correction term, sum(g * out)), keeps
the pair's in a scratch array, and forms the keys' and values' gradients from it after the
rows. A causal pair computes only the keys a block of rows may see, about half of the work.
docs/kernels.md has the kernels' speed (`python benchmarks/kernels.py native`) and the designs
they replaced.

Modules are generated per dtype; the scale and causality are arguments. Results are written
through views of the C-contiguous buffers the plan gives: the forward's laid out heads next to
features, the backward's as `core.ops.attention.unpack` lays them. Cached like the fused
kernels (`KernelCache`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tracegrad.compiler.kernels import rows
from tracegrad.compiler.kernels.cache import GeneratedKernel, named
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node

OPS = {P.attention: "output", P.attention_grad: "grads"}
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
def softmax(s, rows, n_keys, i0, causal, scale):
    """Row r of `s` (R x keys) becomes the probabilities of its scores times `scale` over the
    keys it sees, and 0 on to the last key the block's rows see, rounded up to a tile (what the
    products after it read); rows past the block's `rows` become 0 that far too. The max and
    the sum are loops of their own: a loop that also exps would not vectorize."""
    end = min(up(seen(i0 + rows - 1, n_keys, causal), W), s.shape[1])
    for r in range(R):
        seen_r = seen(i0 + r, n_keys, causal) if r < rows else 0
        x = s[r]
        if seen_r > 0:
            for j in range(seen_r):
                x[j] *= scale
            m = row_max(x, seen_r)
            for j in range(seen_r):
                x[j] = exp(x[j] - m)
            inv = T(1) / row_sum(x, seen_r)
            for j in range(seen_r):
                x[j] *= inv
        for j in range(seen_r, end):
            x[j] = 0


@_inner
def start(d, b, h, i):
    """Where row i of pair (b, h) starts in a flat input of dims d (shape, element strides)."""
    return b * d[4] + h * d[5] + i * d[6]


@_inner
def product(a, a0, aj, ar, b, b0, bj, j0, j1, m, out):
    """out[:R, :up(m, W)] = A[j0:j1, :R]^T @ B[j0:j1, :up(m, W)] (`tile`), two tiles at a time
    where it can (twice the sums in flight hide the multiply-adds' latency), else one (B's rows
    and out hold whole tiles). The tiles take their integers unsigned and their bounds as
    plain int64: a literal argument (0, 1) would compile them once more for each pattern."""
    u, i = np.uint64, np.int64
    a0, aj, ar, b0, bj, j0, j1 = u(a0), u(aj), u(ar), u(b0), u(bj), i(j0), i(j1)
    c, end = 0, up(m, W)
    while c + 2 * W <= end:
        wide_tile(a, a0, aj, ar, b, b0 + u(c), bj, j0, j1, out, i(c))
        c += 2 * W
    if c < end:
        tile(a, a0, aj, ar, b, b0 + u(c), bj, j0, j1, out, i(c))


@_inner
def rows_of(x, d, b, h):
    """Pair (b, h) of a flat input as the rows `product` reads as B (array, start, row
    stride): in place when its rows hold whole tiles, else a copy padded with zeros."""
    n, f = d[2], d[3]
    if f % W == 0:
        return x, start(d, b, h, 0), d[6]
    width = up(f, W)
    out = np.zeros(n * width, T)
    for i in range(n):
        at = start(d, b, h, i)
        out[i * width : i * width + f] = x[at : at + f]
    return out, 0, width


@_inner
def block_of(x, d, b, h, i0, rows, scratch):
    """Rows i0.. of pair (b, h) of a flat input as A (array, start, row stride) for `product`,
    in place; a last block of fewer than R rows is copied into `scratch` (R x features)."""
    f = d[3]
    if rows == R:
        return x, start(d, b, h, i0), d[6]
    scratch[:] = 0
    for r in range(rows):
        at = start(d, b, h, i0 + r)
        scratch[r * f : (r + 1) * f] = x[at : at + f]
    return scratch, 0, f


@_inner
def columns_of(x, d, b, h, width):
    """Pair (b, h) of a flat input transposed, (features x width) flat, zero past its rows:
    the keys (or values) as B where a product sums over features."""
    n, f = d[2], d[3]
    out = np.empty(f * width, T)
    for c in range(f):
        at = start(d, b, h, 0) + c
        for i in range(n):
            out[c * width + i] = x[at + i * d[6]]
        for i in range(n, width):
            out[c * width + i] = 0
    return out
'''

_FORWARD = """

@_inner
def pair(q, qd, k, kd, v, vd, scale, causal, out, od, b, h):
    n_rows, n_keys, f, e = qd[2], kd[2], qd[3], vd[3]
    keys_p = up(n_keys, W)
    kt = columns_of(k, kd, b, h, keys_p)
    vr, v0, vs = rows_of(v, vd, b, h)
    s, o = np.empty((R, keys_p), T), np.empty((R, up(e, W)), T)
    scratch = np.zeros(R * f, T)
    for i0 in range(0, n_rows, R):
        rows = min(R, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        qa, q0, qs = block_of(q, qd, b, h, i0, rows, scratch)
        product(qa, q0, 1, qs, kt, 0, keys_p, 0, f, n, s)  # q k^T
        softmax(s, rows, n_keys, i0, causal, scale)
        product(s.reshape(-1), 0, 1, keys_p, vr, v0, vs, 0, n, e, o)  # p v
        for r in range(rows):
            at = start(od, b, h, i0 + r)
            out[at : at + e] = o[r, :e]


@_outer
def kernel(q, qd, k, kd, v, vd, scale, causal, out, od):
    heads = qd[1]
    for p in prange(qd[0] * heads):
        pair(q, qd, k, kd, v, vd, scale, causal, out, od, p // heads, p % heads)
"""
_BACKWARD = """

@_inner
def pair(q, qd, k, kd, v, vd, o, od, g, gd, scale, causal, dq, dqd, dk, dkd, dv, dvd, b, h):
    n_rows, n_keys, f, e = qd[2], kd[2], qd[3], vd[3]
    rows_p, keys_p = up(n_rows, R), up(n_keys, W)
    kt, vt = columns_of(k, kd, b, h, keys_p), columns_of(v, vd, b, h, keys_p)
    kr, k0, ks = rows_of(k, kd, b, h)  # rows read in place where they can be
    qr, q0, qs = rows_of(q, qd, b, h)
    gr, g0, gs = rows_of(g, gd, b, h)
    p, ds = np.empty(rows_p * keys_p, T), np.empty(rows_p * keys_p, T)  # of the pair, whole; a
    # row is written as far as the block's tiles go, which covers all the keys loop reads
    s, dp = np.empty((R, keys_p), T), np.empty((R, keys_p), T)
    acc = np.empty((R, max(up(f, W), up(e, W))), T)
    q_scratch, g_scratch = np.zeros(R * f, T), np.zeros(R * e, T)
    for i0 in range(0, n_rows, R):
        rows = min(R, n_rows - i0)
        n = seen(i0 + rows - 1, n_keys, causal)
        qa, qa0, qas = block_of(q, qd, b, h, i0, rows, q_scratch)
        product(qa, qa0, 1, qas, kt, 0, keys_p, 0, f, n, s)  # q k^T
        softmax(s, rows, n_keys, i0, causal, scale)
        ga, ga0, gas = block_of(g, gd, b, h, i0, rows, g_scratch)
        product(ga, ga0, 1, gas, vt, 0, keys_p, 0, e, n, dp)  # g v^T
        end = up(n, W)  # whole tiles: s is 0 past a row's keys, and dp finite
        for r in range(rows):
            i = i0 + r
            gi, oi = start(gd, b, h, i), start(od, b, h, i)
            d = row_dot(g[gi : gi + e], o[oi : oi + e])
            pi, dsi = p[i * keys_p : (i + 1) * keys_p], ds[i * keys_p : (i + 1) * keys_p]
            sr, dpr = s[r], dp[r]
            for j0 in range(0, end, W):
                for j in range(j0, j0 + W):
                    pi[j] = sr[j]
                    dsi[j] = sr[j] * (dpr[j] - d) * scale  # d(scores) / d(q k^T)
        product(ds, i0 * keys_p, 1, keys_p, kr, k0, ks, 0, n, f, acc)  # ds k
        for r in range(rows):
            at = start(dqd, b, h, i0 + r)
            dq[at : at + f] = acc[r, :f]
    for c in range(0, n_keys, R):  # the keys' gradients, R keys at a time
        first = min(c, n_rows) if causal else 0  # no earlier row sees key c
        keys = min(R, n_keys - c)
        product(p, c, keys_p, 1, gr, g0, gs, first, n_rows, e, acc)  # p^T g
        for r in range(keys):
            at = start(dvd, b, h, c + r)
            dv[at : at + e] = acc[r, :e]
        product(ds, c, keys_p, 1, qr, q0, qs, first, n_rows, f, acc)  # ds^T q
        for r in range(keys):
            at = start(dkd, b, h, c + r)
            dk[at : at + f] = acc[r, :f]


@_outer
def kernel(q, qd, k, kd, v, vd, o, od, g, gd, scale, causal, dq, dqd, dk, dkd, dv, dvd):
    heads = qd[1]
    for p in prange(qd[0] * heads):
        pair(q, qd, k, kd, v, vd, o, od, g, gd, scale, causal, dq, dqd, dk, dkd, dv, dvd,
             p // heads, p % heads)
"""


ROWS = 4  # R: rows of a tile, each one SIMD register of W sums (two in a wide tile)


@functools.cache
def vector_bytes() -> int:
    """The width of the SIMD registers Numba compiles for (the host's, unless NUMBA_CPU_NAME
    names another CPU): 64 bytes with AVX-512, 32 with AVX, else 16. A tile's W is one
    register's lanes: tiles of 64-byte rows on an AVX2 host take twice the registers (all 16 of
    its for the sums alone) and spill (docs/kernels.md)."""
    import llvmlite.binding as llvm
    from numba.core import config

    if config.CPU_NAME in (None, "host"):
        features = {name for name, on in llvm.get_host_cpu_features().items() if on}
    else:
        features = {f[1:] for f in (config.CPU_FEATURES or "").split(",") if f[:1] == "+"}
    return 64 if "avx512f" in features else 32 if "avx" in features else 16


def tile_source(name: str, width: int) -> str:
    """`name`: out[:R, oc:oc + width] = A[j0:j1, :R]^T @ B[j0:j1, :width], where A[j, r] is
    a[a0 + j * aj + r * ar] (so A may be either way round) and row j of B starts at
    b[b0 + j * bj]. The R x width sums are written out as scalars for the SLP vectorizer to
    pack into registers of W lanes: each step loads a row of B and broadcasts R numbers of A
    into fused multiply-adds. Offsets and strides are unsigned (`product` converts them): a
    signed index costs a check for negative values (Python's wraparound) at every load."""
    sums = [[f"s{r}_{c}" for c in range(width)] for r in range(ROWS)]
    a, b = [f"x{r}" for r in range(ROWS)], [f"y{c}" for c in range(width)]
    u = "np.uint64"
    lines = ["@_inner", f"def {name}(a, a0, aj, ar, b, b0, bj, j0, j1, out, oc):"]
    lines += [f"    {', '.join(row)} = {', '.join(['T(0)'] * width)}" for row in sums]
    lines += [f"    rows = {', '.join(f'{u}({r}) * ar' for r in range(ROWS))}"]
    lines += ["    for j in range(j0, j1):", f"        pa, pb = a0 + {u}(j) * aj, b0 + {u}(j) * bj"]
    lines += [f"        {', '.join(a)} = {', '.join(f'a[pa + rows[{r}]]' for r in range(ROWS))}"]
    lines += [f"        {', '.join(b)} = {', '.join(f'b[pb + {u}({c})]' for c in range(width))}"]
    lines += [f"        {s} += {a[r]} * {b[c]}" for r, row in enumerate(sums)
              for c, s in enumerate(row)]  # fmt: skip
    for r, row in enumerate(sums):
        lines += [f"    o = out[{r}, oc:oc + {width}]"]
        lines += [f"    o[{c}] = {s}" for c, s in enumerate(row)]
    return "\n".join(lines) + "\n\n\n"


def generate_source(op: str, dtype: str) -> str:
    """The text of a kernel's module. Numba leaves LLVM's SLP vectorizer off (it miscompiled
    some integer code in older LLVMs); the module turns it on while its `kernel` compiles, which
    is when `tile` and the rest compile, and restores the setting after."""
    inputs = 3 if op == "output" else 5
    arrays = [f"{dtype}[::1]", "int64[::1]"] * inputs + [dtype, "boolean"]  # `flat` inputs
    arrays += [f"{dtype}[::1]", "int64[::1]"] * (1 if op == "output" else 3)  # `flat` too
    head = rows.head("Attention " + op, "tracegrad.compiler.kernels.attention", dtype,
                     f"void({', '.join(arrays)})")  # fmt: skip
    width = vector_bytes() // np.dtype(dtype).itemsize
    body = _FORWARD if op == "output" else _BACKWARD
    kernel_at = body.index("@_outer")
    compiled = "    " + body[kernel_at:].replace("\n", "\n    ").rstrip() + "\n"
    return (
        head
        + f"\nfrom numba.core import config\n\nR, W = {ROWS}, {width}\n\n\n"
        + tile_source("tile", width)
        + tile_source("wide_tile", 2 * width)
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


def flat(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A 4-D input as the kernels read it: its memory as a 1-D view from its first element, and
    its dims (shape, then the first three strides in elements). Rows must be contiguous: an
    input whose are not (or with negative or odd strides) is copied first. In one dimension a
    row's loads are known to be contiguous, so they run in SIMD lanes, and rows can be read in
    place (a 4-D view of unknown layout made every element a scalar load)."""
    item = a.itemsize
    if a.size and (a.shape[-1] > 1 and a.strides[-1] != item
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

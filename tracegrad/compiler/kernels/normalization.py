"""Layer-norm and batch-norm kernels (`core.ops.norm` has the NumPy versions and the contract).

Layer norm's forward and backward are each one pass over the rows.

Forward takes a row's mean and the variance of the centred row (two sums in SIMD lanes) and
writes the row normalized, scaled and shifted. Backward computes a row's statistics again,
sums dxhat and dxhat * xhat while adding the row's share of dweight and dbias into partial sums
of its thread's block of rows (summed at the end: the rows run in parallel without sharing an
accumulator), and writes dx in one more pass (`params=False`: x's gradient alone, without the
partial sums, where the weight and bias need none); xhat is recomputed where it is read rather
than kept in a scratch row. A few blocks of rows per thread, for balance. Modules are generated
per dtype; eps is an argument. Every array is declared C-contiguous (rows, weight and bias; the
launcher copies other layouts, the weight's few numbers included): indexed by an unknown
stride, even the weight's, the row loops stay out of SIMD lanes (docs/kernels.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import rows
from tracegrad.compiler.kernels.cache import GeneratedKernel, named
from tracegrad.compiler.kernels.fused import threaded
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node
from tracegrad.core.ops.norm import unpack

OPS = {P.layer_norm: "output", P.layer_norm_grad: "grads", P.batch_norm: "batch output",
       P.batch_norm_grad: "batch grads", P.batch_stats: "batch stats"}  # fmt: skip
MIN_SPATIAL = 16  # values of a channel per sample for a batch-norm kernel: fewer run strided
KERNEL_MIN = 0  # the NumPy versions are several passes and calls whatever the size (`lowering`)
DTYPES = ("float32", "float64")

_HELPERS = '''

@_reduce
def statistics(x, eps):
    """A row's mean and 1 / sqrt(var + eps), in two passes (the variance of the centred row)."""
    d = x.size
    total = T(0)
    for j in range(d):
        total += x[j]
    mean = total / d
    square = T(0)
    for j in range(d):
        t = x[j] - mean
        square += t * t
    return mean, T(1) / np.sqrt(square / d + T(eps))
'''

# The outer kernel of a row op writing only its rows: blocks of rows on the threads
_IN_BLOCKS = """

@_outer
def kernel({args}):
    n = x.shape[0]
    blocks = min(n, {blocks})
    for k in prange(blocks):
        rows({args}, k * n // blocks, (k + 1) * n // blocks)
"""

_FORWARD = """

@_reduce
def rows(x, weight, bias, eps, out, lo, hi):
    for i in range(lo, hi):
        xi, o = x[i], out[i]
        mean, rstd = statistics(xi, eps)
        for j in range(xi.size):
            o[j] = (xi[j] - mean) * rstd * weight[j] + bias[j]
""" + _IN_BLOCKS.replace("{args}", "x, weight, bias, eps, out")

# A row's backward: dx, and (`{partials}` kept) the row's share of dweight and dbias added to its
# block's partial sums; without them, x's gradient alone (`params=False`)
_BACKWARD_ROWS = """

@_reduce
def rows(x, weight, g, eps, dx{partials}, lo, hi):
    d = x.shape[1]
    for i in range(lo, hi):
        xi, gi, out = x[i], g[i], dx[i]
        mean, rstd = statistics(xi, eps)
        a = b = T(0)
        for j in range(d):
            xhat, dxhat = (xi[j] - mean) * rstd, gi[j] * weight[j]
{sums}            a += dxhat
            b += dxhat * xhat
        a, b = a / d, b / d
        for j in range(d):
            out[j] = (gi[j] * weight[j] - a - (xi[j] - mean) * rstd * b) * rstd
"""
_PARTIAL_SUMS = """            dw[j] += gi[j] * xhat
            db[j] += gi[j]
"""

_BACKWARD = (
    _BACKWARD_ROWS.replace("{partials}", ", dw, db").replace("{sums}", _PARTIAL_SUMS)
    + """

@_outer
def kernel(x, weight, g, eps, dx, dweight, dbias):
    n, d = x.shape
    blocks = min(n, {blocks})
    dw, db = np.zeros((blocks, d), T), np.zeros((blocks, d), T)
    for k in prange(blocks):
        rows(x, weight, g, eps, dx, dw[k], db[k], k * n // blocks, (k + 1) * n // blocks)
    for j in range(d):
        dweight[j] = 0
        dbias[j] = 0
    for k in range(blocks):
        for j in range(d):
            dweight[j] += dw[k, j]
            dbias[j] += db[k, j]
"""
)

_BACKWARD_DX = _BACKWARD_ROWS.replace("{partials}", "").replace("{sums}", "") + _IN_BLOCKS.replace(
    "{args}", "x, weight, g, eps, dx"
)

_MOMENTS_ONE_PASS = """

@_reduce
def moments(x, c):
    \"\"\"Channel c's mean and biased variance: float64 sums of x and x * x.\"\"\"
    total = square = 0.0
    for i in range(x.shape[0]):
        xi = x[i, c]
        for j in range(x.shape[2]):
            v = np.float64(xi[j])
            total += v
            square += v * v
    count = x.shape[0] * x.shape[2]
    mean = total / count
    return mean, max(square / count - mean * mean, 0.0)
"""

_MOMENTS_TWO_PASSES = """

@_reduce
def moments(x, c):
    \"\"\"Channel c's mean and biased variance (that of the centred values).\"\"\"
    total = square = 0.0
    for i in range(x.shape[0]):
        xi = x[i, c]
        for j in range(x.shape[2]):
            total += xi[j]
    count = x.shape[0] * x.shape[2]
    mean = total / count
    for i in range(x.shape[0]):
        xi = x[i, c]
        for j in range(x.shape[2]):
            t = xi[j] - mean
            square += t * t
    return mean, square / count
"""

_BATCH_FORWARD = """

@_outer
def kernel(x, weight, bias, eps, out):
    for c in prange(x.shape[1]):
        mean, var = moments(x, c)
        scale = weight[c] / np.sqrt(var + eps)
        shift, scale = T(bias[c] - mean * scale), T(scale)
        for i in range(x.shape[0]):
            xi, o = x[i, c], out[i, c]
            for j in range(x.shape[2]):
                o[j] = xi[j] * scale + shift
"""

_BATCH_BACKWARD = """

@_reduce
def sums(x, g, c, mean):
    \"\"\"Channel c's sums of g and of g * (x - mean).\"\"\"
    total = dot = 0.0
    for i in range(x.shape[0]):
        xi, gi = x[i, c], g[i, c]
        for j in range(x.shape[2]):
            total += gi[j]
            dot += gi[j] * (xi[j] - mean)
    return total, dot


@_outer
def kernel(x, weight, g, eps, dx, dweight, dbias):
    count = x.shape[0] * x.shape[2]
    for c in prange(x.shape[1]):
        mean, var = moments(x, c)
        rstd = 1.0 / np.sqrt(var + eps)
        total, dot = sums(x, g, c, mean)
        dbias[c], dweight[c] = total, dot * rstd
        k = weight[c] * rstd  # dx = k (g - mean(g) - (x - mean) rstd^2 mean(g (x - mean)))
        a, b = T(k * total / count), T(k * dot * rstd * rstd / count)
        k, mean = T(k), T(mean)
        for i in range(x.shape[0]):
            xi, gi, o = x[i, c], g[i, c], dx[i, c]
            for j in range(x.shape[2]):
                o[j] = k * gi[j] - a - (xi[j] - mean) * b
"""

_BATCH_STATS = """

@_outer
def kernel(x, out):
    for c in prange(x.shape[1]):
        out[0, c], out[1, c] = moments(x, c)
"""


def generate_source(op: str, dtype: str, parallel: bool = True) -> str:
    """The text of a kernel's module, its blocks of rows (or its channels) on several threads
    if `parallel`."""
    if op.startswith("batch"):
        return _batch_source(op, dtype, parallel)
    matrix, vector = f"{dtype}[:, ::1]", f"{dtype}[::1]"  # contiguous: loops run in SIMD
    if op == "output":  # x, weight, bias, eps, out
        arrays, body = [matrix, vector, vector, "float64", f"{dtype}[:, ::1]"], _FORWARD
    elif op == "dx":  # x, weight, g, eps, dx
        arrays, body = [matrix, vector, matrix, "float64", f"{dtype}[:, ::1]"], _BACKWARD_DX
    else:  # x, weight, g, eps, dx, dweight, dbias
        arrays = [matrix, vector, matrix, "float64", f"{dtype}[:, ::1]", *[f"{dtype}[::1]"] * 2]
        body = _BACKWARD
    # a few blocks of rows per thread, for balance (and few partial sums in backward)
    body = body.replace("{blocks}", str(4 * numba.config.NUMBA_NUM_THREADS))
    head = rows.head("Layer norm " + op, "tracegrad.compiler.kernels.normalization", dtype,
                     f"void({', '.join(arrays)})", parallel)  # fmt: skip
    return head + _HELPERS + body


def _batch_source(op: str, dtype: str, parallel: bool) -> str:
    cube, vector = f"{dtype}[:, :, ::1]", f"{dtype}[::1]"
    if op == "batch output":  # x, weight, bias, eps, out
        arrays, body = [cube, vector, vector, "float64", cube], _BATCH_FORWARD
    elif op == "batch grads":  # x, weight, g, eps, dx, dweight, dbias
        arrays, body = [cube, vector, cube, "float64", cube, vector, vector], _BATCH_BACKWARD
    else:  # x, out (2, C)
        arrays, body = [cube, f"{dtype}[:, ::1]"], _BATCH_STATS
    moments = _MOMENTS_ONE_PASS if dtype == "float32" else _MOMENTS_TWO_PASSES
    head = rows.head("Batch norm " + op[6:], "tracegrad.compiler.kernels.normalization", dtype,
                     f"void({', '.join(arrays)})", parallel)  # fmt: skip
    return head + moments + body


def module(node: Node) -> tuple[str, str]:
    """The name and text of a layer-norm or batch-norm node's kernel module; NotImplementedError
    for other dtypes and for batch norms of few values per sample. A constant operand (a group
    norm's unit weight) is passed like any array (`codegen` makes it one the kernel takes)."""
    dtype, x = node.outputs[0].dtype.name, node.inputs[0]
    if dtype not in DTYPES:
        raise NotImplementedError(f"normalization kernels for {dtype}")
    if OPS[node.prim].startswith("batch") and math.prod(x.shape[2:]) < MIN_SPATIAL:
        raise NotImplementedError(f"batch-norm kernels for input {x.shape}: few values per sample")
    op = "dx" if not node.attrs.get("params", True) else OPS[node.prim]
    return named("norm", generate_source(op, dtype, threaded(x.size)))


class LayerNormKernel(GeneratedKernel):
    """`kernel(x, weight, bias or g, out)` for one node, arrays seen as (rows, D)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.eps = float(node.attrs["eps"])
        self.backward = node.prim is P.layer_norm_grad
        self.params = node.attrs.get("params", True)  # False: x's gradient alone

    def __call__(self, x: np.ndarray, weight: np.ndarray, third: np.ndarray, out: np.ndarray):
        if not out.flags.c_contiguous:
            raise ValueError("layer-norm kernels write C-contiguous outputs")
        d = x.shape[-1]
        x2, weight = np.ascontiguousarray(x.reshape(-1, d)), np.ascontiguousarray(weight)
        if self.backward:
            g2 = np.ascontiguousarray(third.reshape(-1, d))
            if not self.params:
                self.compiled(x2, weight, g2, self.eps, out.reshape(-1, d))
                return
            dx, dw, db = unpack(out, x)
            self.compiled(x2, weight, g2, self.eps, dx.reshape(-1, d), dw, db)
        else:
            self.compiled(x2, weight, np.ascontiguousarray(third), self.eps, out.reshape(-1, d))


class BatchNormKernel(GeneratedKernel):
    """`kernel(x, [weight, bias or g,] out)` for one node, x seen as (N, C, S)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.eps = float(node.attrs.get("eps", 0.0))
        self.op = OPS[node.prim]

    def __call__(self, x: np.ndarray, *arrays: np.ndarray) -> None:
        *operands, out = arrays
        if not out.flags.c_contiguous:
            raise ValueError("batch-norm kernels write C-contiguous outputs")
        cube = x.shape[:2] + (-1,)
        x3 = np.ascontiguousarray(x.reshape(cube))
        if self.op == "batch stats":
            self.compiled(x3, out)
            return
        weight, third = (np.ascontiguousarray(a) for a in operands)
        if self.op == "batch output":
            self.compiled(x3, weight, third, self.eps, out.reshape(cube))
            return
        dx, dweight, dbias = unpack(out, x, x.shape[1])
        g3 = np.ascontiguousarray(third.reshape(cube))
        self.compiled(x3, weight, g3, self.eps, dx.reshape(cube), dweight, dbias)


def launcher(node: Node, compiled: Callable, path: Path) -> GeneratedKernel:
    if OPS[node.prim].startswith("batch"):
        return BatchNormKernel(node, compiled, path)
    return LayerNormKernel(node, compiled, path)

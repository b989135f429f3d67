"""Layer-norm kernels: forward and backward each one pass over the rows (`core.ops.norm` has the
NumPy versions and the contract).

Forward takes a row's mean and the variance of the centred row (two sums in SIMD lanes) and
writes the row normalized, scaled and shifted. Backward computes a row's statistics again,
sums dxhat and dxhat * xhat while adding the row's share of dweight and dbias into partial sums
of its thread's block of rows (summed at the end: the rows run in parallel without sharing an
accumulator), and writes dx in one more pass; xhat is recomputed where it is read rather than
kept in a scratch row. A few blocks of rows per thread, for balance. Modules are generated per
dtype; eps is an argument. Every array is declared C-contiguous (rows, weight and bias; the
launcher copies other layouts, the weight's few numbers included): indexed by an unknown
stride, even the weight's, the row loops stay out of SIMD lanes (docs/kernels.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import rows
from tracegrad.compiler.kernels.cache import GeneratedKernel, named
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node

OPS = {P.layer_norm: "output", P.layer_norm_grad: "grads"}
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

_FORWARD = """

@_reduce
def rows(x, weight, bias, eps, out, lo, hi):
    for i in range(lo, hi):
        xi, o = x[i], out[i]
        mean, rstd = statistics(xi, eps)
        for j in range(xi.size):
            o[j] = (xi[j] - mean) * rstd * weight[j] + bias[j]


@_outer
def kernel(x, weight, bias, eps, out):
    n = x.shape[0]
    blocks = min(n, {blocks})
    for k in prange(blocks):
        rows(x, weight, bias, eps, out, k * n // blocks, (k + 1) * n // blocks)
"""

_BACKWARD = """

@_reduce
def rows(x, weight, g, eps, dx, dw, db, lo, hi):
    d = x.shape[1]
    for i in range(lo, hi):
        xi, gi, out = x[i], g[i], dx[i]
        mean, rstd = statistics(xi, eps)
        a = b = T(0)
        for j in range(d):
            xhat, dxhat = (xi[j] - mean) * rstd, gi[j] * weight[j]
            dw[j] += gi[j] * xhat
            db[j] += gi[j]
            a += dxhat
            b += dxhat * xhat
        a, b = a / d, b / d
        for j in range(d):
            out[j] = (gi[j] * weight[j] - a - (xi[j] - mean) * rstd * b) * rstd


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


def generate_source(op: str, dtype: str) -> str:
    """The text of a kernel's module."""
    matrix, vector = f"{dtype}[:, ::1]", f"{dtype}[::1]"  # contiguous: loops run in SIMD
    if op == "output":  # x, weight, bias, eps, out
        arrays, body = [matrix, vector, vector, "float64", f"{dtype}[:, ::1]"], _FORWARD
    else:  # x, weight, g, eps, dx, dweight, dbias
        arrays = [matrix, vector, matrix, "float64", f"{dtype}[:, ::1]", *[f"{dtype}[::1]"] * 2]
        body = _BACKWARD
    # a few blocks of rows per thread, for balance (and few partial sums in backward)
    body = body.replace("{blocks}", str(4 * numba.config.NUMBA_NUM_THREADS))
    head = rows.head("Layer norm " + op, "tracegrad.compiler.kernels.normalization", dtype,
                     f"void({', '.join(arrays)})")  # fmt: skip
    return head + _HELPERS + body


def module(node: Node) -> tuple[str, str]:
    """The name and text of a layer-norm node's kernel module; NotImplementedError for other
    dtypes and for constant operands."""
    dtype = node.outputs[0].dtype.name
    if dtype not in DTYPES or any(v.const is not None for v in node.inputs):
        raise NotImplementedError(f"layer-norm kernels for {dtype} or constants")
    return named("norm", generate_source(OPS[node.prim], dtype))


class LayerNormKernel(GeneratedKernel):
    """`kernel(x, weight, bias or g, out)` for one node, arrays seen as (rows, D)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.eps = float(node.attrs["eps"])
        self.backward = node.prim is P.layer_norm_grad

    def __call__(self, x: np.ndarray, weight: np.ndarray, third: np.ndarray, out: np.ndarray):
        from tracegrad.core.ops.norm import unpack

        if not out.flags.c_contiguous:
            raise ValueError("layer-norm kernels write C-contiguous outputs")
        d = x.shape[-1]
        x2, weight = np.ascontiguousarray(x.reshape(-1, d)), np.ascontiguousarray(weight)
        if self.backward:
            dx, dw, db = unpack(out, x)
            g2 = np.ascontiguousarray(third.reshape(-1, d))
            self.compiled(x2, weight, g2, self.eps, dx.reshape(-1, d), dw, db)
        else:
            self.compiled(x2, weight, np.ascontiguousarray(third), self.eps, out.reshape(-1, d))


def launcher(node: Node, compiled: Callable, path: Path) -> LayerNormKernel:
    return LayerNormKernel(node, compiled, path)

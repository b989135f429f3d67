"""Layer-norm kernels: forward and backward each one pass over the rows (`tracegrad.normalization`
has the NumPy versions and the contract).

Forward reads a row once into the L1 cache, takes its mean and variance (two sums, in SIMD
lanes) and writes the normalized, scaled and shifted row. Both run a few blocks of rows per
thread, each block allocating its scratch rows once (allocated per row, they took a tenth of
the forward's time, and made it six times slower under tracemalloc, which sees Numba's
allocations: `profile()` showed it so). Backward computes a row's statistics
again, its dx in one more pass, and adds the row's share of dweight and dbias into partial sums
of its thread's block of rows, summed at the end: the rows run in parallel without sharing an
accumulator. Modules are generated per dtype; eps is an argument. Arrays are seen as (rows, D),
C-contiguous: a row of unknown stride kept the loops out of SIMD lanes (the GPT's rows: forward
0.34 and backward 0.63 ms against 0.28 and 0.55), so other layouts are copied first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad import primitives as P
from tracegrad.ir import Node

from . import rows
from .cache import GeneratedKernel, named

OPS = {P.layer_norm: "forward", P.layer_norm_grad: "backward"}
DTYPES = ("float32", "float64")

_HELPERS = '''

@_inner
def statistics(x, row, eps):
    """The row (contiguous) minus its mean, and 1 / sqrt(var + eps)."""
    for j in range(row.size):
        row[j] = x[j]
    mean = row_sum(row, row.size) / row.size
    for j in range(row.size):
        row[j] -= mean
    return T(1) / np.sqrt(row_dot(row, row) / row.size + T(eps))
'''

_FORWARD = """

@_inner
def rows(x, weight, bias, eps, out, lo, hi):
    row = np.empty(x.shape[1], T)
    for i in range(lo, hi):
        rstd = statistics(x[i], row, eps)
        o = out[i]
        for j in range(row.size):
            o[j] = row[j] * rstd * weight[j] + bias[j]


@_outer
def kernel(x, weight, bias, eps, out):
    n = x.shape[0]
    blocks = min(n, {blocks})
    for k in prange(blocks):
        rows(x, weight, bias, eps, out, k * n // blocks, (k + 1) * n // blocks)
"""

_BACKWARD = """

@_inner
def rows(x, weight, g, eps, dx, dw, db, lo, hi):
    d = x.shape[1]
    row, dxhat = np.empty(d, T), np.empty(d, T)
    for i in range(lo, hi):
        rstd = statistics(x[i], row, eps)
        gi = g[i]
        for j in range(d):
            row[j] *= rstd  # xhat
            dxhat[j] = gi[j] * weight[j]
            dw[j] += gi[j] * row[j]
            db[j] += gi[j]
        a, b = row_sum(dxhat, d) / d, row_dot(dxhat, row) / d
        out = dx[i]
        for j in range(d):
            out[j] = (dxhat[j] - a - row[j] * b) * rstd


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
    matrix, vector = f"{dtype}[:, ::1]", f"{dtype}[:]"  # rows contiguous: loops run in SIMD
    if op == "forward":  # x, weight, bias, eps, out
        arrays, body = [matrix, vector, vector, "float64", f"{dtype}[:, ::1]"], _FORWARD
    else:  # x, weight, g, eps, dx, dweight, dbias
        arrays = [matrix, vector, matrix, "float64", f"{dtype}[:, ::1]", *[f"{dtype}[::1]"] * 2]
        body = _BACKWARD
    # a few blocks of rows per thread, for balance, each with its scratch rows allocated once
    body = body.replace("{blocks}", str(4 * numba.config.NUMBA_NUM_THREADS))
    head = rows.head("Layer norm " + op, "tracegrad.kernels.normalization", dtype,
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
        from tracegrad.normalization import unpack

        if not out.flags.c_contiguous:
            raise ValueError("layer-norm kernels write C-contiguous outputs")
        d = x.shape[-1]
        x2 = np.ascontiguousarray(x.reshape(-1, d))
        third2 = np.ascontiguousarray(third.reshape(-1, d)) if self.backward else third
        if self.backward:
            dx, dw, db = unpack(out, x)
            self.compiled(x2, weight, third2, self.eps, dx.reshape(-1, d), dw, db)
        else:
            self.compiled(x2, weight, third2, self.eps, out.reshape(-1, d))


def launcher(node: Node, compiled: Callable, path: Path) -> LayerNormKernel:
    return LayerNormKernel(node, compiled, path)

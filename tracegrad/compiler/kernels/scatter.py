"""The scatter-add of rows: `out[rows[k]] += g[k]`, an embedding's gradient (`scatter_add` with
the template ("@",) and integer indices), one serial loop over the rows: the NumPy version in
`core.ops.views` (a stable sort and `np.add.reduceat`) makes several passes over the rows. Same
contract: negative indices count from the end, others out of range raise IndexError."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tracegrad.compiler.kernels.cache import GeneratedKernel, in_c_order, named
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node

OPS = {P.scatter_add: "rows"}
DTYPES = ("float32", "float64")
INDICES = ("int32", "int64")

_SOURCE = '''"""Scatter-add of rows ({dtype}, {index} indices), by compiler.kernels.scatter."""

from numba import njit


@njit("int64({dtype}[:, ::1], {index}[::1], {dtype}[:, ::1])", cache=True)
def kernel(g, rows, out):
    """out = 0, then out[rows[k]] += g[k]; -1, or the first k whose index is out of range."""
    n = out.shape[0]
    out[:] = 0
    for k in range(rows.shape[0]):
        i = rows[k] + n if rows[k] < 0 else rows[k]
        if i < 0 or i >= n:
            return k
        dst, src = out[i], g[k]
        for j in range(out.shape[1]):
            dst[j] += src[j]
    return -1
'''


def module(node: Node) -> tuple[str, str]:
    """The name and text of a row scatter-add's kernel module; NotImplementedError for other
    templates, dtypes and index types."""
    g, *idx = node.inputs
    dtype, shape = node.outputs[0].dtype.name, node.attrs["shape"]
    rows = node.attrs["template"] == ("@",) and len(idx) == 1
    if not (rows and dtype in DTYPES and g.dtype.name == dtype
            and idx[0].dtype.name in INDICES and g.shape == idx[0].shape + shape[1:]):  # fmt: skip
        raise NotImplementedError(f"no scatter-add kernel for {[v.type_str for v in node.inputs]}")
    return named("scatter", _SOURCE.format(dtype=dtype, index=idx[0].dtype.name))


class ScatterKernel(GeneratedKernel):
    """`kernel(g, rows, out)`: the arrays seen as (rows, row), (rows,) and (n, row)."""

    def __call__(self, g: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError(f"scatter-add kernels write C-contiguous results, not {out.strides}")
        rows = in_c_order(rows.reshape(-1))
        bad = self.compiled(in_c_order(g).reshape(rows.size, -1), rows,
                            out.reshape(out.shape[0], -1))  # fmt: skip
        if bad >= 0:
            raise IndexError(f"index {int(rows[bad])} is out of bounds for axis 0 with size "
                             f"{out.shape[0]}")  # fmt: skip


def launcher(node: Node, compiled: Callable, path: Path) -> ScatterKernel:
    return ScatterKernel(compiled, path)

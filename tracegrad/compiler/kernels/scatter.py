"""The scatter-add along one axis: `out[..., index[k], ...] += g[..., k, ...]` (`scatter_add`
with full slices before one integer index array): an embedding's gradient (rows, axis 0) and a
gather's along a later axis (an interpolation's taps). np.add.at, the NumPy version's way
there, takes about 4 ns an element and one thread; this kernel loops over the index once per
row before the axis, the rows shared between threads when there are many (on all of them only
while the team is awake below PARALLEL_MIN elements, `team`). Same contract: negative indices
count from the end, others out of range raise IndexError (before anything is written)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import team
from tracegrad.compiler.kernels.cache import GeneratedKernel, in_c_order, named
from tracegrad.compiler.kernels.fused import threaded
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node

OPS = {P.scatter_add: "along an axis"}
DTYPES = ("float32", "float64")
INDICES = ("int32", "int64")

_SOURCE = '''"""Scatter-add along an axis ({dtype}, {index}), by compiler.kernels.scatter."""

from numba import njit, prange


@njit(cache=True)
def add_rows(g, index, out, first, last):
    """out[o] = 0, then out[o, index[k]] += g[o, k], for o in [first, last)."""
    n = out.shape[1]
    for o in range(first, last):
        dst, src = out[o], g[o]
        dst[:, :] = 0
        for k in range(index.shape[0]):
            i = index[k] + n if index[k] < 0 else index[k]
            to, of = dst[i], src[k]
            for j in range(to.shape[0]):
                to[j] += of[j]


@njit("int64({dtype}[:, :, ::1], {index}[::1], {dtype}[:, :, ::1], int64)", parallel=True,
      cache=True)
def kernel(g, index, out, threads):
    """out = 0, then out[o, index[k]] += g[o, k]: -1; or, writing nothing, the first k whose
    index is out of range. `threads` shares of the rows o (1: this thread alone)."""
    n = out.shape[1]
    for k in range(index.shape[0]):
        if index[k] < -n or index[k] >= n:
            return k
    rows = out.shape[0]
    if threads == 1:
        add_rows(g, index, out, 0, rows)
        return -1
    for part in prange(threads):
        add_rows(g, index, out, part * rows // threads, (part + 1) * rows // threads)
    return -1
'''


def _axis(node: Node) -> int | None:
    """The axis a scatter-add's one index array runs along, all axes before it whole; else None."""
    template, shape = node.attrs["template"], node.attrs["shape"]
    if template.count("@") != 1 or len(template) > len(shape):
        return None
    axis = template.index("@")
    whole = all(t == slice(None) for k, t in enumerate(template) if k != axis)
    return axis if whole else None


def module(node: Node) -> tuple[str, str]:
    """The name and text of a scatter-add's kernel module; NotImplementedError for other
    templates, dtypes and index types."""
    g, *idx = node.inputs
    dtype, shape, axis = node.outputs[0].dtype.name, node.attrs["shape"], _axis(node)
    if not (axis is not None and len(idx) == 1 and dtype in DTYPES and g.dtype.name == dtype
            and idx[0].dtype.name in INDICES
            and g.shape == shape[:axis] + idx[0].shape + shape[axis + 1 :]):  # fmt: skip
        raise NotImplementedError(f"no scatter-add kernel for {[v.type_str for v in node.inputs]}")
    return named("scatter", _SOURCE.format(dtype=dtype, index=idx[0].dtype.name))


class ScatterKernel(GeneratedKernel):
    """`kernel(g, index, out)`: the arrays seen as (rows, index.size, cells), (index.size,) and
    (rows, n, cells), where `rows` are the axes before the index's and `cells` those after."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.axis, shape = _axis(node), node.attrs["shape"]
        self.rows, self.cells = math.prod(shape[: self.axis]), math.prod(shape[self.axis + 1 :])
        self.threads = min(numba.get_num_threads(), self.rows)
        self.always = threaded(math.prod(node.inputs[0].shape))  # else while awake

    def __call__(self, g: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError(f"scatter-add kernels write C-contiguous results, not {out.strides}")
        index = in_c_order(index.reshape(-1))
        threads = self.threads if self.always or team.awake() else 1
        bad = self.compiled(in_c_order(g).reshape(self.rows, index.size, self.cells), index,
                            out.reshape(self.rows, out.shape[self.axis], self.cells),
                            threads)  # fmt: skip
        if threads > 1:
            team.finished()
        if bad >= 0:
            raise IndexError(f"index {int(index[bad])} is out of bounds for axis {self.axis} "
                             f"with size {out.shape[self.axis]}")  # fmt: skip


def launcher(node: Node, compiled: Callable, path: Path) -> ScatterKernel:
    return ScatterKernel(node, compiled, path)

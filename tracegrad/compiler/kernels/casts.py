"""Casts between float32 and bfloat16 (`astype`), one pass over the bits: every op of bfloat16
operands widens them to float32 and rounds its result back (core/bfloat16), and NumPy's way
there is five to seven passes over the array. Rounding is to nearest, ties to even, and every
NaN becomes the quiet NaN 0x7FC0, as `bfloat16.to_bfloat16` (and PyTorch) round."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import team
from tracegrad.compiler.kernels.cache import GeneratedKernel, in_c_order, named
from tracegrad.compiler.kernels.fused import GENERATOR_VERSION, as_bits, threaded
from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.ir import Node

OPS = {P.astype: "float32 to and from bfloat16"}

_SOURCE = '''"""float32 {direction} bfloat16, by compiler.kernels.casts."""

# scalar math {version}

from numba import njit, prange

from tracegrad.compiler.kernels.scalar import {helper}


@njit(cache=True)
def part(x, out, first, last):
    for i in range(first, last):
        out[i] = {helper}(x[i])


@njit("void({source}[::1], {target}[::1], int64)", parallel=True, cache=True)
def kernel(x, out, threads):
    """out = x cast, in `threads` shares."""
    n = x.shape[0]
    for k in prange(threads):
        part(x, out, k * n // threads, (k + 1) * n // threads)
'''


def _rounds(node: Node) -> bool:
    """float32 to bfloat16 (True) or back (False); NotImplementedError for other casts."""
    source, target = node.inputs[0].dtype, node.outputs[0].dtype
    if (source, target) == (np.float32, BFLOAT16):
        return True
    if (source, target) == (BFLOAT16, np.float32):
        return False
    raise NotImplementedError(f"no cast kernel from {source} to {target}")


def module(node: Node) -> tuple[str, str]:
    """The cast's kernel: each element through the scalar helper fused kernels use too."""
    if _rounds(node):
        return named("casts", _SOURCE.format(direction="to", helper="bfloat16_bits",
                                             source="float32", target="uint16",
                                             version=GENERATOR_VERSION))  # fmt: skip
    return named("casts", _SOURCE.format(direction="from", helper="bfloat16_widened",
                                         source="uint16", target="float32",
                                         version=GENERATOR_VERSION))  # fmt: skip


class CastKernel(GeneratedKernel):
    """`kernel(x, out)`: `out` (C-contiguous) = `x` cast, bfloat16 through its bits (uint16)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.size = math.prod(node.outputs[0].shape)
        self.threads = numba.get_num_threads()
        self.always = threaded(self.size)  # else while awake

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError(f"cast kernels write C-contiguous results, not {out.strides}")
        source, target = as_bits(in_c_order(x).reshape(-1)), as_bits(out.reshape(-1))
        threads = self.threads if self.always or team.awake() else 1
        self.compiled(source, target, threads)
        if threads > 1:
            team.finished()


def launcher(node: Node, compiled: Callable, path: Path) -> CastKernel:
    return CastKernel(node, compiled, path)

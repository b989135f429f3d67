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
from tracegrad.compiler.kernels.fused import threaded
from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.ir import Node

OPS = {P.astype: "float32 to and from bfloat16"}

_SOURCE = '''"""float32 {direction} bfloat16, by compiler.kernels.casts."""

import numpy as np
from numba import njit, prange


@njit(cache=True)
def part(bits, out, first, last):
    for i in range(first, last):
        b = bits[i]
        {body}


@njit("void({source}[::1], {target}[::1], int64)", parallel=True, cache=True)
def kernel(bits, out, threads):
    """out = bits cast, in `threads` shares."""
    n = bits.shape[0]
    for k in prange(threads):
        part(bits, out, k * n // threads, (k + 1) * n // threads)
'''
_ROUND = """if (b & 0x7FFFFFFF) > 0x7F800000:  # NaN
            out[i] = 0x7FC0
        else:
            out[i] = (b + 0x7FFF + ((b >> 16) & 1)) >> 16"""
_WIDEN = "out[i] = np.uint32(b) << 16"


def _rounds(node: Node) -> bool:
    """float32 to bfloat16 (True) or back (False); NotImplementedError for other casts."""
    source, target = node.inputs[0].dtype, node.outputs[0].dtype
    if (source, target) == (np.float32, BFLOAT16):
        return True
    if (source, target) == (BFLOAT16, np.float32):
        return False
    raise NotImplementedError(f"no cast kernel from {source} to {target}")


def module(node: Node) -> tuple[str, str]:
    if _rounds(node):
        return named("casts", _SOURCE.format(direction="to", body=_ROUND, source="uint32",
                                             target="uint16"))  # fmt: skip
    return named("casts", _SOURCE.format(direction="from", body=_WIDEN, source="uint16",
                                         target="uint32"))  # fmt: skip


class CastKernel(GeneratedKernel):
    """`kernel(x, out)`: `out` (C-contiguous) = `x` cast, through each one's bits as integers."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.rounds = _rounds(node)
        self.size = math.prod(node.outputs[0].shape)
        self.threads = numba.get_num_threads()
        self.always = threaded(self.size)  # else while awake

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError(f"cast kernels write C-contiguous results, not {out.strides}")
        source = in_c_order(x).reshape(-1).view(np.uint32 if self.rounds else np.uint16)
        target = out.reshape(-1).view(np.uint16 if self.rounds else np.uint32)
        threads = self.threads if self.always or team.awake() else 1
        self.compiled(source, target, threads)
        if threads > 1:
            team.finished()


def launcher(node: Node, compiled: Callable, path: Path) -> CastKernel:
    return CastKernel(node, compiled, path)

"""Kernels of their own for ops the fused-kernel generator cannot express, by primitive: the
Numba backend (`codegen.native_kernels`) runs a node of such an op (`Primitive.native`) with
its kernel here, or with the op's NumPy implementation if no kernel handles it.

A builder takes the node (and `compile=False` to only decide) and returns a launcher
`kernel(*input_arrays, *output_arrays)` that writes the outputs in place, or raises
NotImplementedError for a node it does not handle (a dtype, say)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tracegrad import primitives as P
from tracegrad.ir import Node

from . import pool

BUILDERS: dict[P.Primitive, Callable[..., Callable | None]] = dict.fromkeys(pool.OPS, pool.build)


def compile_native(
    nodes: Sequence[Node], compile: bool = True
) -> list[tuple[bool, Callable | None]]:
    """Per node (True, kernel), or (False, None) if no kernel handles it; `compile=False` only
    decides (kernels are None)."""
    found = []
    for n in nodes:
        try:
            if n.prim not in BUILDERS:
                raise NotImplementedError(f"no kernel of its own for {n.op}")
            found.append((True, BUILDERS[n.prim](n, compile=compile)))
        except NotImplementedError:
            found.append((False, None))
    return found

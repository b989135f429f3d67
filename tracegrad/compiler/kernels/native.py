"""Kernels of their own for ops the fused-kernel generator cannot express, by primitive: the
one registry of them (`GENERATORS`, from each generator's `OPS`). The Numba backend
(`lowering.lower`) runs a node of such an op with its kernel here, or with the op's NumPy
implementation if no kernel handles it (a dtype, say).

A generator (a module, such as `pool`) has `module(node)`, the name and text of the kernel's
module (NotImplementedError for a node it does not handle: a dtype, say), and
`launcher(node, compiled, path)`, which returns `kernel(*input_arrays, *output_arrays)` writing
the outputs in place. `lowering.lower` loads a plan's modules in one round with its fused
kernels' (`compile_groups(also=...)`), so that new ones compile in one set of children."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from tracegrad.compiler.kernels import (
    attention,
    casts,
    conv,
    cross_entropy,
    gemm,
    normalization,
    pool,
    recurrent,
    scatter,
)
from tracegrad.compiler.kernels.cache import default_cache
from tracegrad.core.ir import Node

_GENERATORS = (pool, attention, normalization, gemm, conv, scatter, cross_entropy, recurrent, casts)
GENERATORS = {op: gen for gen in _GENERATORS for op in gen.OPS}


def modules(nodes: Sequence[Node]) -> dict[Node, tuple[str, str]]:
    """The name and text of each handled node's kernel module."""
    found = {}
    for n in nodes:
        try:
            if n.prim not in GENERATORS:
                raise NotImplementedError(f"no kernel of its own for {n.op}")
            found[n] = GENERATORS[n.prim].module(n)
        except NotImplementedError:
            pass
    return found


class Planned(NamedTuple):
    """What a node that will run a kernel of its own maps to before its kernel is compiled
    (`lowering.lower(compile=False)`): the bytes of temporaries the kernel will hold, if its
    generator says (`scratch(node)`), for the memory plan; else None (its op's count)."""

    scratch: int | None


def planned(node: Node) -> Planned:
    own = getattr(GENERATORS[node.prim], "scratch", None)
    return Planned(own(node) if own is not None else None)


def launchers(modules: dict[Node, tuple[str, str]]) -> dict[Node, Callable]:
    """The kernel of each node of `modules`, once they are loaded (`KernelCache.load_all`)."""
    cache = default_cache()
    kernels = {}
    for n, (name, text) in modules.items():
        compiled = cache.load(name, lambda text=text: text)  # in memory once loaded
        kernels[n] = GENERATORS[n.prim].launcher(n, compiled, cache.path(name))
    return kernels


def compile_native(nodes: Sequence[Node]) -> list[tuple[bool, Callable | None]]:
    """Per node (True, kernel), or (False, None) if no kernel handles it. (A plan's go through
    `lowering.lower`, with its fused kernels.)"""
    found = modules(nodes)
    default_cache().load_all(dict(found.values()))
    kernels = launchers(found)
    return [(n in kernels, kernels.get(n)) for n in nodes]

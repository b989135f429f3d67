"""Kernels of their own for ops the fused-kernel generator cannot express, by primitive: the
Numba backend (`codegen.native_kernels`) runs a node of such an op (`Primitive.native`) with
its kernel here, or with the op's NumPy implementation if no kernel handles it.

A generator (a module, such as `pool`) has `module(node)`, the name and text of the kernel's
module (NotImplementedError for a node it does not handle: a dtype, say), and
`launcher(node, compiled, path)`, which returns `kernel(*input_arrays, *output_arrays)` writing
the outputs in place. The modules go through the kernel cache together, like fused kernels."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tracegrad.ir import Node

from . import pool
from .cache import default_cache

GENERATORS = dict.fromkeys(pool.OPS, pool)


def compile_native(
    nodes: Sequence[Node], compile: bool = True, background: bool = False
) -> list[tuple[bool, Callable | None]]:
    """Per node (True, kernel), or (False, None) if no kernel handles it; `compile=False` only
    decides (kernels are None); `background=True` compiles new ones in child processes."""
    modules: dict[Node, tuple[str, str]] = {}
    for n in nodes:
        try:
            if n.prim not in GENERATORS:
                raise NotImplementedError(f"no kernel of its own for {n.op}")
            modules[n] = GENERATORS[n.prim].module(n)
        except NotImplementedError:
            pass
    if not compile:
        return [(n in modules, None) for n in nodes]
    cache = default_cache()
    cache.load_all(dict(modules.values()), background=background)
    found: list[tuple[bool, Callable | None]] = []
    for n in nodes:
        if n not in modules:
            found.append((False, None))
            continue
        name, text = modules[n]
        kernel = cache.load(name, lambda text=text: text)  # loaded by load_all: from memory
        found.append((True, GENERATORS[n.prim].launcher(n, kernel, cache.path(name))))
    return found

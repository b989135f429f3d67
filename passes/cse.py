"""Common-subexpression elimination: one node per (op, inputs, attributes).

An elementwise node or a reduction outside forward is not merged into a forward one: backward
would then read the forward result, keeping it alive from forward to backward, where
recomputing it costs a few flops in a kernel that runs anyway (remat's reasoning). It would
also be a different computation from the one backward sees: remat may rebuild the forward
input in backward, by a kernel whose float32 math differs in the last bits, and max's VJP
compares the input with its maximum (a merged maximum matched no element: 0 / 0)."""

from __future__ import annotations

from tracegrad.core.ir import Graph, Node, Value, common_module
from tracegrad.core.vocabulary import Phase

from .base import PassStats, stats, substitute


def cse(graph: Graph) -> tuple[Graph, PassStats]:
    seen: dict[tuple, int] = {}  # key -> position in kept
    alias: dict[Value, Value] = {}
    kept: list[Node] = []
    for n in graph.nodes:
        inputs = tuple(_key(alias.get(v, v)) for v in n.inputs)
        key = (n.prim, inputs, repr(sorted(n.attrs.items())), _region(n))
        if key in seen:
            first = kept[seen[key]]
            alias.update(zip(n.outputs, first.outputs, strict=True))
            if first.module != n.module:  # one node serves both modules: it belongs to both
                kept[seen[key]] = first.replace(module=common_module((first.module, n.module)))
        else:
            seen[key] = len(kept)
            kept.append(n)
    after = substitute(Graph(graph.inputs, kept, graph.outputs), alias)
    return after, stats("cse", graph, after)


def _region(n: Node) -> bool | None:
    """Single-pass nodes (`Primitive.single_pass`) merge only within forward or within the
    rest; others (a matrix product) merge anywhere."""
    return n.phase is Phase.FORWARD if n.prim.single_pass else None


def _key(v: Value) -> object:
    """Equal small constants are the same operand; everything else is itself."""
    if v.const is not None and v.const.size <= 4096:
        return ("const", v.shape, v.dtype.str, v.const.tobytes())
    return id(v)

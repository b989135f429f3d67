"""Common-subexpression elimination: one node per (op, inputs, attributes)."""

from __future__ import annotations

from tracegrad.ir import Graph, Value

from .base import PassStats, stats, substitute


def cse(graph: Graph) -> tuple[Graph, PassStats]:
    seen: dict[tuple, list[Value]] = {}
    alias: dict[Value, Value] = {}
    kept = []
    for n in graph.nodes:
        inputs = tuple(_key(alias.get(v, v)) for v in n.inputs)
        key = (n.op, inputs, repr(sorted(n.attrs.items())))
        if key in seen:
            alias.update(zip(n.outputs, seen[key], strict=True))
        else:
            seen[key] = n.outputs
            kept.append(n)
    after = substitute(Graph(graph.inputs, kept, graph.outputs), alias)
    return after, stats("cse", graph, after)


def _key(v: Value) -> object:
    """Equal small constants are the same operand; everything else is itself."""
    if v.const is not None and v.const.size <= 4096:
        return ("const", v.shape, v.dtype.str, v.const.tobytes())
    return id(v)

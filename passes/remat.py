"""Rematerialization: backward recomputes cheap elementwise forward values from the values it saves
anyway, instead of keeping them alive from forward to backward (AOTAutograd's idea, with a rule
simple enough to state: recompute `v` only if every value it is recomputed from is already saved,
so the saved set never grows)."""

from __future__ import annotations

from tracegrad.ir import Graph, Node, Value
from tracegrad.primitives import PRIMITIVES

from .base import PassStats

MAX_CHAIN = 16  # longest elementwise chain worth recomputing for one value


def _cheap(n: Node | None) -> bool:
    return n is not None and n.phase == "forward" and PRIMITIVES[n.op].scalar is not None


def saved_values(graph: Graph) -> list[Value]:
    """Forward results (and graph inputs) that backward or update nodes read: the residuals."""
    forward = {v for n in graph.nodes if n.phase == "forward" for v in n.outputs}
    seen: dict[Value, None] = {}
    for n in graph.nodes:
        if n.phase != "forward":
            seen.update((v, None) for v in n.inputs if v in forward)
    return list(seen)


def _chain(v: Value, producers: dict[Value, Node]) -> tuple[list[Node], set[Value]] | None:
    """The cheap nodes that recompute `v`, in order, and the values they start from."""
    nodes: list[Node] = []
    anchors: set[Value] = set()
    visited: set[Value] = set()

    def walk(x: Value) -> None:
        if x in visited:
            return
        visited.add(x)
        n = producers.get(x)
        if not _cheap(n):
            anchors.add(x)
            return
        for i in n.inputs:
            walk(i)
        nodes.append(n)

    walk(v)
    return (nodes, anchors) if 0 < len(nodes) <= MAX_CHAIN else None


def rematerialize(graph: Graph) -> tuple[Graph, PassStats]:
    producers = graph.producers()
    saved = saved_values(graph)
    keep = {v for v in saved if not _cheap(producers.get(v))}
    plans = {}
    for v in saved:
        chain = _chain(v, producers) if v not in keep else None
        if chain and all(a in keep or a.const is not None or a in graph.inputs for a in chain[1]):
            plans[v] = chain[0]
    clones: dict[Value, Value] = {}
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.phase != "forward":
            for v in n.inputs:
                for c in plans.get(v, ()):
                    if c.outputs[0] not in clones:
                        nodes.append(_clone(c, clones))
            n = Node(n.op, [clones.get(v, v) for v in n.inputs], n.outputs, n.attrs, n.source,
                     n.phase)  # fmt: skip
        nodes.append(n)
    after = Graph(graph.inputs, nodes, graph.outputs)
    freed = sum(v.nbytes for v in plans)
    note = f"{len(plans)} saved values recomputed in backward"
    return after, PassStats("remat", len(graph.nodes), len(nodes), freed, note)


def _clone(n: Node, clones: dict[Value, Value]) -> Node:
    outs = [Value(v.shape, v.dtype) for v in n.outputs]
    clones.update(zip(n.outputs, outs, strict=True))
    ins = [clones.get(v, v) for v in n.inputs]
    return Node(n.op, ins, outs, n.attrs, n.source, "recompute")

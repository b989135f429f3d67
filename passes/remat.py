"""Rematerialization: backward recomputes cheap elementwise forward values from values it saves
anyway, instead of keeping them alive from forward to backward (AOTAutograd's idea, with a rule
simple enough to state). Residuals are decided in forward order: one is recomputed if a chain of
at most MAX_CHAIN elementwise nodes rebuilds it from residuals already kept, inputs and constants;
otherwise it is kept. So the saved set never grows, and an MLP layer keeps only its
pre-activation."""

from __future__ import annotations

from tracegrad.ir import Graph, Node, Value

from .base import PassStats

MAX_CHAIN = 16  # longest elementwise chain worth recomputing for one value


def _cheap(n: Node | None) -> bool:
    return n is not None and n.phase == "forward" and n.prim.kind == "elementwise"


def saved_values(graph: Graph) -> list[Value]:
    """Forward results that backward or update nodes read: the residuals."""
    return graph.residuals()


def _chain(v: Value, producers: dict[Value, Node], available: set[Value]) -> list[Node] | None:
    """The cheap nodes that rebuild `v` from `available` values, in order; None if there are
    none or too many."""
    nodes: list[Node] = []
    visited: set[Value] = set()

    def walk(x: Value) -> bool:
        if x in visited or x in available or x.const is not None:
            return True
        visited.add(x)
        n = producers.get(x)
        if not _cheap(n) or len(nodes) >= MAX_CHAIN or not all(walk(i) for i in n.inputs):
            return False
        nodes.append(n)
        return True

    return nodes if walk(v) and nodes else None


def rematerialize(graph: Graph) -> tuple[Graph, PassStats]:
    producers = graph.producers()
    saved = saved_values(graph)
    order = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    kept = set(graph.inputs)
    plans = {}
    for v in sorted(saved, key=order.__getitem__):
        chain = _chain(v, producers, kept) if _cheap(producers[v]) else None
        if chain is None:
            kept.add(v)
        else:
            plans[v] = chain
    clones: dict[Value, Value] = {}
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.phase != "forward":
            for v in n.inputs:
                for c in plans.get(v, ()):
                    if c.outputs[0] not in clones:
                        nodes.append(_clone(c, clones))
            n = Node(n.prim, [clones.get(v, v) for v in n.inputs], n.outputs, n.attrs, n.source,
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
    return Node(n.prim, ins, outs, n.attrs, n.source, "recompute")

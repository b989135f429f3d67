"""What every pass shares: its stats record and the list of ops that make views, not buffers."""

from __future__ import annotations

from dataclasses import dataclass

from tracegrad.ir import Graph, Node, Value

# Ops whose NumPy result aliases (part of) their first input instead of owning a new buffer.
VIEW_OPS = frozenset({"reshape", "transpose", "broadcast_to"})


@dataclass
class PassStats:
    """What one pass did, for `step.report()`."""

    name: str
    nodes_before: int
    nodes_after: int
    bytes_saved: int = 0
    note: str = ""


def is_view(node: Node) -> bool:
    return node.op in VIEW_OPS or (node.op == "getitem" and len(node.inputs) == 1)


def nbytes(values: list[Value]) -> int:
    return sum(v.nbytes for v in values)


def stats(name: str, before: Graph, after: Graph, note: str = "") -> PassStats:
    """Stats for a pass that removed nodes: the bytes of the results it no longer computes
    (views own no bytes; a rewrite that adds nodes shows a negative figure)."""

    def allocated(g: Graph) -> int:
        return sum(nbytes(n.outputs) for n in g.nodes if not is_view(n))

    saved = allocated(before) - allocated(after)
    return PassStats(name, len(before.nodes), len(after.nodes), saved, note)


def substitute(graph: Graph, alias: dict[Value, Value]) -> Graph:
    """Read `alias[v]` wherever `v` was read (following chains), keeping nodes as they are."""

    def resolve(v: Value) -> Value:
        while v in alias:
            v = alias[v]
        return v

    nodes = [
        Node(n.op, [resolve(v) for v in n.inputs], n.outputs, n.attrs, n.source, n.phase)
        for n in graph.nodes
    ]
    return Graph(graph.inputs, nodes, [resolve(v) for v in graph.outputs])


def last_uses(graph: Graph) -> dict[Value, int]:
    """For each value, the index of the last node that reads it (len(nodes) for outputs)."""
    last: dict[Value, int] = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            last[v] = i
    for v in graph.outputs:
        last[v] = len(graph.nodes)
    return last

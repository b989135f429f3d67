"""What every pass shares: its stats record, views, clones, substitution and last uses."""

from __future__ import annotations

from dataclasses import dataclass

from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.vocabulary import Phase


@dataclass
class PassStats:
    """What one pass did, for `step.report()`."""

    name: str
    nodes_before: int
    nodes_after: int
    bytes_saved: int = 0
    note: str = ""


def unreshaped(v: Value, producers: dict[Value, Node]) -> Value:
    """The value `v` is a reshape (or a chain of reshapes) of, else `v`: the same elements in
    the same order."""
    n = producers.get(v)
    while n is not None and n.prim is P.reshape:
        v = n.inputs[0]
        n = producers.get(v)
    return v


def is_view(node: Node) -> bool:
    """The node's result aliases (part of) its first input instead of owning a new buffer."""
    return node.prim.is_view(node.inputs, node.attrs)


def clone(n: Node, clones: dict[Value, Value], phase: Phase) -> Node:
    """A copy of `n` in `phase` with fresh results (recorded in `clones`), reading the clones of
    its inputs where there are some: a forward node run again later."""
    outs = [Value(v.shape, v.dtype) for v in n.outputs]
    clones.update(zip(n.outputs, outs, strict=True))
    ins = [clones.get(v, v) for v in n.inputs]
    return n.replace(inputs=ins, outputs=outs, phase=phase)


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

    nodes = [n.replace(inputs=[resolve(v) for v in n.inputs]) for n in graph.nodes]
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

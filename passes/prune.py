"""Dead-code elimination: keep only nodes whose results reach an output (a result, a state
write or an attached tensor's gradient)."""

from __future__ import annotations

from tracegrad.core.ir import Graph

from .base import PassStats, stats


def prune(graph: Graph) -> tuple[Graph, PassStats]:
    live = set(graph.outputs)
    kept = []
    for n in reversed(graph.nodes):
        if any(v in live for v in n.outputs):
            kept.append(n)
            live.update(n.inputs)
    after = Graph([v for v in graph.inputs], kept[::-1], graph.outputs)
    return after, stats("prune", graph, after)

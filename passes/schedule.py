"""Scheduling: a topological order that lowers peak memory. Nodes keep their traced order, except
that optimizer-update nodes run as soon as they are ready, so each gradient dies right after its
parameter is updated instead of all gradients living until the end of the step."""

from __future__ import annotations

import heapq

from tracegrad.ir import Graph, Node, Value

from .base import PassStats


def schedule(graph: Graph) -> tuple[Graph, PassStats]:
    producer_index: dict[Value, int] = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    priority = [-1 if n.phase == "update" else i for i, n in enumerate(graph.nodes)]
    waiting = [0] * len(graph.nodes)
    readers: dict[Value, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        for v in set(n.inputs):
            if v in producer_index:
                readers.setdefault(v, []).append(i)
        waiting[i] = len({v for v in n.inputs if v in producer_index})
    ready = [(priority[i], i) for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(graph.nodes[i])
        for v in graph.nodes[i].outputs:
            for j in readers.get(v, ()):
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, (priority[j], j))
    moved = sum(a is not b for a, b in zip(order, graph.nodes, strict=True))
    after = Graph(graph.inputs, order, graph.outputs)
    return after, PassStats("schedule", len(graph.nodes), len(order), 0, f"{moved} nodes moved")

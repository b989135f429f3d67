"""Scheduling: a topological order that lowers peak memory. Nodes keep their traced order, except
that optimizer-update nodes run as soon as they are ready, so each gradient dies right after its
parameter is updated instead of all gradients living until the end of the step, and so do ops
that start early (collectives: the other ranks wait for this one to join). Within an update,
scalar nodes run first, so that its array ops are adjacent and fuse into one kernel.

Two waits make the update cheap in memory: an update waits for every node that may fail (the
commit point, `passes/commit.py`: from there on it may write the state in place), and for the
last reader of the old value it replaces (a layer's weight, read by the gradient of the layer's
input after its own gradient exists): then nothing reads the old value after the update, and
the memory plan gives the new value the old one's buffer."""

from __future__ import annotations

import heapq

from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.vocabulary import Phase

from .base import PassStats, is_view
from .commit import fallible


def schedule(graph: Graph) -> tuple[Graph, PassStats]:
    producer: dict[Value, int] = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    waits_for = _update_dependencies(graph, producer)
    _collectives_in_traced_order(graph, waits_for)
    early = [n.phase is Phase.UPDATE or n.prim.starts_early for n in graph.nodes]
    # of early nodes, scalars first: an optimizer's bias corrections, computed between its
    # array ops, would otherwise split each parameter's update into several kernels
    priority = [
        (-1, any(v.ndim for v in n.outputs), i) if e else (i, True, i)
        for i, (n, e) in enumerate(zip(graph.nodes, early, strict=True))
    ]
    waiting = [len(w) for w in waits_for]
    readers: dict[Value, list[int]] = {}
    for i, values in enumerate(waits_for):
        for v in values:
            readers.setdefault(v, []).append(i)
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


def _update_dependencies(graph: Graph, producer: dict[Value, int]) -> list[set[Value]]:
    """The values each node waits for. An optimizer update is one connected piece of update
    nodes (`buf *= m; buf += g; p -= lr * buf`): each of its nodes waits for everything the
    piece reads from backward, so the piece runs together once the gradient exists, and no part
    of it runs early only to hold its result until then. A piece lies within one `step()` call
    (`Node.update`): a step that calls it twice (SAC's delayed actor update, an inner loop)
    updates a parameter twice, and one piece over both would wait for the second gradient,
    computed from the first update's result."""
    parent = list(range(len(graph.nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    updates = [i for i, n in enumerate(graph.nodes) if n.phase is Phase.UPDATE]
    arrays = {i for i in updates if any(v.ndim for v in graph.nodes[i].outputs)}
    for i in arrays:  # a scalar many updates read (a learning rate cast once) joins no piece
        for v in graph.nodes[i].inputs:
            j = producer.get(v)
            if j in arrays and graph.nodes[j].update == graph.nodes[i].update:
                parent[root(i)] = root(j)
    outside: dict[int, set[Value]] = {}
    for i in updates:
        for v in graph.nodes[i].inputs:
            j = producer.get(v)
            if j is not None and graph.nodes[j].phase is not Phase.UPDATE:
                outside.setdefault(root(i), set()).add(v)
    waits = [{v for v in n.inputs if v in producer} for n in graph.nodes]
    first: dict[int, int] = {}
    for i in updates:
        first.setdefault(root(i), i)
    barrier = _before_commit(graph)
    readers = _old_readers(graph)
    for i in updates:
        waits[i] |= outside.get(root(i), set()) | barrier
        for v in graph.nodes[i].inputs:
            waits[i].update(r for j, r in readers.get(v, ()) if j < first[root(i)])
    return waits


def _collectives_in_traced_order(graph: Graph, waits: list[set[Value]]) -> None:
    """Each collective waits for the one traced before it: every rank must run them in one
    order, and ranks whose graphs differ (DistributedDataParallel's buffer sync: rank 0 sends
    its own, the others zeros, ready at once) would otherwise order them by readiness."""
    collectives = [i for i, n in enumerate(graph.nodes) if n.prim.starts_early]
    for before, after in zip(collectives, collectives[1:], strict=False):
        waits[after].update(graph.nodes[before].outputs)


def _before_commit(graph: Graph) -> set[Value]:
    """The results of the nodes that may fail and do not depend on an update (those that do
    cannot run before it, and keep the commit point after them). Not collectives: each
    gradient's update runs right after its all-reduce (overlapping the next one), writing into a
    new buffer until the commit point after the last collective, rather than holding every
    gradient until all are reduced."""
    after_update: set[Value] = set()
    for n in graph.nodes:
        if n.phase is Phase.UPDATE or any(v in after_update for v in n.inputs):
            after_update.update(n.outputs)
    return {
        v
        for n, f in zip(graph.nodes, fallible(graph), strict=True)
        if f and not n.prim.starts_early and not any(v in after_update for v in n.inputs)
        for v in n.outputs
    }


def _old_readers(graph: Graph) -> dict[Value, list[tuple[int, Value]]]:
    """Per array graph input, the results (with their node's index) of the nodes outside
    updates that read it or a view of it: an update piece that reads the input waits for those
    traced before it, so that the old value is dead when the piece writes the new one."""
    base = {v: v for v in graph.inputs if v.ndim}
    readers: dict[Value, list[tuple[int, Value]]] = {}
    for i, n in enumerate(graph.nodes):
        if n.phase is Phase.UPDATE:
            continue
        for b in dict.fromkeys(base[v] for v in n.inputs if v in base):
            readers.setdefault(b, []).extend((i, r) for r in n.outputs)
            if is_view(n):
                base.update((r, b) for r in n.outputs)
    return readers

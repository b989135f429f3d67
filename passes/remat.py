"""Rematerialization: backward recomputes cheap elementwise forward values instead of keeping them
alive from forward to backward (AOTAutograd's idea). What to keep is a minimum cut, in bytes,
between what the step cannot recompute (its inputs, the results of matmuls, reductions, random
draws: anything that may not run again (`Primitive.may_rerun`) or is neither cheap (elementwise,
or `Primitive.cheap`) nor a view) and the values
backward reads: every residual must then be rebuildable by a chain of cheap nodes from kept
values. So an exact GELU layer keeps its pre-activation, not the two scaled copies of it that
backward reads, an MLP layer keeps only its pre-activation, and a conv + ReLU + max-pool layer
its pre-activation and the int8 positions of the maxima. A result of the step costs nothing to
keep, as it is held to the step's end anyway (a clipped gradient, the new `.grad`, is read by the
update, not multiplied again). Of cuts of equal size, the one nearest backward: least
recomputation."""

from __future__ import annotations

from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.vocabulary import Phase

from .base import PassStats, clone, is_view

MAX_CHAIN = 16  # longest elementwise chain worth recomputing for one value


def _cheap(n: Node | None) -> bool:
    """A forward node that may run again (`Primitive.may_rerun`: no check, no random draw) and
    is elementwise or marked cheap in the op table (`Primitive.cheap`: max-pooling, whose result
    the next layer's weight gradient reads), or a view (a slice, a reshape): a view costs nothing
    to make again, and keeping one keeps its whole base alive."""
    if n is None or n.phase is not Phase.FORWARD:
        return False
    return n.prim.may_rerun and (n.prim.cheap or is_view(n))


def saved_values(graph: Graph) -> list[Value]:
    """Forward results that backward or update nodes read: the residuals."""
    return graph.residuals()


def min_cut_kept(graph: Graph, residuals: list[Value]) -> set[Value]:
    """The forward values to keep: a minimum cut in the flow network where each value is an
    edge v_in -> v_out of capacity nbytes, a cheap node joins its inputs' v_out to its result's
    v_in, values that cannot be recomputed hang from the source and residuals feed the sink.
    Of equal cuts, the one nearest the residuals: least recomputation."""
    import networkx as nx  # here, not at the top: `import tracegrad` need not load it

    network = nx.DiGraph()
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    for n in graph.nodes:
        if n.phase is not Phase.FORWARD:
            continue
        for v in n.outputs:
            network.add_edge((v, "in"), (v, "out"), capacity=0 if v in outputs else v.nbytes)
            if not _cheap(n):
                network.add_edge("source", (v, "in"))  # no capacity: unbounded
                continue
            for u in n.inputs:
                if u in inputs:
                    network.add_edge("source", (u, "out"))
                elif u.const is None:
                    network.add_edge((u, "out"), (v, "in"))
    targets = [v for v in residuals if v not in inputs]
    if not targets:
        return set()
    for v in targets:
        network.add_edge((v, "out"), "sink")
    # networkx's sink side is every node that still reaches the sink: the cut nearest it
    _, (_, near_sink) = nx.minimum_cut(network, "source", "sink")
    return {v for v, side in near_sink - {"sink"} if side == "out" and (v, "in") not in near_sink}


def _chain(v: Value, producers: dict[Value, Node], available: set[Value]) -> list[Node] | None:
    """The cheap nodes that rebuild `v` from `available` values, in order; None if there are
    none or too many."""
    nodes: list[Node] = []
    visited: set[Value] = set()

    def walk(x: Value, depth: int) -> bool:
        """`depth`: the nodes below on the way here, each one more in the chain if it holds, so
        a long run of cheap nodes (a squeeze-excitation's) stops at MAX_CHAIN, not at Python's
        recursion limit."""
        if x in visited or x in available or x.const is not None:
            return True
        visited.add(x)
        n = producers.get(x)
        if not _cheap(n) or max(len(nodes), depth) >= MAX_CHAIN:
            return False
        if not all(walk(i, depth + 1) for i in n.inputs):
            return False
        nodes.append(n)
        return True

    return nodes if walk(v, 0) and nodes else None


def rematerialize(graph: Graph) -> tuple[Graph, PassStats]:
    producers = graph.producers()
    saved = saved_values(graph)
    order = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    held = set(graph.inputs) | set(graph.outputs)  # kept whatever the cut: free to read
    kept = held | min_cut_kept(graph, saved)
    plans = {}
    for v in sorted(saved, key=order.__getitem__):
        chain = _chain(v, producers, kept) if v not in kept else None
        if chain is None:
            kept.add(v)  # also a chain longer than MAX_CHAIN: keep the value itself
        else:
            plans[v] = chain
    clones: dict[Value, Value] = {}
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.phase is not Phase.FORWARD:
            for v in n.inputs:
                for c in plans.get(v, ()):
                    if c.outputs[0] not in clones:
                        nodes.append(clone(c, clones, Phase.RECOMPUTE))
            n = n.replace(inputs=[clones.get(v, v) for v in n.inputs])
        nodes.append(n)
    after = Graph(graph.inputs, nodes, graph.outputs)
    anchors = kept - set(saved) - held  # kept for the chains, not read by backward
    freed = sum(v.nbytes for v in plans) - sum(v.nbytes for v in anchors)
    note = f"{len(plans)} saved values recomputed in backward"
    return after, PassStats("remat", len(graph.nodes), len(nodes), freed, note)

"""The commit point of a step: the first node after every node that may raise. Before it a
failure leaves the state (parameters, optimizer state, random states, buffers) as it was; from
it on nothing can fail, so the memory plan lets update nodes write the new state values into
the state's own buffers instead of new ones that the step's end would copy over the old.

A node may fail if its op says so (`Primitive.may_raise`: value checks, index arrays, linear
algebra, collectives, opaque ops), except a view (basic indexing reads no index array) and an
index op whose index arrays an earlier index op of the same template already applied to a
source of the same shape: an embedding's gradient (a scatter-add) reuses the lookup's tokens,
which the lookup checked in forward; counting it would hold the commit point, and with it
every update, until the end of backward."""

from __future__ import annotations

from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.vocabulary import Phase

from .base import is_view, last_uses


def fallible(graph: Graph) -> list[bool]:
    """Per node, whether it may raise when the step runs (see the module's docstring)."""
    checked: set[tuple] = set()
    result = []
    same = _Structure(graph)
    for n in graph.nodes:
        key = _index_key(n, same)
        # a view reads no data to fail on (basic indexing), unless it is an effect (a check)
        pure_view = is_view(n) and not n.prim.has_effects
        result.append(n.prim.may_raise and not pure_view and key not in checked)
        if key is not None:
            checked.add(key)
    return result


def commit_point(graph: Graph) -> int:
    """The index of the first node after every node that may fail (0: nothing may fail)."""
    return max((i + 1 for i, f in enumerate(fallible(graph)) if f), default=0)


def _index_key(n: Node, same: _Structure) -> tuple | None:
    """What an index op's success proves: these index arrays, applied with this template to a
    source of this shape, are in range. (The template as its repr, as cse keys attributes: it
    holds slices, which Python 3.11 cannot hash.)"""
    if n.prim is P.getitem and len(n.inputs) > 1:
        return repr(n.attrs["template"]), n.inputs[0].shape, tuple(map(same, n.inputs[1:]))
    if n.prim is P.scatter_add and len(n.inputs) > 1:
        return repr(n.attrs["template"]), tuple(n.attrs["shape"]), tuple(map(same, n.inputs[1:]))
    return None


class _Structure:
    """A value's structure: the same for a value and its recomputed clone (remat rebuilds an
    index array in backward) and for equal constants; the value itself for inputs and what
    effects make."""

    def __init__(self, graph: Graph):
        self.producer = {v: (n, k) for n in graph.nodes for k, v in enumerate(n.outputs)}
        self.known: dict[Value, object] = {}

    def __call__(self, v: Value) -> object:
        if v not in self.known:
            self.known[v] = v
            if v.const is not None:  # equal constants are one index array
                self.known[v] = (v.const.dtype.str, v.const.shape, v.const.tobytes())
            made = self.producer.get(v)
            if made is not None and made[0].prim.may_rerun:
                n, k = made
                key = (n.prim, tuple(map(self, n.inputs)), tuple(sorted(n.attrs.items())), k)
                try:
                    hash(key)
                    self.known[v] = key
                except TypeError:  # an attribute that is not hashable: the value itself
                    pass
        return self.known[v]


def gradients(graph: Graph) -> list[tuple[Value, int, int]]:
    """The gradients (array results of backward nodes read outside backward: by updates, or
    by a clipping that scales them first), each with the index of the node that makes it and
    of its last reader."""
    last = last_uses(graph)
    born = {v: i for i, n in enumerate(graph.nodes) if n.phase is Phase.BACKWARD
            for v in n.outputs if v.ndim}  # fmt: skip
    found: dict[Value, None] = {}
    for n in graph.nodes:
        if n.phase is not Phase.BACKWARD:
            found.update((v, None) for v in n.inputs if v in born)
    return [(v, born[v], last.get(v, born[v])) for v in found]


def why_gradients_wait(graph: Graph, commit: int) -> str | None:
    """Why the updates do not run inside backward, each as its gradient is final (None if
    they do, or there are none): what in the step needs all gradients first. Asked of each
    `step()` call apart (a step may call it twice, the second on a second backward's
    gradients), about the gradients its updates read, directly or through a clipping."""
    born = {v: b for v, b, _ in gradients(graph)}
    calls: dict[int | None, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        if n.phase is Phase.UPDATE and n.outputs[0].ndim:
            calls.setdefault(n.update, []).append(i)
    producer = graph.producers()
    for updates in calls.values():
        read = _gradients_read(graph, updates, born, producer)
        if len(read) > 1 and updates[0] > max(born[v] for v in read):
            return _why_waited(graph, read, born)
    return None


def _gradients_read(graph: Graph, updates: list[int], born: dict[Value, int],
                    producer: dict[Value, Node]) -> set[Value]:  # fmt: skip
    """The gradients the nodes `updates` read, directly or through nodes of neither backward
    nor an update (a clipping's scale, from every gradient's norm)."""
    stack = [v for i in updates for v in graph.nodes[i].inputs]
    seen: set[Value] = set()
    while stack:
        v = stack.pop()
        n = producer.get(v)
        if v in seen or n is None:
            continue
        seen.add(v)
        if v not in born and n.phase not in (Phase.BACKWARD, Phase.UPDATE):
            stack.extend(n.inputs)
    return {v for v in seen if v in born}


def _why_waited(graph: Graph, read: set[Value], born: dict[Value, int]) -> str:
    if any(v in read for v in graph.outputs):
        return "the gradients are outputs of the step (written to .grad, accumulated across calls)"
    fails = [i for i, f in enumerate(fallible(graph)) if f]
    if fails and fails[-1] >= min(born[v] for v in read):
        n = graph.nodes[fails[-1]]
        return f"the commit point waits for {n.op} at {n.source or '?'}, which may fail"
    return (
        "an update reads a value computed from all gradients (clipping by global norm, a "
        "loss-scale check)"
    )

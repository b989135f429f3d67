"""Algebraic clean-ups, each a small rule `(node, producers) -> replacement value or None`:
multiplying by one, adding zero, transpose of transpose, reshape chains, a sum that only undoes
a broadcast, and folding nodes whose inputs are all constants."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tracegrad.ir import Graph, Node, Value
from tracegrad.primitives import PRIMITIVES

from .base import PassStats, stats, substitute

Rule = Callable[[Node, dict[Value, Node], list[Node]], Value | None]


def _const_equal(v: Value, x: float) -> bool:
    """`v` is a constant whose every element is `x` (a scalar one, a zeros seed, ...)."""
    return v.const is not None and bool(np.all(v.const == x))


def _identity(n: Node, keep: Value, other: Value) -> bool:
    out = n.outputs[0]
    return keep.shape == out.shape and keep.dtype == out.dtype and other.const is not None


def mul_by_one(n, producers, emit):
    if n.op == "mul":
        for a, b in (n.inputs, n.inputs[::-1]):
            if _const_equal(b, 1.0) and _identity(n, a, b):
                return a
    return None


def add_zero(n, producers, emit):
    if n.op in ("add", "sub"):
        pairs = [n.inputs] + ([n.inputs[::-1]] if n.op == "add" else [])
        for a, b in pairs:
            if _const_equal(b, 0.0) and _identity(n, a, b):
                return a
    return None


def same_shape_view(n, producers, emit):
    """reshape/broadcast_to to the shape it already has; transpose by the identity."""
    x = n.inputs[0] if n.inputs else None
    if n.op in ("reshape", "broadcast_to") and x.shape == n.outputs[0].shape:
        return x
    if n.op == "transpose" and n.attrs["axes"] == tuple(range(x.ndim)):
        return x
    return None


def view_chain(n, producers, emit):
    """reshape(reshape(x)) -> reshape(x); transpose(transpose(x)) -> one transpose."""
    if n.op not in ("reshape", "transpose"):
        return None
    inner = producers.get(n.inputs[0])
    if inner is None or inner.op != n.op:
        return None
    x, out = inner.inputs[0], n.outputs[0]
    if n.op == "reshape" and x.shape == out.shape:
        return x
    if n.op == "transpose" and all(
        inner.attrs["axes"][a] == i for i, a in enumerate(n.attrs["axes"])
    ):
        return x
    if n.op == "reshape":
        attrs = {"shape": out.shape}
    else:
        attrs = {"axes": tuple(inner.attrs["axes"][a] for a in n.attrs["axes"])}
    emit.append(Node(n.op, [x], [out], attrs, n.source, n.phase))
    return out


def sum_of_broadcast(n, producers, emit):
    """sum(broadcast_to(y, s), the broadcast axes) == y * (number of copies)."""
    if n.op != "sum":
        return None
    b = producers.get(n.inputs[0])
    if b is None or b.op != "broadcast_to":
        return None
    y, big = b.inputs[0], b.outputs[0].shape
    lead = len(big) - y.ndim
    grown = {i for i, d in enumerate(big) if i < lead or (y.shape[i - lead] == 1 and d != 1)}
    if set(n.attrs["axis"]) != grown:
        return None
    out = n.outputs[0]
    copies = math.prod(big[i] for i in grown)
    shaped = Value(out.shape, y.dtype)
    emit.append(Node("reshape", [y], [shaped], {"shape": out.shape}, n.source, n.phase))
    scale = Value((), out.dtype, const=np.asarray(copies, out.dtype))
    emit.append(Node("mul", [shaped, scale], [out], {}, n.source, n.phase))
    return out


def fold_constants(n, producers, emit):
    if not n.inputs or any(v.const is None for v in n.inputs):
        return None
    out = n.outputs[0]
    result = PRIMITIVES[n.op].impl(*(v.const for v in n.inputs), **n.attrs)
    return Value(out.shape, out.dtype, const=np.asarray(result, out.dtype))


RULES: list[Rule] = [fold_constants, mul_by_one, add_zero, same_shape_view, view_chain,
                     sum_of_broadcast]  # fmt: skip


def simplify(graph: Graph) -> tuple[Graph, PassStats]:
    """Apply the rules once over the graph, in order; rewritten nodes feed later rules."""
    producers: dict[Value, Node] = {}
    alias: dict[Value, Value] = {}
    nodes: list[Node] = []
    for n in substitute(graph, {}).nodes:
        n.inputs = [alias.get(v, v) for v in n.inputs]
        emitted: list[Node] = []
        for rule in RULES:
            new = rule(n, producers, emitted)
            if new is not None:
                break
        if new is None:
            emitted = [n]
        elif new is not n.outputs[0]:
            alias[n.outputs[0]] = new
        for e in emitted:
            nodes.append(e)
            producers.update((v, e) for v in e.outputs)
    after = substitute(Graph(graph.inputs, nodes, graph.outputs), alias)
    return after, stats("simplify", graph, after)

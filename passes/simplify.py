"""Algebraic clean-ups, each a small rule `(node, rewrite) -> replacement value or None`:
multiplying by one, adding zero, transpose of transpose, reshape chains, a sum that only undoes
a broadcast, the transpose of a matrix product, and folding nodes whose inputs are all
constants."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tracegrad.ir import Graph, Node, Value
from tracegrad.primitives import PRIMITIVES

from .base import PassStats, stats, substitute


@dataclass
class Rewrite:
    """What a rule sees: producers so far, how many nodes read each value in the input graph,
    and where to emit replacement nodes."""

    producers: dict[Value, Node]
    readers: dict[Value, int]
    outputs: set[Value]
    emit: list[Node] = field(default_factory=list)


Rule = Callable[[Node, Rewrite], Value | None]


def _const_equal(v: Value, x: float) -> bool:
    """`v` is a constant whose every element is `x` (a scalar one, a zeros seed, ...)."""
    return v.const is not None and bool(np.all(v.const == x))


def _identity(n: Node, keep: Value, other: Value) -> bool:
    out = n.outputs[0]
    return keep.shape == out.shape and keep.dtype == out.dtype and other.const is not None


def mul_by_one(n: Node, rw: Rewrite) -> Value | None:
    if n.op == "mul":
        for a, b in (n.inputs, n.inputs[::-1]):
            if _const_equal(b, 1.0) and _identity(n, a, b):
                return a
    return None


def add_zero(n: Node, rw: Rewrite) -> Value | None:
    if n.op in ("add", "sub"):
        pairs = [n.inputs] + ([n.inputs[::-1]] if n.op == "add" else [])
        for a, b in pairs:
            if _const_equal(b, 0.0) and _identity(n, a, b):
                return a
    return None


def same_shape_view(n: Node, rw: Rewrite) -> Value | None:
    """reshape/broadcast_to to the shape it already has; transpose by the identity."""
    x = n.inputs[0] if n.inputs else None
    if n.op in ("reshape", "broadcast_to") and x.shape == n.outputs[0].shape:
        return x
    if n.op == "transpose" and n.attrs["axes"] == tuple(range(x.ndim)):
        return x
    return None


def view_chain(n: Node, rw: Rewrite) -> Value | None:
    """reshape(reshape(x)) -> reshape(x); transpose(transpose(x)) -> one transpose."""
    if n.op not in ("reshape", "transpose"):
        return None
    inner = rw.producers.get(n.inputs[0])
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
    rw.emit.append(Node(n.op, [x], [out], attrs, n.source, n.phase))
    return out


def sum_of_broadcast(n: Node, rw: Rewrite) -> Value | None:
    """sum(broadcast_to(y, s), the broadcast axes) == y * (number of copies)."""
    if n.op != "sum":
        return None
    b = rw.producers.get(n.inputs[0])
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
    rw.emit.append(Node("reshape", [y], [shaped], {"shape": out.shape}, n.source, n.phase))
    scale = Value((), out.dtype, const=np.asarray(copies, out.dtype))
    rw.emit.append(Node("mul", [shaped, scale], [out], {}, n.source, n.phase))
    return out


def transposed_matmul(n: Node, rw: Rewrite) -> Value | None:
    """transpose(a @ b) -> b.T @ a.T: BLAS reads transposed operands for free, and the result
    comes out contiguous instead of as a strided view (x @ W.T layers' weight gradients)."""
    inner = rw.producers.get(n.inputs[0]) if n.op == "transpose" else None
    if inner is None or inner.op != "matmul" or n.attrs["axes"] != (1, 0):
        return None
    if rw.readers.get(inner.outputs[0], 0) > 1 or inner.outputs[0] in rw.outputs:
        return None  # the product is needed as it is too: two products would cost more
    a, b = inner.inputs
    at, bt = Value(a.shape[::-1], a.dtype), Value(b.shape[::-1], b.dtype)
    rw.emit.append(Node("transpose", [b], [bt], {"axes": (1, 0)}, n.source, n.phase))
    rw.emit.append(Node("transpose", [a], [at], {"axes": (1, 0)}, n.source, n.phase))
    rw.emit.append(Node("matmul", [bt, at], [n.outputs[0]], {}, n.source, n.phase))
    return n.outputs[0]


def fold_constants(n: Node, rw: Rewrite) -> Value | None:
    if not n.inputs or any(v.const is None for v in n.inputs):
        return None
    out = n.outputs[0]
    result = PRIMITIVES[n.op].impl(*(v.const for v in n.inputs), **n.attrs)
    return Value(out.shape, out.dtype, const=np.asarray(result, out.dtype))


RULES: list[Rule] = [fold_constants, mul_by_one, add_zero, same_shape_view, view_chain,
                     sum_of_broadcast, transposed_matmul]  # fmt: skip


def simplify(graph: Graph) -> tuple[Graph, PassStats]:
    """Apply the rules once over the graph, in order; rewritten nodes feed later rules."""
    readers: dict[Value, int] = {}
    for n in graph.nodes:
        for v in n.inputs:
            readers[v] = readers.get(v, 0) + 1
    rw = Rewrite({}, readers, set(graph.outputs))
    alias: dict[Value, Value] = {}
    nodes: list[Node] = []
    for n in graph.copy().nodes:
        n.inputs = [alias.get(v, v) for v in n.inputs]
        rw.emit = []
        new = next((v for v in (rule(n, rw) for rule in RULES) if v is not None), None)
        emitted = [n] if new is None else rw.emit
        if new is not None and new is not n.outputs[0]:
            alias[n.outputs[0]] = new
        for e in emitted:
            nodes.append(e)
            rw.producers.update((v, e) for v in e.outputs)
    after = substitute(Graph(graph.inputs, nodes, graph.outputs), alias)
    return after, stats("simplify", graph, after)

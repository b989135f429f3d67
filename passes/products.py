"""Sums of many thin matrix products as one product: A1 @ B1 + A2 @ B2 + ... + An @ Bn is
[A1 A2 ... An] @ [B1; B2; ...; Bn]. A weight used at every step of a loop (an RNN's recurrent
weight at each time step) gets its gradient as such a sum, one product per use, each over a
contraction as short as the batch: a matrix product over 20 rows runs far below the rate of
one over 700, and the sum adds a pass over the (M, N) result per term. One product over the
concatenated operands does the same multiply-adds at the better rate, with no adds.

The rewrite is exact in real arithmetic; in floating point it sums in another order, as a
blocked matrix product does anyway. It keeps the operands alive until the sum's last term is
known, so it takes only sums of at least MIN_TERMS products of 2-D operands whose contraction
is at most THIN long (the case where a product gains from a longer one), each product read
only by the sum."""

from __future__ import annotations

from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node, Value, common_module

from .base import PassStats, stats, unreshaped

MIN_TERMS = 4
THIN = 64


def batch_products(graph: Graph) -> tuple[Graph, PassStats]:
    producer = graph.producers()
    users = graph.users()
    outputs = set(graph.outputs)

    def only_in_sum(v: Value) -> bool:  # read by one add of the tree, nowhere else
        return v not in outputs and len(users.get(v, ())) == 1

    def summed(n: Node) -> bool:
        out = n.outputs[0]
        return n.prim is P.add and all(v.shape == out.shape and v.dtype == out.dtype
                                       for v in n.inputs)  # fmt: skip

    def thin(n: Node | None, out: Value) -> bool:
        return (n is not None and n.prim is P.matmul and not n.attrs
                and all(v.ndim == 2 and v.dtype == out.dtype for v in n.inputs)
                and n.inputs[0].shape[1] <= THIN and only_in_sum(n.outputs[0]))  # fmt: skip

    order = {n: i for i, n in enumerate(graph.nodes)}
    replaced: dict[Node, list[Node]] = {}  # a sum's root add -> the nodes in its place
    dropped: set[Node] = set()
    for root in graph.nodes:
        if not summed(root) or root in dropped:
            continue
        out = root.outputs[0]
        if (
            only_in_sum(out)
            and summed(users[out][0])
            and users[out][0].outputs[0].shape == out.shape
        ):
            continue  # an inner add: its root takes it
        adds, terms, stack = [], [], list(root.inputs)
        while stack:
            v = stack.pop()
            n = producer.get(v)
            if n is not None and summed(n) and only_in_sum(v):
                adds.append(n)
                stack += n.inputs
            else:
                terms.append(v)
        products = [producer.get(v) for v in terms if thin(producer.get(v), out)]
        if len(products) < MIN_TERMS:
            continue
        stacked = _stack_positions(graph, producer, [p.inputs[1] for p in products])
        products.sort(key=lambda p: stacked[p.inputs[1]] if stacked else order[p])
        chosen = set(products)
        rest = [v for v in terms if producer.get(v) not in chosen]
        replaced[root] = _one_product(root, products, rest)
        dropped |= {*adds, *products}
    if not replaced:
        return graph, stats("batch_products", graph, graph)
    nodes = []
    for n in graph.nodes:
        if n in replaced:
            nodes += replaced[n]
        elif n not in dropped:
            nodes.append(n)
    after = Graph(graph.inputs, nodes, graph.outputs)
    return after, stats("batch_products", graph, after, f"{len(replaced)} sums of products")


def _stack_positions(graph: Graph, producer: dict[Value, Node],
                     operands: list[Value]) -> dict[Value, int] | None:  # fmt: skip
    """Each operand's position in a concatenation along the first axis that the graph makes of
    exactly these operands (each maybe reshaped: a stack), if there is one. Concatenated for
    the one product in that order, they are the same array (`memory` makes it once): an RNN's
    per-step gradients, stacked for the input's gradient."""
    wanted = set(operands)
    for n in graph.nodes:
        if n.prim is not P.concatenate or n.attrs["axis"] != 0 or len(n.inputs) != len(wanted):
            continue
        parts = [unreshaped(v, producer) for v in n.inputs]
        if set(parts) == wanted:
            return {v: i for i, v in enumerate(parts)}
    return None


def _one_product(root: Node, products: list[Node], rest: list[Value]) -> list[Node]:
    """The nodes computing the root's result: the concatenated operands' product, plus the
    sum's other terms."""
    out = root.outputs[0]
    (m, _), (_, n) = products[0].inputs[0].shape, products[0].inputs[1].shape
    k = sum(p.inputs[0].shape[1] for p in products)
    module = common_module([p.module for p in products] + [root.module])
    a, b = Value((m, k), out.dtype), Value((k, n), out.dtype)
    total = Value(out.shape, out.dtype) if rest else out
    nodes = [
        root.replace(prim=P.concatenate, inputs=[p.inputs[0] for p in products], outputs=[a],
                     attrs={"axis": 1}, module=module),
        root.replace(prim=P.concatenate, inputs=[p.inputs[1] for p in products], outputs=[b],
                     attrs={"axis": 0}, module=module),
        root.replace(prim=P.matmul, inputs=[a, b], outputs=[total], attrs={}, module=module),
    ]  # fmt: skip
    for i, v in enumerate(rest):
        last = i == len(rest) - 1
        s = out if last else Value(out.shape, out.dtype)
        nodes.append(root.replace(prim=P.add, inputs=[total, v], outputs=[s], attrs={}))
        total = s
    return nodes

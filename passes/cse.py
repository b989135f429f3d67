"""Common-subexpression elimination: one node per (op, inputs, attributes).

An elementwise node or a reduction outside forward is not merged into a forward one: backward
would then read the forward result, keeping it alive from forward to backward, where
recomputing it costs a few flops in a kernel that runs anyway (remat's reasoning). It would
also be a different computation from the one backward sees: remat may rebuild the forward
input in backward, by a kernel whose float32 math differs in the last bits, and max's VJP
compares the input with its maximum (a merged maximum matched no element: 0 / 0).
Exempt are statistics (`_held`), merged by what they compute: a batch norm's means and
variances per channel, which its gradient computes again from x, are forward's, and backward's
pass over the batch to get them goes."""

from __future__ import annotations

from tracegrad.core.ir import Graph, Node, Value, common_module
from tracegrad.core.vocabulary import Kind, Phase

from .base import PassStats, stats, substitute

# Statistics (a batch norm's means and variances per channel, and what is computed from them
# alone) are held from forward to backward rather than computed again: a linear sum this many
# times smaller than its input, and elementwise results of at most FEW elements of statistics,
# constants and parameters of at most FEW elements.
SMALL = 16
FEW = 4096


def cse(graph: Graph) -> tuple[Graph, PassStats]:
    seen: dict[tuple, int] = {}  # key -> position in kept
    alias: dict[Value, Value] = {}
    kept: list[Node] = []
    names: dict[tuple, tuple] = {}  # a pure computation -> its name
    name_of: dict[Value, tuple] = {}  # a pure node's result -> its computation's name
    statistics = {v for v in graph.inputs if v.size <= FEW}  # and what is computed from them
    for n in graph.nodes:
        ins = [alias.get(v, v) for v in n.inputs]
        attrs = repr(sorted(n.attrs.items()))
        exprs = tuple(name_of[v] if v in name_of else _key(v) for v in ins)
        held = _held(n, ins, statistics)
        if held:  # what it computes, whichever phase's values compute it
            key = (n.prim, exprs, attrs, None)
        else:
            key = (n.prim, tuple(map(_key, ins)), attrs, _region(n))
        if key in seen and not n.prim.has_effects:  # two all-reduces are two messages
            first = kept[seen[key]]
            alias.update(zip(n.outputs, first.outputs, strict=True))
            if first.module != n.module:  # one node serves both modules: it belongs to both
                kept[seen[key]] = first.replace(module=common_module((first.module, n.module)))
            continue
        seen[key] = len(kept)
        kept.append(n)
        if held or (n.prim.kind is Kind.VIEW and ins[0] in statistics):
            statistics.update(n.outputs)
        if n.prim.single_pass or n.prim.kind is Kind.VIEW:
            for i, v in enumerate(n.outputs):
                name_of[v] = names.setdefault((n.prim, exprs, attrs, i), ("made", len(names)))
    after = substitute(Graph(graph.inputs, kept, graph.outputs), alias)
    return after, stats("cse", graph, after)


def _region(n: Node) -> bool | None:
    """Single-pass nodes (`Primitive.single_pass`) merge only within forward or within the
    rest; others (a matrix product) merge anywhere."""
    return n.phase is Phase.FORWARD if n.prim.single_pass else None


def _held(n: Node, ins: list[Value], statistics: set[Value]) -> bool:
    """A single-pass node that merges anywhere, by what it computes (backward's computing it
    again from recomputed values included): a linear sum much smaller than what it reads, and
    a few numbers computed from such sums, constants and small parameters alone. Holding them
    costs nothing, computing them again a pass (or a kernel launch); a linear reduction's
    gradient reads neither its input nor its result. (A recurrent net's hidden state, as small,
    is computed from the step's products: backward computes it again, as before.)"""
    prim, out = n.prim, n.outputs[0] if len(n.outputs) == 1 else None
    if out is None or not prim.single_pass:
        return False
    if prim.kind is Kind.ELEMENTWISE:
        return out.size <= FEW and all(v.const is not None or v in statistics for v in ins)
    linear = not (prim.saves_inputs or prim.saves_output)
    return linear and SMALL * out.size <= n.inputs[0].size


def _key(v: Value) -> object:
    """Equal small constants are the same operand; everything else is itself."""
    if v.const is not None and v.const.size <= 4096:
        return ("const", v.shape, v.dtype.str, v.const.tobytes())
    return id(v)

"""`torch.fx.subgraph_rewriter.replace_pattern`: every non-overlapping occurrence of a pattern
(a function or GraphModule, traced) in a GraphModule's graph replaced by a replacement's graph,
its inputs wired to what the pattern's inputs matched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from tracegrad.torch.fx.graph import Graph
from tracegrad.torch.fx.graph_module import GraphModule
from tracegrad.torch.fx.node import Node
from tracegrad.torch.fx.proxy import symbolic_trace


class Match(NamedTuple):
    anchor: Node  # the node of `gm` that the pattern's result matched
    nodes_map: dict[Node, Node]  # the pattern's nodes -> `gm`'s


def _graph_of(f: Callable | GraphModule) -> Graph:
    return f.graph if isinstance(f, GraphModule) else symbolic_trace(f).graph


def _matches(p: Any, g: Any, found: dict[Node, Node]) -> bool:
    """Whether `g` (a node of the graph, or a constant) computes as the pattern's `p` does, with
    the pattern's inputs bound in `found` (bound further as it goes)."""
    if isinstance(p, Node):
        if p in found:
            return found[p] is g
        if not isinstance(g, Node):
            return False
        if p.op == "placeholder":
            found[p] = g
            return True
        if (p.op, p.target) != (g.op, g.target) or p.kwargs.keys() != g.kwargs.keys():
            return False
        found[p] = g
        if _matches(p.args, g.args, found) and all(
            _matches(p.kwargs[k], g.kwargs[k], found) for k in p.kwargs
        ):
            return True
        del found[p]
        return False
    if isinstance(p, list | tuple):
        return (isinstance(g, list | tuple) and len(p) == len(g)
                and all(_matches(a, b, found) for a, b in zip(p, g, strict=True)))  # fmt: skip
    return p == g and not isinstance(g, Node)


def replace_pattern(gm: GraphModule, pattern: Callable | GraphModule,
                    replacement: Callable | GraphModule) -> list[Match]:  # fmt: skip
    """Replace each non-overlapping match of `pattern` in `gm` (one output; an intermediate
    value of a match that something outside it uses keeps that match from being replaced)."""
    pattern_graph, replacement_graph = _graph_of(pattern), _graph_of(replacement)
    p_inputs = [n for n in pattern_graph.nodes if n.op == "placeholder"]
    r_inputs = [n for n in replacement_graph.nodes if n.op == "placeholder"]
    if len(p_inputs) != len(r_inputs):
        raise ValueError(f"replace_pattern: the pattern takes {len(p_inputs)} inputs, the "
                         f"replacement {len(r_inputs)}")  # fmt: skip
    [p_output] = [n for n in pattern_graph.nodes if n.op == "output"]
    p_result = p_output.args[0]
    if not isinstance(p_result, Node):
        raise ValueError("replace_pattern: the pattern must return one value")
    graph, taken, matches = gm.graph, set(), []
    for anchor in graph.nodes:
        found: dict[Node, Node] = {}
        if anchor in taken or not _matches(p_result, anchor, found):
            continue
        inner = {g for p, g in found.items() if p.op != "placeholder"}
        if inner & taken or any(u not in inner for g in inner - {anchor} for u in g.users):
            continue  # overlapping, or an intermediate used outside the match
        taken |= inner
        matches.append(Match(anchor, found))
    for anchor, found in matches:
        with graph.inserting_before(anchor):
            inputs = {r: found[p] for p, r in zip(p_inputs, r_inputs, strict=True)}
            body = Graph()
            body._nodes = [n for n in replacement_graph.nodes if n.op != "placeholder"]
            result = graph.graph_copy(body, inputs)
        anchor.replace_all_uses_with(result)
        inner = [g for p, g in found.items() if p.op != "placeholder"]
        for n in sorted(inner, key=graph.index, reverse=True):
            graph.erase_node(n)
    gm.recompile()
    return matches

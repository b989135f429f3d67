"""Graph -> graph transforms. The default pipeline, in order, is `DEFAULT`; each pass is a small
function `pass(graph) -> (graph, PassStats)`. This package sees only the core
(`tracegrad.core`: the IR and the op table's records)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tracegrad.core.ir import Graph

from .base import PassStats
from .budget import Budget
from .cse import cse
from .fuse import fuse
from .memory import MemoryPlan, plan_memory
from .products import batch_products
from .prune import prune
from .remat import rematerialize, saved_values
from .schedule import schedule
from .simplify import simplify

Pass = Callable[[Graph], tuple[Graph, PassStats]]

# cse runs before remat, which duplicates nodes on purpose; prune runs after both.
DEFAULT: list[Pass] = [simplify, cse, batch_products, prune, rematerialize, prune, schedule]
# The Numba backend appends `fuse`; the NumPy backend gains nothing from it.


# Re-check the graph (`Graph.verify`) after every pass: the test suite turns this on.
VERIFY = False


def run(graph: Graph, passes: Sequence[Pass] | None = None) -> tuple[Graph, list[PassStats]]:
    """Apply `passes` (default: `DEFAULT`) in order, collecting each one's stats."""
    all_stats = []
    for p in DEFAULT if passes is None else passes:
        graph, st = p(graph)
        if VERIFY:
            graph.verify()
        all_stats.append(st)
    return graph, all_stats


__all__ = ["DEFAULT", "Budget", "MemoryPlan", "PassStats", "batch_products", "cse", "fuse",
           "plan_memory", "prune", "rematerialize", "run", "saved_values", "schedule",
           "simplify"]  # fmt: skip

"""Memory budget: choose which forward values backward keeps and which it recomputes, matmuls
included, so that the step's planned peak stays under a budget, at the least estimated extra
compute; or refuse with the smallest peak that is reachable.

The residuals (forward values that backward reads, after `remat` made cheap ones recomputable)
are taken in forward order as a chain r_1..r_n. A kept set K costs the recomputation of every
dropped residual (the forward nodes that rebuild it from the previous residuals: `Primitive.cost`
priced with rates measured once on this machine) and is modelled to peak at
`base + bytes(K) + alpha * (largest run of dropped residuals)`: backward rebuilds a run of
dropped residuals when it first needs one, and holds them until it is through the run (one
level of checkpoints). A dynamic programme over the chain (as Beaumont et al., "Optimal
checkpointing for heterogeneous chains", 2019, with one level of checkpoints) gives, for every
bound on that run and every kept size, the cheapest K. Each choice is then checked with the real
planner (`peak_of`: the rest of the pipeline and `plan_memory`), the model refitted and the
target lowered by any overshoot, so what is returned fits by construction."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import numpy as np

from tracegrad.errors import MemoryBudgetError
from tracegrad.ir import Graph, Node, Value

from .base import PassStats, is_view, last_uses
from .memory import plan_memory
from .remat import _clone, saved_values
from .schedule import schedule

# Kinds a forward node may have to be run again in backward: deterministic, no effects.
RECOMPUTABLE = frozenset({"elementwise", "contraction", "reduction", "view", "index"})
UNITS = 8  # kept bytes are counted in eighths of the largest residual by the programme
ATTEMPTS = 8  # solve, check with the planner, lower the target by the overshoot: at most this


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


@functools.cache
def rates() -> tuple[float, float]:
    """(flop/s of a float32 matmul, bytes/s of an elementwise add), measured once per process."""
    a = np.ones((256, 256), np.float32)
    b = np.ones(1 << 20, np.float32)
    matmul = _best(lambda: np.matmul(a, a)) / (2 * 256**3)
    add = _best(lambda: np.add(b, b, out=b)) / (3 * b.nbytes)
    return 1 / matmul, 1 / add


def _best(fn: Callable, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return max(min(times), 1e-9)


def seconds(n: Node) -> float:
    """The cost model: a node takes as long as its arithmetic or its memory traffic."""
    flops, moved = n.prim.cost(n.inputs, n.outputs)
    flop_rate, byte_rate = rates()
    return max(flops / flop_rate, moved / byte_rate)


def default_peak(graph: Graph) -> int:
    return plan_memory(schedule(graph)[0]).peak


class Budget:
    """The pass: `Budget(limit, peak_of)(graph) -> (graph, stats)`. `peak_of(graph)` gives the
    planned peak the rest of the pipeline would reach (default: schedule, then plan_memory).
    After it ran, `recomputed` lists the residuals it drops, `extra_s` and `step_s` the
    estimated seconds of their recomputation and of the whole step, `peak` the verified peak."""

    def __init__(self, limit: int, peak_of: Callable[[Graph], int] = default_peak):
        self.limit, self.peak_of = int(limit), peak_of
        self.recomputed: list[tuple[Value, Node]] = []
        self.extra_s = self.step_s = 0.0
        self.peak: int | None = None

    def __call__(self, graph: Graph) -> tuple[Graph, PassStats]:
        chain = _Chain(graph)
        self.step_s = sum(seconds(n) for n in graph.nodes)
        after, kept = chain.solve(self.limit, self.peak_of)
        producers = graph.producers()
        self.recomputed = [(v, producers[v]) for v in chain.residuals if v not in kept]
        self.extra_s = sum(c for v, c in zip(chain.residuals, chain.costs, strict=True)
                           if v not in kept)  # fmt: skip
        self.peak = chain.peaks[frozenset(kept)]
        note = (
            f"budget {_mib(self.limit)}: planned {_mib(self.peak)}, "
            f"{len(self.recomputed)} residuals recomputed"
        )
        freed = sum(v.nbytes for v, _ in self.recomputed)  # no longer kept for backward
        return after, PassStats("budget", len(graph.nodes), len(after.nodes), freed, note)


class _Chain:
    """The residuals of one graph in forward order, their bytes, costs and what each plan of
    keeping them peaks at (checked plans only)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers = graph.producers()
        order = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
        inputs, outputs = set(graph.inputs), set(graph.outputs)
        self.residuals = sorted(
            (v for v in saved_values(graph) if v not in inputs), key=order.__getitem__
        )
        # outputs of forward nodes that cannot run twice (random, effects), read by forward
        # nodes that can: always available, never recomputed
        self.pinned = {
            v
            for n in graph.nodes
            if n.phase == "forward" and n.prim.kind not in RECOMPUTABLE
            for v in n.outputs
        }
        everything = set(self.residuals)
        self.costs, self.forced = [], []
        for v in self.residuals:
            nodes = self._rebuild(v, everything - {v}, {})
            self.forced.append(nodes is None or v in outputs or v in self.pinned)
            self.costs.append(sum(seconds(n) for n in nodes or ()))
        self.peaks: dict[frozenset, int] = {}

    def _rebuild(self, v: Value, available: set[Value], clones: dict) -> list[Node] | None:
        """The forward nodes that recompute `v` from `available` values (and inputs, constants,
        values already cloned), in order; None if one of them cannot run twice."""
        nodes, done, stack = [], set(), [(v, False)]
        inputs = set(self.graph.inputs)
        while stack:
            x, expanded = stack.pop()
            n = self.producers.get(x)
            if x in done or x.const is not None or n is None or x in inputs:
                continue
            if x in available or x in clones or x in self.pinned:
                continue
            if n.phase != "forward" or n.prim.kind not in RECOMPUTABLE:
                return None
            if expanded:
                done.update(n.outputs)
                nodes.append(n)
                continue
            stack.append((x, True))
            stack.extend((i, False) for i in n.inputs if i not in done)
        return nodes

    def build(self, kept: frozenset) -> Graph:
        """The graph that keeps `kept` and recomputes the other residuals right before the
        first node outside forward that reads one."""
        drop = set(self.residuals) - kept
        if not drop:
            return self.graph
        clones: dict[Value, Value] = {}
        nodes: list[Node] = []
        for n in self.graph.nodes:
            if n.phase != "forward":
                for v in n.inputs:
                    if v in drop and v not in clones:
                        for c in self._rebuild(v, set(kept), clones) or ():
                            nodes.append(_clone(c, clones, "rebuild"))
                inputs = [clones.get(v, v) for v in n.inputs]
                n = Node(n.prim, inputs, n.outputs, n.attrs, n.source, n.phase)
            nodes.append(n)
        return Graph(self.graph.inputs, nodes, self.graph.outputs)

    def check(self, kept: frozenset, peak_of: Callable[[Graph], int]) -> int:
        if kept not in self.peaks:
            self.peaks[kept] = peak_of(self.build(kept))
        return self.peaks[kept]

    def solve(self, limit: int, peak_of: Callable[[Graph], int]) -> tuple[Graph, frozenset]:
        everything = frozenset(self.residuals)
        full = self.check(everything, peak_of)
        if full <= limit:
            return self.graph, everything
        if all(self.forced):  # nothing to recompute: an inference step, say
            raise MemoryBudgetError(self._refusal(limit, everything), full)
        sizes = [v.nbytes for v in self.residuals]
        base = full - sum(sizes)
        tables = _Tables(sizes, self.costs, self.forced)
        alpha, target = 1.0, limit
        for _ in range(ATTEMPTS):
            choice = tables.cheapest(target - base, alpha)
            if choice is None:
                break
            kept = frozenset(self.residuals[i] for i in choice[1])
            peak = self.check(kept, peak_of)
            if peak <= limit:
                return self.build(kept), kept
            run = tables.longest_run(choice[1])
            alpha = max(alpha, (peak - base - tables.kept_bytes(choice[1])) / max(run, 1))
            target -= peak - limit
        # the frugal end: for each bound on a run, the plan keeping least; check them in order
        # of the bound until the checked peak has risen three times in a row
        checked, rising, lowest = [], 0, full
        for indices in tables.frugal():
            kept = frozenset(self.residuals[i] for i in indices)
            peak = self.check(kept, peak_of)
            checked.append(kept)
            rising = 0 if peak < lowest else rising + 1
            lowest = min(lowest, peak)
            if rising == 3:
                break
        fits = [k for k, peak in self.peaks.items() if peak <= limit]
        if fits:
            best = min(fits, key=lambda k: (tables.cost(self._indices(k)), self.peaks[k]))
            return self.build(best), best
        # the sweep alone, not depending on the budget, so that its minimum always fits
        minimum = min(checked, key=self.peaks.__getitem__)
        raise MemoryBudgetError(self._refusal(limit, minimum), self.peaks[minimum])

    def _indices(self, kept: frozenset) -> list[int]:
        return [i for i, v in enumerate(self.residuals) if v in kept]

    def _refusal(self, limit: int, kept: frozenset) -> str:
        minimum = self.peaks[kept]
        shown = "; ".join(
            f"{_mib(total)} in {count} values from {op} ({phase}) at {source}"
            for (op, phase, source), (total, count) in dominating(schedule(self.build(kept))[0])
        )
        return (
            f"memory budget {_mib(limit)} ({limit} bytes) is below the smallest planned peak "
            f"of this step that was found, {_mib(minimum)} ({minimum} bytes), keeping "
            f"{len(kept)} of {len(self.residuals)} residuals and recomputing the rest; "
            f"alive where most is alive: {shown}"
        )


def dominating(graph: Graph, count: int = 4) -> list[tuple[tuple, tuple[int, int]]]:
    """The values alive where the schedule holds the most bytes (results the step returns or
    writes to state stay alive to its end), grouped by op, phase and user line, largest first:
    ((op, phase, source), (bytes, values))."""
    born = {v: i for i, n in enumerate(graph.nodes) if not is_view(n) for v in n.outputs}
    last = last_uses(graph)
    delta = np.zeros(len(graph.nodes) + 2)
    for v, b in born.items():
        delta[b] += v.nbytes
        delta[last.get(v, b) + 1] -= v.nbytes
    at = int(np.argmax(np.cumsum(delta)))
    producers = graph.producers()
    groups: dict[tuple, tuple[int, int]] = {}
    for v, b in born.items():
        if b <= at <= last.get(v, b):
            n = producers[v]
            total, values = groups.get((n.op, n.phase, n.source), (0, 0))
            groups[(n.op, n.phase, n.source)] = (total + v.nbytes, values + 1)
    return sorted(groups.items(), key=lambda kv: -kv[1][0])[:count]


class _Tables:
    """The dynamic programme over the chain, solved once for every bound on a run of dropped
    residuals: for each bound and each kept size (in units), the cheapest recomputation."""

    def __init__(self, sizes: list[int], costs: list[float], forced: list[bool]):
        self.sizes, self.costs, self.forced = sizes, costs, forced
        self.unit = max(1, math.ceil(max(sizes) / UNITS))
        self.units = [math.ceil(s / self.unit) for s in sizes]
        self.total = sum(self.units)
        n = len(sizes)
        bounds = set(range(0, min(n, 2 * math.isqrt(n) + 4) + 1))
        bounds |= {round(n ** (k / 8)) for k in range(9)}
        self.tables = {b: self._table(b * max(sizes)) for b in sorted(bounds)}

    def _table(self, bound: int) -> tuple[np.ndarray, list[np.ndarray], int]:
        """dp[i][m]: least cost for residuals before i with i kept and m units kept (i = n+1 is
        the end of forward); back[i][m]: the kept residual before it."""
        n, width = len(self.sizes), self.total + 1
        dp = [np.full(width, np.inf) for _ in range(n + 2)]
        back = [np.full(width, -1, np.int64) for _ in range(n + 2)]
        dp[0][0] = 0.0
        longest = 0
        for i in range(1, n + 2):
            u = self.units[i - 1] if i <= n else 0
            run_bytes, run_cost = 0, 0.0
            for j in range(i - 1, -1, -1):  # residuals j+1..i-1 dropped, j kept (0: the start)
                cand = dp[j][: width - u] + run_cost
                better = cand < dp[i][u:]
                dp[i][u:][better] = cand[better]
                back[i][u:][better] = j
                if j == 0 or self.forced[j - 1] or run_bytes + self.sizes[j - 1] > bound:
                    break
                run_bytes += self.sizes[j - 1]
                run_cost += self.costs[j - 1]
                longest = max(longest, run_bytes)
        return dp[n + 1], back, longest

    def _kept(self, bound: int, m: int) -> list[int]:
        _, back, _ = self.tables[bound]
        kept, i = [], len(self.sizes) + 1
        while i > 0:
            j = int(back[i][m])
            m -= self.units[i - 1] if i <= len(self.sizes) else 0
            if j > 0:
                kept.append(j - 1)
            i = j
        return kept[::-1]

    def _estimates(self, alpha: float):
        for bound, (last, _, longest) in self.tables.items():
            for m in np.flatnonzero(np.isfinite(last)):
                yield m * self.unit + alpha * longest, float(last[m]), bound, int(m)

    def cheapest(self, room: float, alpha: float) -> tuple[float, list[int]] | None:
        """The cheapest plan whose modelled peak above the base is within `room` bytes."""
        fits = [(c, e, b, m) for e, c, b, m in self._estimates(alpha) if e <= room]
        if not fits:
            return None
        cost, _, bound, m = min(fits)
        return cost, self._kept(bound, m)

    def frugal(self):
        """For each bound on a run, in increasing order, the plan that keeps the fewest units."""
        for bound, (last, _, _) in self.tables.items():
            finite = np.flatnonzero(np.isfinite(last))
            if finite.size:
                yield self._kept(bound, int(finite[0]))

    def kept_bytes(self, kept: list[int]) -> int:
        return sum(self.sizes[i] for i in kept)

    def cost(self, kept: list[int]) -> float:
        return sum(c for i, c in enumerate(self.costs) if i not in set(kept))

    def longest_run(self, kept: list[int]) -> int:
        run = longest = 0
        keep = set(kept)
        for i, s in enumerate(self.sizes):
            run = 0 if i in keep else run + s
            longest = max(longest, run)
        return longest

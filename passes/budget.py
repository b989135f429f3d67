"""Memory budget: choose which forward values backward keeps and which it recomputes, matmuls
included, so that the step's planned peak stays under a budget, at the least estimated extra
compute; or refuse with the smallest peak that is reachable.

The residuals (forward values that backward reads, after `remat` made cheap ones recomputable)
are taken in forward order as a chain r_1..r_n; rebuilding r_i from r_{i-1} costs the forward
nodes between them (`Primitive.cost` priced with rates measured once on this machine). With m
units of memory for residuals, a dynamic programme over segments (Beaumont et al., "Optimal
checkpointing for heterogeneous chains", 2019; revolve's recursion, Griewank and Walther 2000)
gives the least recomputation: forward keeps some residuals, and whenever backward needs one
that is not held, the segment below it is rebuilt from the nearest held residual, holding the
checkpoints the programme chose on the way: checkpoints nest as deep as the memory requires.
The programme also knows that the memory backward holds grows as it goes (each layer's new
parameter values appear when its gradient does), so it spends the room early in backward.
Each m tried is built and checked with the real planner (`peak_of`: the rest of the pipeline
and `plan_memory`), so what is returned fits by construction."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import numpy as np

from tracegrad.core.errors import MemoryBudgetError
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.vocabulary import Phase

from .base import PassStats, clone, is_view, last_uses, nbytes
from .memory import plan_memory
from .remat import saved_values
from .schedule import schedule

UNITS = 4  # memory is counted in quarters of the largest residual by the programme


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
    After it ran, `recomputed` lists the residuals forward does not keep, `extra_s` and `step_s`
    the estimated seconds of all recomputation and of the whole step, `peak` the verified peak."""

    def __init__(self, limit: int, peak_of: Callable[[Graph], int] = default_peak,
                 in_place: set[int] | frozenset[int] = frozenset()):  # fmt: skip
        self.limit, self.peak_of = int(limit), peak_of
        self.in_place = in_place  # positions of outputs written into the state they replace
        self.recomputed: list[tuple[Value, Node]] = []
        self.extra_s = self.step_s = 0.0
        self.peak: int | None = None

    def __call__(self, graph: Graph) -> tuple[Graph, PassStats]:
        chain = _Chain(graph, self.in_place)
        self.step_s = sum(seconds(n) for n in graph.nodes)
        slots = chain.solve(self.limit, self.peak_of)
        kept = chain.kept(slots)
        producers = graph.producers()
        self.recomputed = [(v, producers[v]) for v in chain.residuals if v not in kept]
        self.extra_s = chain.extra_s(slots)
        self.peak = chain.peaks[slots]
        note = (
            f"budget {_mib(self.limit)}: planned {_mib(self.peak)}, "
            f"{len(self.recomputed)} residuals recomputed"
        )
        freed = sum(v.nbytes for v, _ in self.recomputed)  # no longer kept for backward
        after = chain.build(slots)
        return after, PassStats("budget", len(graph.nodes), len(after.nodes), freed, note)


class _Chain:
    """The residuals of one graph in forward order, their bytes, costs, the programme over
    them, and what each number of memory units (`slots`; None: keep everything) peaks at."""

    def __init__(self, graph: Graph, in_place: set[int] | frozenset[int] = frozenset()):
        self.graph = graph
        self.in_place = {graph.outputs[i] for i in in_place}
        self.producers = graph.producers()
        order = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
        inputs, outputs = set(graph.inputs), set(graph.outputs)
        self.residuals = sorted(
            (v for v in saved_values(graph) if v not in inputs), key=order.__getitem__
        )
        # outputs of forward nodes that cannot run twice (`Primitive.may_rerun`: random draws,
        # effects, opaque ops), read by forward nodes that can: always available, never rebuilt
        self.pinned = {
            v
            for n in graph.nodes
            if n.phase is Phase.FORWARD and not n.prim.may_rerun
            for v in n.outputs
        }
        everything = set(self.residuals)
        costs, forced = [], []
        for v in self.residuals:
            nodes = self._rebuild(v, everything - {v}, {})
            forced.append(nodes is None or v in outputs or v in self.pinned)
            costs.append(sum(seconds(n) for n in nodes or ()))
        sizes = [v.nbytes for v in self.residuals]
        self.programme = _Programme(sizes, costs, forced, self._growth())
        self.peaks: dict[int | None, int] = {}

    def _growth(self) -> list[int]:
        """Per residual, the bytes of step results (new parameter and optimizer state values,
        held to the step's end) that appear while backward serves it, in the scheduled step."""
        nodes = schedule(self.graph)[0].nodes
        position = {v: i for i, v in enumerate(self.residuals)}
        outputs = set(self.graph.outputs) - self.in_place  # in place: nothing held
        served, appear = [-1] * len(self.residuals), []
        for t, n in enumerate(nodes):
            if n.phase is not Phase.FORWARD:
                for v in n.inputs:
                    if v in position:
                        served[position[v]] = t
            if n.phase is Phase.UPDATE:
                appear += [(t, v.nbytes) for v in n.outputs if v in outputs]
        growth = [0] * len(self.residuals)
        for t, size in appear:  # served in reverse order: the lowest not yet served at t
            serving = [i for i, s in enumerate(served) if s >= t]
            if serving:
                growth[max(serving)] += size
        return growth

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
            if n.phase is not Phase.FORWARD or not n.prim.may_rerun:
                return None
            if expanded:
                done.update(n.outputs)
                nodes.append(n)
                continue
            stack.append((x, True))
            stack.extend((i, False) for i in n.inputs if i not in done)
        return nodes

    def kept(self, slots: int | None) -> set[Value]:
        """The residuals forward keeps."""
        if slots is None:
            return set(self.residuals)
        return {self.residuals[i - 1] for i in self.programme.forward_keeps(slots)}

    def extra_s(self, slots: int | None) -> float:
        return 0.0 if slots is None else self.programme.extra(slots)

    def build(self, slots: int | None) -> Graph:
        """The graph that keeps what forward keeps under `slots`; whenever a node outside
        forward reads a residual that is not held, the programme's rebuild runs right before
        it, and the checkpoints it keeps on the way are held for later reads."""
        kept = self.kept(slots)
        if len(kept) == len(self.residuals):
            return self.graph
        position = {v: i + 1 for i, v in enumerate(self.residuals)}
        held: dict[Value, Value] = {}  # residual -> the clone of it backward reads now
        nodes: list[Node] = []
        grows: list[int] = []  # per node in `nodes`: bytes it leaves alive beyond what it frees
        last = last_uses(self.graph)
        for i, n in enumerate(self.graph.nodes):
            if n.phase is not Phase.FORWARD:
                rebuilt = []
                for v in n.inputs:
                    if v in position and v not in kept and v not in held:
                        rebuilt += self._bring(position[v], slots, kept, held)
                at = _quietest(nodes, grows)
                nodes[at:at], grows[at:at] = rebuilt, [0] * len(rebuilt)
                inputs = [held.get(v, v) for v in n.inputs]
                n = n.replace(inputs=inputs)
            nodes.append(n)
            dying = [v for v in dict.fromkeys(n.inputs) if last.get(v) == i]
            grows.append(0 if is_view(n) else nbytes(n.outputs) - nbytes(dying))
        return Graph(self.graph.inputs, nodes, self.graph.outputs)

    def _bring(self, target: int, slots: int, kept: set, held: dict) -> list[Node]:
        """Rebuild residual `target` (a position 1..n) from the nearest residual below it that
        is held, through the checkpoints the programme chooses for the units still free."""
        below = [i for i in range(1, target) if self.residuals[i - 1] in kept | held.keys()]
        start = max(below, default=0)
        free = slots - sum(self.programme.units[i] for i in below)
        free -= self.programme.grown_after(target)
        nodes: list[Node] = []
        while start < target:
            step = self.programme.next_checkpoint(start, target, free) or target
            clones = dict(held)
            v = self.residuals[step - 1]
            for c in self._rebuild(v, kept, clones) or ():
                nodes.append(clone(c, clones, Phase.REBUILD))
            held[v] = clones[v]
            free -= self.programme.units[step]
            start = step
        return nodes

    def check(self, slots: int | None, peak_of: Callable[[Graph], int]) -> int:
        if slots not in self.peaks:
            self.peaks[slots] = peak_of(self.build(slots))
        return self.peaks[slots]

    def solve(self, limit: int, peak_of: Callable[[Graph], int]) -> int | None:
        """The most memory units whose checked plan fits `limit` (the least recomputation);
        None if keeping everything fits."""
        full = self.check(None, peak_of)
        if full <= limit:
            return None
        prog = self.programme
        if prog.least is None:  # nothing can be recomputed: an inference step, say
            raise MemoryBudgetError(self._refusal(limit, None), full)
        base = full - sum(v.nbytes for v in self.residuals)
        high = min(prog.total - 1, max(prog.least, (limit - base) // prog.unit))
        if self.check(high, peak_of) <= limit:
            return high
        low = self._frugal(limit, peak_of)
        while high - low > 1:  # the checked peak grows with the units, nearly always
            middle = (low + high) // 2
            low, high = (middle, high) if self.check(middle, peak_of) <= limit else (low, middle)
        return low

    def _frugal(self, limit: int, peak_of: Callable[[Graph], int]) -> int:
        """The most units that fit among the fewest, checked from the least up until the peak
        has risen three times in a row; else the refusal with the lowest peak seen. Not
        depending on the budget, so that the minimum it reports always fits."""
        rising, lowest = 0, self.peaks[None]
        for slots in range(self.programme.least, self.programme.total):
            peak = self.check(slots, peak_of)
            rising = 0 if peak < lowest else rising + 1
            lowest = min(lowest, peak)
            if rising == 3:
                break
        fits = [s for s, peak in self.peaks.items() if s is not None and peak <= limit]
        if fits:
            return max(fits)
        # keeping every residual may peak lowest of all (a ReLU's pooling keeps only the pooled
        # values): then that is the smallest peak found, and a budget of it fits
        minimum = min(self.peaks, key=self.peaks.__getitem__)
        raise MemoryBudgetError(self._refusal(limit, minimum), self.peaks[minimum])

    def _refusal(self, limit: int, slots: int | None) -> str:
        minimum = self.peaks[slots]
        scheduled = schedule(self.build(slots))[0]
        shown = "; ".join(
            f"{_mib(total)} in {count} values from {op} ({phase}) at {source}"
            for (op, phase, source), (total, count) in dominating(scheduled, self.in_place)
        )
        return (
            f"memory budget {_mib(limit)} ({limit} bytes) is below the smallest planned peak "
            f"of this step that was found, {_mib(minimum)} ({minimum} bytes), keeping "
            f"{len(self.kept(slots))} of {len(self.residuals)} residuals in forward and "
            f"recomputing the rest. {floor(scheduled, self.in_place)}; alive where most is "
            f"alive: {shown}"
        )


def _quietest(nodes: list[Node], grows: list[int]) -> int:
    """Where a rebuild goes in `nodes`: before the backward nodes at the end that only add to
    what is alive (a gradient computed before the rebuilt value it meets), which then run
    after the rebuild instead of holding their results through it."""
    at = len(nodes)
    while at and nodes[at - 1].phase not in (Phase.FORWARD, Phase.REBUILD) and grows[at - 1] >= 0:
        at -= 1
    while at < len(nodes) and grows[at] == 0:  # no gain in running these after it
        at += 1
    return at


def _alive_at_peak(graph: Graph, in_place: set[Value]) -> list[tuple[Value, Node]]:
    """The values alive where the schedule holds the most bytes (results the step returns or
    writes to state stay alive to its end, except new state values written in place), with the
    nodes that make them."""
    born = {v: i for i, n in enumerate(graph.nodes) if not is_view(n) for v in n.outputs
            if v not in in_place}  # fmt: skip
    last = last_uses(graph)
    delta = np.zeros(len(graph.nodes) + 2)
    for v, b in born.items():
        delta[b] += v.nbytes
        delta[last.get(v, b) + 1] -= v.nbytes
    at = int(np.argmax(np.cumsum(delta)))
    producers = graph.producers()
    return [(v, producers[v]) for v, b in born.items() if b <= at <= last.get(v, b)]


def floor(graph: Graph, in_place: set[Value] | frozenset[Value] = frozenset()) -> str:
    """What the step's peak consists of (activations: forward values and their recomputation;
    gradients: backward's results; update: new state values and the update's temporaries), and
    what would lower it."""
    parts = {"activations": 0, "gradients": 0, "update": 0}
    for v, n in _alive_at_peak(graph, set(in_place)):
        if n.phase is Phase.BACKWARD:
            parts["gradients"] += v.nbytes
        elif n.phase is Phase.UPDATE:
            parts["update"] += v.nbytes
        else:
            parts["activations"] += v.nbytes
    largest = max(parts, key=parts.__getitem__)
    lower = {
        "activations": "a smaller batch, or fewer values that cannot be recomputed",
        "gradients": "updates that need no gradient but their own (no clipping by global norm, "
        "no .grad kept across calls), so that each dies at its update inside backward",
        "update": "new state values written in place: nothing that may fail after the update "
        "(the commit point) and no read of the old values after it",
    }[largest]
    shown = ", ".join(f"{_mib(b)} {k}" for k, b in parts.items())
    return (
        f"At that peak (values of the unfused schedule): {shown}; what would lower it most: {lower}"
    )


def dominating(
    graph: Graph, in_place: set[Value] | frozenset[Value] = frozenset(), count: int = 4
) -> list[tuple[tuple, tuple[int, int]]]:
    """The values alive where the schedule holds the most bytes, grouped by op, phase and user
    line, largest first: ((op, phase, source), (bytes, values))."""
    groups: dict[tuple, tuple[int, int]] = {}
    for v, n in _alive_at_peak(graph, set(in_place)):
        total, values = groups.get((n.op, n.phase, n.source), (0, 0))
        groups[(n.op, n.phase, n.source)] = (total + v.nbytes, values + 1)
    return sorted(groups.items(), key=lambda kv: -kv[1][0])[:count]


class _Programme:
    """The dynamic programme over the chain. Positions 1..n are the residuals, 0 the start of
    the step (always available); memory is counted in units of `unit` bytes, forced residuals
    (never recomputable) are held outside it. For a segment (a, b] whose residual a is held,
    with m units free:

      reverse[a, b, m] = least cost of giving backward r_b, r_{b-1}, ..., r_{a+1} in turn:
          min over j in (a, b] of  cost(a -> j) + reverse[j, b, m - units_j]
                                                + reverse[a, j - 1, m - grown(j, b)]
      (rebuild r_j from r_a and hold it; serve the part above it; then, r_j served and
      freed, the part below it, with less memory by what serving r_b .. r_j made permanent:
      the new parameter values of those layers, held to the step's end), and

      forward[a, b, m] = the same while forward first computes the segment, for free:
          min(reverse[a, b, m],  min over j of  forward[j, b, m - units_j]
                                                + reverse[a, j - 1, m - grown(j, b)])

    A forced residual f (one that cannot be rebuilt) is held outside the units: it splits
    reverse's segment, and forward's first kept residual is f or one before it. The tables hold
    each minimum's j, from which `forward_keeps` and `next_checkpoint` read the schedule."""

    def __init__(
        self,
        sizes: list[int],
        costs: list[float],
        forced: list[bool],
        growth: list[int] | None = None,
    ):
        n = len(sizes)
        self.unit = max(1, math.ceil(max(sizes, default=1) / UNITS))
        self.forced = [True] + list(forced)  # position 0, the start, is always available
        self.units = [
            0 if f else math.ceil(s / self.unit)  # forced residuals: held outside the units
            for s, f in zip([0, *sizes], self.forced, strict=True)
        ]
        self.grown = np.concatenate([[0.0], np.cumsum(growth or [0] * n)]) / self.unit
        self.total = sum(self.units) + math.ceil(self.grown[-1]) + 1
        prefix = np.concatenate([[0.0], np.cumsum(costs)])
        shape = (n + 1, n + 1, self.total + 1)
        self.reverse, self.forward = np.full(shape, np.inf), np.full(shape, np.inf)
        self.reverse_at = np.zeros(shape, np.int32)
        self.forward_at = np.zeros(shape, np.int32)
        for a in range(n + 1):
            self.reverse[a, a] = self.forward[a, a] = 0.0
        for length in range(1, n + 1):
            for a in range(n + 1 - length):
                self._segment(a, a + length, prefix)
        finite = np.flatnonzero(np.isfinite(self.forward[0, n]))
        self.least = int(finite[0]) if finite.size else None

    def _segment(self, a: int, b: int, prefix: np.ndarray) -> None:
        forced = [f for f in range(a + 1, b + 1) if self.forced[f]]
        width = self.total + 1
        if forced:  # r_f is held anyway: serve above it, then below it
            f = forced[-1]
            self.reverse[a, b] = self.reverse[f, b] + self._below(a, np.array([f]), b, 0)[0]
            self.reverse_at[a, b] = f
        else:
            reverse, reverse_at = np.full(width, np.inf), np.zeros(width, np.int32)
            for u, j in self._by_units(np.arange(a + 1, b + 1)):
                rebuilt = (prefix[j] - prefix[a])[:, None] + self.reverse[j, b, : width - u]
                _improve(rebuilt + self._below(a, j, b, u), j, reverse[u:], reverse_at[u:])
            self.reverse[a, b], self.reverse_at[a, b] = reverse, reverse_at
        # forward keeps the first residual at or before the first forced one, or none at all
        forward, forward_at = np.full(width, np.inf), np.zeros(width, np.int32)
        if not forced:
            forward[:] = self.reverse[a, b]  # at 0: keep nothing
        for u, j in self._by_units(np.arange(a + 1, (forced or [b])[0] + 1)):
            kept = self.forward[j, b, : width - u] + self._below(a, j, b, u)
            _improve(kept, j, forward[u:], forward_at[u:])
        self.forward[a, b], self.forward_at[a, b] = forward, forward_at

    def _below(self, a: int, j: np.ndarray, b: int, u: int) -> np.ndarray:
        """reverse[a, j - 1, m - grown] for m = u.. (one row per j): serving r_b .. r_j made
        `grown` units more memory permanent (new parameter values, held to the step's end)."""
        m = np.arange(u, self.total + 1)[None, :] - self._grown(j - 1, b)[:, None]
        rows = self.reverse[a, j - 1]
        below = rows[np.arange(len(j))[:, None], np.maximum(m, 0)]
        below[m < 0] = np.inf
        return below

    def grown_after(self, b: int) -> int:
        """Units made permanent by serving r_n .. r_{b+1}."""
        return int(self._grown(b, len(self.grown) - 1))

    def _grown(self, lo, hi):
        """Units made permanent by serving r_hi .. r_{lo+1} (whole units, rounded up)."""
        return np.ceil(self.grown[hi] - self.grown[lo] - 1e-9).astype(np.int64)

    def _by_units(self, js: np.ndarray):
        units = np.array(self.units)[js]
        for u in np.unique(units):
            if u <= self.total:
                yield int(u), js[units == u]

    def forward_keeps(self, slots: int) -> list[int]:
        """The positions forward keeps with `slots` units."""
        keeps, a, b = [], 0, len(self.units) - 1
        while a < b and (j := int(self.forward_at[a, b, slots])) > 0:
            keeps.append(j)
            slots -= self.units[j]
            a = j
        return keeps + [f for f in range(1, b + 1) if self.forced[f] and f not in keeps]

    def next_checkpoint(self, a: int, b: int, free: int) -> int | None:
        """Where to stop and hold a checkpoint when backward needs r_b and r_a is the nearest
        held residual below it; None if no schedule fits `free` units (rebuild r_b directly)."""
        free = min(max(free, 0), self.total)
        if not np.isfinite(self.reverse[a, b, free]):
            return None
        return int(self.reverse_at[a, b, free])

    def extra(self, slots: int) -> float:
        """Estimated seconds of recomputation with `slots` units."""
        return float(self.forward[0, len(self.units) - 1, slots])


def _improve(candidates: np.ndarray, js: np.ndarray, best: np.ndarray, at: np.ndarray) -> None:
    """Per column (units free), the least candidate row and its j, where it beats `best`."""
    k = np.argmin(candidates, axis=0)
    value = candidates[k, np.arange(candidates.shape[1])]
    better = value < best
    best[better] = value[better]
    at[better] = js[k[better]]

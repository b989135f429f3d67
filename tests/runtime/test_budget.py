"""@trace(memory_budget=...): the plan fits the budget (planned and measured), computes what eager
computes, recomputes matmuls when it must, refuses a budget below the reachable minimum with
that minimum; the chain programme is optimal against brute force."""

import heapq
import itertools

import numpy as np
import pytest

import tracegrad as tg
from passes.budget import Budget, _Programme
from tests.conftest import classifier_step
from tests.runtime.test_trace import MLP, batches, run_eager
from tracegrad.compiler import lowering
from tracegrad.core.vocabulary import Kind, Phase
from tracegrad.runtime import budget as runtime_budget
from tracegrad.runtime import eager as eager_kernels

SIZES = (16, 64, 64, 64, 64, 64, 64, 64, 64, 4)  # activations outweigh parameters
BATCH = 512


@pytest.fixture(autouse=True)
def compile_every_group(monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)


def unbudgeted_peak(backend: str) -> int:
    step = tg.trace(MLP(SIZES, np.float32, "gelu").step, backend=backend)
    step(*batches(1, np.float32, SIZES, batch=BATCH)[0])
    return step.latest.memory.peak


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_budgeted_step_fits_and_matches_eager(backend):
    budget = unbudgeted_peak(backend) * 3 // 4
    data = batches(3, np.float32, SIZES, batch=BATCH)
    eager, traced = MLP(SIZES, np.float32, "gelu"), MLP(SIZES, np.float32, "gelu")
    losses_e = run_eager(eager, data)
    eager_kernels.wait_for_kernels()  # not loading (allocating) while the step's peak is measured
    step = tg.trace(traced.step, backend=backend, memory_budget=budget)
    losses_t = [float(step(x, y)) for x, y in data]
    np.testing.assert_allclose(losses_t, losses_e, rtol=1e-4)
    for a, b in zip(traced.state(), eager.state(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    plan = step.latest
    assert plan.memory.peak <= budget
    assert abs(plan.run.peak - plan.memory.peak) <= 0.1 * plan.memory.peak
    recomputed = [n for n in plan.graph.nodes if n.phase is Phase.REBUILD]
    assert any(n.prim.kind is Kind.CONTRACTION for n in recomputed)  # matmuls run again
    assert plan.budget.recomputed and plan.budget.extra_s > 0
    report = step.report()
    for words in ("budget", "memory budget", "recomputed under the budget", "test_trace.py"):
        assert words in report
    if backend == "numba":
        assert any(n.prim.kind is Kind.COMPOSITE for n in plan.graph.nodes)  # kernels remain


def test_a_budget_the_step_already_fits_changes_nothing():
    full = unbudgeted_peak("numpy")
    step = tg.trace(MLP(SIZES, np.float32, "gelu").step, backend="numpy", memory_budget=full)
    step(*batches(1, np.float32, SIZES, batch=BATCH)[0])
    assert step.latest.budget.recomputed == []
    assert step.latest.memory.peak == full


def test_an_infeasible_budget_is_refused_with_the_minimum_which_then_fits():
    x, y = batches(1, np.float32, SIZES, batch=BATCH)[0]
    step = tg.trace(MLP(SIZES, np.float32, "gelu").step, backend="numpy", memory_budget=10_000)
    with pytest.raises(tg.MemoryBudgetError) as err:
        step(x, y)
    minimum = err.value.minimum
    assert 10_000 < minimum < unbudgeted_peak("numpy")
    assert f"{minimum} bytes" in str(err.value) and "test_trace.py:" in str(err.value)
    assert isinstance(err.value, MemoryError)
    step = tg.trace(MLP(SIZES, np.float32, "gelu").step, backend="numpy", memory_budget=minimum)
    step(x, y)
    assert step.latest.memory.peak <= minimum
    assert abs(step.latest.run.peak - step.latest.memory.peak) <= 0.1 * minimum


def conv_step():
    """A small CNN step whose convolutions' columns (temporaries inside the op) are a large
    share of its memory."""
    from tracegrad import nn, optim

    nn.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(16 * 14 * 14, 10))  # fmt: skip
    step = classifier_step(model, optim.SGD(model.parameters(), lr=0.1))
    rng = np.random.default_rng(0)
    return step, rng.standard_normal((64, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 64)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_convolution_plan_counts_the_columns_it_allocates(backend):
    """The planned peak includes each op's temporaries (`Primitive.scratch`): measured within
    10% of planned, unbudgeted and at the smallest budget that fits."""
    step, x, y = conv_step()
    traced = tg.trace(step, backend=backend)
    traced(x, y)
    plan = traced.latest
    assert abs(plan.run.peak - plan.memory.peak) <= 0.1 * plan.memory.peak
    with pytest.raises(tg.MemoryBudgetError) as err:
        tg.trace(conv_step()[0], backend=backend, memory_budget=10_000)(x, y)
    budgeted = tg.trace(conv_step()[0], backend=backend, memory_budget=err.value.minimum)
    budgeted(x, y)
    assert budgeted.latest.memory.peak <= err.value.minimum <= plan.memory.peak
    assert budgeted.latest.run.peak <= 1.05 * err.value.minimum


def test_budget_sizes_and_shares_parse():
    assert runtime_budget.parse_budget(1234) == 1234
    assert runtime_budget.parse_budget("300MB") == 300 * 10**6
    assert runtime_budget.parse_budget("1.5 GiB") == 3 * 2**29
    assert runtime_budget.parse_budget("64kib") == 2**16
    share = runtime_budget.parse_budget("40%")
    assert 0 < share == int(runtime_budget.available_memory() * 0.4)
    for bad in ("lots", "-3MB", "0", "150%", 0, -5, "12 parsecs", True):
        with pytest.raises(ValueError, match="memory_budget"):
            runtime_budget.parse_budget(bad)


def test_budget_pass_runs_as_an_ordinary_pass():
    """Without the runtime's planner check it verifies with schedule + plan_memory."""
    import passes

    model = MLP(SIZES, np.float32, "gelu")
    step = tg.trace(model.step, backend="numpy", passes=passes.DEFAULT[:-1])
    step(*batches(1, np.float32, SIZES, batch=BATCH)[0])
    graph = step.graph
    full = passes.plan_memory(passes.schedule(graph)[0]).peak
    budget = Budget(full * 3 // 4)
    after, stats = budget(graph)
    after.verify()
    assert stats.name == "budget" and budget.peak <= full * 3 // 4
    assert passes.plan_memory(passes.schedule(after)[0]).peak == budget.peak


def least_cost_by_search(units, costs, forced, slots, growth):
    """Dijkstra over every schedule, independent of the programme: a state is the set of held
    residuals and the next residual backward needs (n down to 1). Forward may keep any set that
    fits; then either backward takes the next residual, if held (and frees it, while its
    `growth` units become held for good), or a held residual p below it (or the start, 0) is
    run forward to some j, which is then held, at the cost of stages p+1..j. Forced residuals
    are always held and take no units."""
    n = len(units)
    free = {i + 1 for i in range(n) if not forced[i]}
    always = frozenset(i + 1 for i in range(n) if forced[i])
    size = {i + 1: units[i] for i in range(n)}
    grown = lambda k: sum(growth[k:])  # noqa: E731  (served: n down to k + 1)
    fits = lambda held, k=n: sum(size[i] for i in held if i in free) + grown(k) <= slots  # noqa: E731
    starts = [
        frozenset(c) | always
        for r in range(len(free) + 1)
        for c in itertools.combinations(sorted(free), r)
        if fits(c)
    ]
    ties = itertools.count()  # never compare the sets
    queue = [(0.0, next(ties), held, n) for held in starts]
    heapq.heapify(queue)
    seen = set()
    while queue:
        cost, _, held, k = heapq.heappop(queue)
        if k == 0:
            return cost
        if (held, k) in seen:
            continue
        seen.add((held, k))
        if k in held:
            if fits(held - {k}, k - 1):
                heapq.heappush(queue, (cost, next(ties), held - {k}, k - 1))
            continue
        for p in [0, *(i for i in held if i < k)]:
            for j in range(p + 1, k + 1):
                after = held | {j}
                if fits(after, k):
                    step = cost + sum(costs[p:j])
                    heapq.heappush(queue, (step, next(ties), after, k))
    return np.inf


@pytest.mark.parametrize("seed", range(6))
def test_checkpointing_programme_is_optimal(seed):
    """The programme's least recomputation equals an exhaustive search's at every memory, with
    memory made permanent as backward goes (new parameter values)."""
    rng = np.random.default_rng(seed)
    n = 6
    sizes = [int(s) for s in rng.integers(1, 5, n) * 1000]
    costs = [float(c) for c in rng.random(n)]
    forced = [bool(f) for f in rng.random(n) < 0.2]
    unit = _Programme(sizes, costs, forced).unit
    growth = [int(g) * unit for g in rng.integers(0, 3, n)]  # new values: whole units
    prog = _Programme(sizes, costs, forced, growth)
    units = prog.units[1:]
    for slots in range(prog.total):
        expected = least_cost_by_search(units, costs, forced, slots, [g // unit for g in growth])
        assert prog.forward[0, n, slots] == pytest.approx(expected), slots
        if np.isfinite(expected):
            assert prog.least <= slots and prog.extra(slots) == pytest.approx(expected)
    assert prog.least == min(s for s in range(prog.total) if np.isfinite(prog.forward[0, n, s]))


def test_a_share_is_taken_when_tracing_and_a_bad_budget_fails_at_once():
    with pytest.raises(ValueError, match="memory_budget"):
        tg.trace(lambda x: x, memory_budget="half")
    step = tg.trace(MLP(SIZES, np.float32, "gelu").step, backend="numpy", memory_budget="40%")
    step(*batches(1, np.float32, SIZES, batch=BATCH)[0])
    assert step.latest.budget.limit == pytest.approx(
        0.4 * runtime_budget.available_memory(), rel=0.2
    )
    assert step.latest.budget.recomputed == []


def test_a_step_with_nothing_to_recompute_is_refused_with_its_own_peak():
    model = MLP(SIZES, np.float32, "gelu")
    x = batches(1, np.float32, SIZES, batch=BATCH)[0][0]
    full = tg.trace(model.forward, backend="numpy")
    full(x)
    step = tg.trace(model.forward, backend="numpy", memory_budget=1000)
    with pytest.raises(tg.MemoryBudgetError) as err:
        step(x)
    assert err.value.minimum == full.latest.memory.peak


def minimum_budget(approximate: str, backend: str = "numpy") -> int:
    """The smallest feasible budget of an 8-layer GELU MLP's step (traced and planned only)."""
    from tracegrad import nn, optim
    from tracegrad.frontend.tracer import capture
    from tracegrad.nn import functional as F

    nn.manual_seed(0)
    layers = [m for _ in range(8) for m in (nn.Linear(64, 64), nn.GELU(approximate=approximate))]
    model = nn.Sequential(*layers, nn.Linear(64, 10))
    gm, opt = tg.GradManager().attach(model.parameters()), optim.SGD(model.parameters(), lr=0.1)

    def step(x, labels):
        with gm:
            gm.backward(F.cross_entropy(model(x), labels))
        opt.step()
        opt.zero_grad()

    data = (tg.tensor(np.ones((256, 64), np.float32)), tg.tensor(np.zeros(256, np.int64)))
    traced = tg.trace(step, backend=backend, memory_budget=1)
    with pytest.raises(tg.MemoryBudgetError) as err:
        traced._compile(capture(step, data, {}))
    return err.value.minimum


def test_exact_gelu_needs_no_more_memory_than_tanh_gelu():
    """Exact GELU's backward reads two scaled copies of the pre-activation; remat keeps the
    pre-activation alone (a minimum cut), so the budget can drop them too. Keeping both copies,
    the smallest feasible budget was 2.8x tanh-GELU's."""
    assert minimum_budget("none") <= 1.05 * minimum_budget("tanh")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_rebuild_placed_where_memory_is_quietest_never_raises_the_smallest_budget(
    backend, monkeypatch
):
    """Backward computes a layer's input gradient before the rebuilt value the same layer's
    weight gradient needs; run after the rebuild, it is not held through it. Against rebuilding
    right before the node that reads the value, the 8-layer MLP's smallest budget is never
    higher. (It was 10% lower on Numba while kernels wrote a layer's gradient over its input's;
    they no longer do, and now the two places cost the same here:
    `test_a_rebuild_goes_after_the_last_node_that_frees_memory` checks the placement.)"""
    from passes import budget

    placed = minimum_budget("tanh", backend)
    monkeypatch.setattr(budget, "_quietest", lambda nodes, grows: len(nodes))
    assert placed <= minimum_budget("tanh", backend)


def test_a_rebuild_goes_after_the_last_node_that_frees_memory():
    from passes.budget import _quietest
    from tests.passes.test_passes import node, val

    x = val(4)
    made = [node(op, [x], (4,), phase)[0] for op, phase in
            [("exp", Phase.FORWARD), ("neg", Phase.BACKWARD), ("reshape", Phase.BACKWARD),
             ("sin", Phase.BACKWARD), ("cos", Phase.BACKWARD)]]  # fmt: skip
    assert _quietest(made, [16, -16, 0, 16, 16]) == 3  # before the two that only add
    assert _quietest(made, [16, -16, 0, 16, -16]) == 5  # the last frees: right before the reader
    assert _quietest(made[:1], [16]) == 1  # never before a forward node

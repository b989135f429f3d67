"""@trace against eager execution: same losses, parameters and state; retracing; write-back;
failed steps that lose nothing; TraceErrors; pytrees; printing and export."""

import functools
import gc
import threading
import types
import warnings
import weakref

import networkx as nx
import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch
from tracegrad.compiler import lowering
from tracegrad.core.vocabulary import Phase
from tracegrad.runtime import arena as runtime_arena
from tracegrad.runtime.trace import Traced


def gelu(u):
    return 0.5 * u * (1 + tg.tanh(0.7978845608 * (u + 0.044715 * u**3)))


ACTIVATIONS = {"tanh": tg.tanh, "gelu": gelu, "relu": lambda u: tg.maximum(u, 0.0)}


class MLP:
    """Parameters, a GradManager and SGD-with-momentum state, all plain tensors."""

    def __init__(self, sizes, dtype, act="tanh", seed=0, lr=0.05, momentum=0.9):
        rng = np.random.default_rng(seed)
        self.weights = [
            tg.tensor((rng.standard_normal((m, n)) / np.sqrt(m)).astype(dtype))
            for m, n in zip(sizes[:-1], sizes[1:], strict=True)
        ]
        self.biases = [tg.tensor(np.zeros(n, dtype)) for n in sizes[1:]]
        self.params = self.weights + self.biases
        self.bufs = [tg.zeros(p.shape, dtype) for p in self.params]
        self.gm = tg.GradManager().attach(self.params)
        self.act, self.lr, self.momentum = ACTIVATIONS[act], lr, momentum

    def forward(self, x):
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = x @ w + b
            if i < len(self.weights) - 1:
                x = self.act(x)
        return x

    def step(self, x, labels):
        with self.gm:
            logits = self.forward(x)
            loss = -tg.log_softmax(logits, axis=1)[np.arange(x.shape[0]), labels].mean()
            self.gm.backward(loss)
        with tg.no_grad():
            for p, buf in zip(self.params, self.bufs, strict=True):
                buf *= self.momentum
                buf += p.grad
                p -= self.lr * buf
                p.grad = None
        return loss

    def state(self):
        return [t.numpy().copy() for t in self.params + self.bufs]


def batches(n, dtype, sizes=(6, 16, 12, 4), batch=8, seed=1):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((batch, sizes[0])).astype(dtype), rng.integers(0, sizes[-1], batch))
        for _ in range(n)
    ]


def run_eager(model, data):
    return [float(model.step(tg.tensor(x), tg.tensor(y))) for x, y in data]


def run_traced(model, data, backend="numpy"):
    step = tg.trace(model.step, backend=backend)
    return [float(step(x, y)) for x, y in data], step


BACKENDS = ["numpy", "numba"]
EAGER_KERNEL_MIN = lowering.KERNEL_MIN  # the library's, before the fixture below lowers it


@pytest.fixture(autouse=True)
def compile_every_group(monkeypatch):
    """These nets are small: have the Numba backend compile every fused group anyway, so that
    its kernels are what the tests run."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)


def kernel_calls(step) -> int:
    return sum(line.lstrip().startswith("kernel") for line in step.latest.source.splitlines())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_traced_matches_eager_float64_to_rounding(act, backend):
    sizes, data = (6, 16, 12, 4), batches(5, np.float64)
    eager, traced = MLP(sizes, np.float64, act), MLP(sizes, np.float64, act)
    losses_e = run_eager(eager, data)
    losses_t, step = run_traced(traced, data, backend)
    assert (kernel_calls(step) > 0) == (backend == "numba")
    np.testing.assert_allclose(losses_t, losses_e, rtol=1e-12)
    for a, b in zip(traced.state(), eager.state(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_traced_matches_eager_float32_over_20_steps(backend):
    sizes, data = (6, 32, 32, 4), batches(20, np.float32, (6, 32, 32, 4), batch=16)
    eager, traced = MLP(sizes, np.float32, "gelu"), MLP(sizes, np.float32, "gelu")
    losses_e = run_eager(eager, data)
    losses_t, step = run_traced(traced, data, backend)
    np.testing.assert_allclose(losses_t, losses_e, rtol=1e-4)
    for a, b in zip(traced.state(), eager.state(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert sum(len(p) for p in step.plans.values()) == 1  # one trace served all 20 steps
    assert (kernel_calls(step) > 0) == (backend == "numba")


def test_numba_compiles_only_groups_big_enough_to_gain(monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 128 * 32)  # a hidden layer's activations
    sizes = (6, 32, 32, 4)
    step = tg.trace(MLP(sizes, np.float32, "gelu").step, backend="numba")
    step(*batches(1, np.float32, sizes, batch=128)[0])
    calls = [line for line in step.latest.source.splitlines() if line.lstrip().startswith("kernel")]
    bodies = [line.split("# {")[1].split("}")[0] for line in calls if "# {" in line]
    assert bodies and all("tanh" in body for body in bodies)  # 32x32 updates, 128x4 softmax: NumPy
    assert f"nodes, {len(calls)} kernels" in step.report().splitlines()[0]  # with matmuls'
    assert len(calls) > len(bodies)


@pytest.fixture
def background(monkeypatch):
    """Background compilation (the default outside the tests), with the kernels held back until
    the test sets the returned event."""
    monkeypatch.setenv("TRACEGRAD_BACKGROUND_COMPILE", "1")
    release, real = threading.Event(), lowering.lower

    def held_back(graph, backend, compile=True, background=False):
        if background:
            assert release.wait(60)
        return real(graph, backend, compile, background)

    monkeypatch.setattr(lowering, "lower", held_back)
    return release


def test_kernels_compile_in_the_background_while_the_step_runs_numpy(background):
    """The first calls run the optimized graph as NumPy calls; the first call after the
    kernels are ready runs them; every call matches eager."""
    sizes, data = (6, 32, 32, 4), batches(6, np.float32, (6, 32, 32, 4), batch=16)
    eager, traced = MLP(sizes, np.float32, "gelu"), MLP(sizes, np.float32, "gelu")
    step = tg.trace(traced.step, backend="numba")
    losses = [float(step(x, y)) for x, y in data[:2]]
    plan = step.latest
    assert plan.pending is not None and kernel_calls(step) == 0
    assert plan.run.peak is None  # tracemalloc would slow the first call
    background.set()
    assert plan.pending.done.wait(60)
    losses += [float(step(x, y)) for x, y in data[2:]]
    assert plan.pending is None and kernel_calls(step) > 0 and step.latest is plan
    assert plan.run.peak is not None and plan.run.arena.buffer.nbytes >= plan.memory.arena
    np.testing.assert_allclose(losses, run_eager(eager, data), rtol=1e-4)
    for a, b in zip(traced.state(), eager.state(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_kernels_start_compiling_when_the_first_call_has_returned(monkeypatch):
    """Compilers beside the first call would take the cores it runs on."""
    monkeypatch.setenv("TRACEGRAD_BACKGROUND_COMPILE", "1")
    events, lower, run = [], lowering.lower, runtime_arena.MeasuredRun.__call__

    def noted_lower(graph, backend, compile=True, background=False):
        events.append("compile" if background else "lower")
        return lower(graph, backend, compile, background)

    def noted_run(self, inputs, finish):
        try:
            return run(self, inputs, finish)
        finally:
            events.append("call")

    monkeypatch.setattr(lowering, "lower", noted_lower)
    monkeypatch.setattr(runtime_arena.MeasuredRun, "__call__", noted_run)
    sizes = (6, 32, 32, 4)
    step = tg.trace(MLP(sizes, np.float32, "gelu").step, backend="numba")
    step(*batches(1, np.float32, sizes, batch=16)[0])
    step.wait_for_kernels()
    assert events == ["lower", "call", "compile"]


def test_inspecting_a_step_waits_for_its_kernels(background):
    sizes = (6, 32, 32, 4)
    step = tg.trace(MLP(sizes, np.float32, "gelu").step, backend="numba")
    step(*batches(1, np.float32, sizes, batch=16)[0])
    threading.Timer(0.2, background.set).start()
    assert "kernel" in step.source and step.latest.pending is None
    assert "kernels" in str(step.report()).splitlines()[0]


def test_a_step_whose_kernels_fail_to_compile_goes_on_with_numpy(background, monkeypatch):
    real, release = lowering.lower, background

    def failing(graph, backend, compile=True, background=False):
        if background:
            assert release.wait(60)
            raise RuntimeError("no compiler here")
        return real(graph, backend, compile, background)

    monkeypatch.setattr(lowering, "lower", failing)
    sizes, data = (6, 32, 32, 4), batches(3, np.float32, (6, 32, 32, 4), batch=16)
    eager, traced = MLP(sizes, np.float32, "gelu"), MLP(sizes, np.float32, "gelu")
    step = tg.trace(traced.step, backend="numba")
    losses = [float(step(*data[0]))]
    release.set()
    with pytest.warns(RuntimeWarning, match="failed to compile.*no compiler here"):
        step.wait_for_kernels()
    losses += [float(step(x, y)) for x, y in data[1:]]
    assert kernel_calls(step) == 0 and step.latest.run.peak is not None
    np.testing.assert_allclose(losses, run_eager(eager, data), rtol=1e-4)


def test_a_memory_budget_compiles_its_kernels_before_the_first_call(background):
    """NumPy calls in place of the kernels would not keep to the budget."""
    sizes = (6, 32, 32, 4)
    step = tg.trace(MLP(sizes, np.float32, "gelu").step, backend="numba", memory_budget="1GB")
    step(*batches(1, np.float32, sizes, batch=16)[0])
    assert step.latest.pending is None and kernel_calls(step) > 0


def test_tracing_runs_no_numeric_work_and_traces_once_per_signature():
    model, calls = MLP((6, 8, 4), np.float32), []

    def step(x, labels):
        calls.append(x.is_symbolic)
        return model.step(x, labels)

    traced = tg.trace(step, backend="numpy")
    for x, y in batches(3, np.float32, (6, 8, 4)):
        traced(x, y)
    assert calls == [True]
    x, y = batches(1, np.float32, (6, 8, 4), batch=5)[0]
    traced(x, y)  # a new batch size traces again; the first plan stays cached
    assert calls == [True, True]
    assert len(traced.plans) == 2


def test_a_call_checks_the_newest_plan_of_its_signature_first():
    w = tg.tensor(np.ones(3), requires_grad=True)

    @tg.trace(backend="numpy")
    def step(x):
        loss = (w * x).sum()
        loss.backward()  # the first call finds w.grad None, the later ones set
        return loss

    x = np.arange(3.0)
    for _ in range(3):
        step(x)
    ((first, second),) = step.plans.values()
    checked = []
    for plan in (first, second):
        holds = plan.capture.guards_hold
        plan.capture.guards_hold = lambda p=plan, h=holds: checked.append(p) or h()
    step(x)
    assert checked == [second]  # the stale plan's guards (one per state tensor) are not read
    np.testing.assert_allclose(w.grad.numpy(), 4 * x)


def test_a_signature_keeps_its_newest_plans_only():
    """A guard that fails at every call (a Python step count) traces at every call: the older
    plans, whose guards cannot hold again, are dropped rather than kept for the whole run."""
    count = {"n": 0}

    @tg.trace(backend="numpy")
    def step(x):
        n = count["n"]
        tg.guard(lambda: count["n"] == n)
        return x * n

    with pytest.warns(UserWarning, match="traced 8 times for one signature"):
        for n in range(12):
            count["n"] = n
            assert float(step(np.ones(()))) == n
    ((*_, newest),) = step.plans.values()
    assert len(next(iter(step.plans.values()))) == 8 and newest.capture.guards_hold()


def test_torch_compile_runs_eagerly_past_eight_traces_or_signatures():
    """Under `torch.compile` (fullgraph False) a signature traced 8 times (a Python step count
    an optimizer keeps), and any new signature past 8 (an int argument that counts), run
    eagerly from then on, as PyTorch's do past its cache_size_limit: tracing and compiling at
    every step costs far more than the step."""
    count = {"n": 0}

    def step(x):
        n = count["n"]
        tg.guard(lambda: count["n"] == n)
        return x * n

    compiled = Traced(step, "numpy", None, fullgraph=False)
    with pytest.warns(UserWarning, match="runs eagerly .* traced 8 times for this signature"):
        for n in range(12):
            count["n"] = n
            assert float(compiled(np.ones(()))) == n
    assert sum(compiled.traces.values()) == 8 and len(compiled.eager) == 1

    counting = Traced(lambda x, it: x * it, "numpy", None, fullgraph=False)
    with pytest.warns(UserWarning, match="runs eagerly .* 8 input signatures were traced"):
        for it in range(12):  # an int that counts: a new signature at every call
            assert float(counting(np.ones(()), it)) == it
    assert len(counting.plans) == 8 and len(counting.eager) == 4
    assert float(counting(np.ones(()), 3)) == 3  # a signature traced before runs its plan


def test_hashable_python_arguments_are_part_of_the_signature():
    x = tg.tensor([1.0, 2.0])
    calls = []

    @tg.trace(backend="numpy")
    def scale(x, factor):
        calls.append(factor)
        return x * factor

    np.testing.assert_allclose(scale(x, 2.0).numpy(), [2.0, 4.0])
    np.testing.assert_allclose(scale(x, 3.0).numpy(), [3.0, 6.0])
    np.testing.assert_allclose(scale(x, 2.0).numpy(), [2.0, 4.0])
    assert calls == [2.0, 3.0]


def test_state_written_back_and_grads_accumulate_like_eager():
    """Without zero_grad, .grad accumulates across calls, traced exactly as eagerly."""
    data = batches(3, np.float64)

    def make():
        m = MLP((6, 16, 12, 4), np.float64)
        w = m.weights[0]
        return m, w

    def step(m, w, x, y):
        with m.gm:
            loss = (m.forward(x) ** 2).mean()
            m.gm.backward(loss)
        return loss

    (me, we), (mt, wt) = make(), make()
    traced = tg.trace(lambda x, y: step(mt, wt, x, y), backend="numpy")
    for x, y in data:
        step(me, we, tg.tensor(x), y)
        traced(x, y)
    np.testing.assert_allclose(wt.grad.numpy(), we.grad.numpy(), rtol=1e-12)
    # grad None at the first call, set afterwards: the state structure changed once
    assert sum(len(p) for p in traced.plans.values()) == 2


def test_a_step_that_fails_while_tracing_changes_nothing():
    model = MLP((6, 8, 4), np.float32)
    before = model.state()

    @tg.trace(backend="numpy")
    def step(x, y):
        loss = model.step(x, y)  # updates parameters and buffers (symbolically)
        return loss + tg.ones((3,)) @ tg.ones((4,))  # a shape error after the update

    x, y = batches(1, np.float32, (6, 8, 4))[0]
    with pytest.raises(
        tg.ShapeError,
        match=r"matmul: torch.Size\(\[3\]\) @ torch.Size\(\[4\]\) \(at test_trace.py:\d+",
    ):
        step(x, y)
    for a, b in zip(model.state(), before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert all(p.grad is None for p in model.params)
    assert all(not p.is_symbolic for p in model.params + model.bufs)


def test_a_step_that_fails_at_run_time_changes_nothing():
    model = MLP((6, 8, 4), np.float32)
    step = tg.trace(model.step, backend="numpy")
    x, y = batches(1, np.float32, (6, 8, 4))[0]
    step(x, y)
    before = model.state()
    with pytest.raises(IndexError):
        step(x, np.full_like(y, 99))  # a label out of range fails inside the plan
    for a, b in zip(model.state(), before, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "body, what",
    [
        (lambda t: 1 if t.sum() > 0 else 0, "bool"),
        (lambda t: float(t.sum()), "float"),
        (lambda t: round(float(t.sum().item()), 2), "float"),  # returning .item() is fine
        (lambda t: f"{t.sum().item():.2f}", "formatting"),
        (lambda t: t.numpy(), "numpy"),
    ],
)
def test_python_control_flow_on_traced_values_names_the_user_line(body, what):
    traced = tg.trace(body, backend="numpy")
    with pytest.raises(tg.TraceError, match=r"test_trace\.py:\d+") as err:
        traced(np.ones(3, np.float32))
    assert what in str(err.value)
    assert "outside the traced function" in str(err.value)


def test_torch_compile_runs_a_refused_signature_eagerly_where_trace_raises(monkeypatch):
    """PyTorch's `torch.compile(step)` breaks the graph where the trace refuses (Python control
    flow on a value, after the update here): that signature's calls run eagerly, warned once,
    and train as the eager step does; `fullgraph=True` and `trace` raise, changing nothing."""
    # bit for bit against eager: no eager kernel may arrive between the two runs (the file's
    # fixture lets these small arrays take them, and a kernel rounds as its fused math does)
    monkeypatch.setattr(lowering, "KERNEL_MIN", EAGER_KERNEL_MIN)

    def branching(model):
        def step(x, y):
            loss = model.step(x, y)
            return loss * 2 if loss.item() > 100 else loss

        return step

    data = batches(3, np.float64, (6, 8, 4))
    reference, model = MLP((6, 8, 4), np.float64), MLP((6, 8, 4), np.float64)
    expected = [float(branching(reference)(tg.tensor(x), tg.tensor(y))) for x, y in data]
    compiled = torch.compile(branching(model), backend="numpy")
    with pytest.warns(UserWarning, match=r"torch.compile\(step\): this call runs eagerly .*bool"):
        got = [float(compiled(x, y)) for x, y in data[:1]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the signature runs eagerly from then on
        got += [float(compiled(x, y)) for x, y in data[1:]]
    assert got == expected and not compiled.plans
    for a, b in zip(model.state(), reference.state(), strict=True):
        np.testing.assert_array_equal(a, b)
    before = model.state()
    for refusing in (torch.compile(branching(model), fullgraph=True), tg.trace(branching(model))):
        with pytest.raises(tg.TraceError, match=r"bool.*test_trace\.py:\d+"):
            refusing(*data[0])
    for a, b in zip(model.state(), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_partial_and_a_callable_object_trace_under_their_functions_names():
    class Doubler:
        def __call__(self, t):
            return t * 2

    def scaled(a, t):
        return (t * a).sum()

    partial = tg.trace(functools.partial(scaled, 2.0), backend="numpy")
    assert float(partial(tg.ones(3))) == 6.0 and partial.latest.name == "scaled"
    instance = tg.trace(Doubler(), backend="numpy")
    np.testing.assert_array_equal(instance(tg.ones(2)).numpy(), [2.0, 2.0])
    assert instance.latest.name == "Doubler"


def test_torch_compile_runs_a_call_with_an_unhashable_argument_eagerly():
    def scaled(t, names):
        return t * len(names)

    compiled = torch.compile(scaled, backend="numpy")
    with pytest.warns(UserWarning, match="must be hashable"):
        got = compiled(tg.ones(2), {"a", "b", "c"})
    np.testing.assert_array_equal(got.numpy(), [3.0, 3.0])
    with pytest.raises(TypeError, match="must be hashable"):
        tg.trace(scaled)(tg.ones(2), {"a", "b", "c"})


def test_a_backward_into_a_forward_run_before_the_step_is_refused_and_changes_nothing():
    """A policy-gradient update: the forward ran eagerly, its outputs kept in a list, and the
    traced function only sums them, backward and steps. Its plan could only replay the first
    forward's gradients at every call, so the trace refuses, naming the user's line, and the
    parameters, their grads and the list are as they were."""
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.1)
    saved = [(tg.tensor(rng.standard_normal((1, 3))) @ w).sum() for _ in range(2)]

    @tg.trace(backend="numpy")
    def update():
        opt.zero_grad()
        tg.stack(saved).sum().backward()
        opt.step()
        del saved[:]

    before = w.numpy().copy()
    with pytest.raises(tg.TraceError, match=r"recorded before the step began \(at test_trace"):
        update()
    np.testing.assert_array_equal(w.numpy(), before)
    assert w.grad is None and len(saved) == 2
    tg.stack(saved).sum().backward()  # eagerly, the kept history still serves
    assert w.grad is not None


def test_a_traced_function_called_inside_a_traced_step_is_part_of_its_plan():
    """A compiled loss called by a compiled step (torch.compile on both): the inner function's
    ops are traced into the outer plan, whose gradients equal eager's; called alone, the inner
    one runs its own plan."""
    rng = np.random.default_rng(0)
    w0, x = rng.standard_normal((3, 2)), tg.tensor(rng.standard_normal((4, 3)))
    w = tg.tensor(w0, requires_grad=True)
    inner = tg.trace(lambda x: tg.tanh(x @ w).sum(), backend="numpy")

    @tg.trace(backend="numpy")
    def outer(x):
        w.grad = None
        loss = inner(x) * 2.0
        loss.backward()
        return loss

    outer(x)
    got = outer(x)
    want_w = tg.tensor(w0, requires_grad=True)
    want = tg.tanh(x @ want_w).sum() * 2.0
    want.backward()
    assert float(got) == pytest.approx(float(want), rel=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), want_w.grad.numpy(), rtol=1e-12)
    assert len(outer.plans) == 1 and not inner.plans  # inlined, never traced on its own
    assert float(inner(x)) == pytest.approx(float(want) / 2.0, rel=1e-12)


def test_python_random_numbers_drawn_in_a_step_are_refused():
    """A depth drawn with `random.randint` (the dynamic-net tutorial), a mask from NumPy's global
    generator: a plan would repeat the trace's draws at every call, so the trace refuses."""
    import random

    w = tg.tensor(np.ones(3), requires_grad=True)
    for draw in (lambda: random.randint(0, 3), lambda: np.random.rand()):

        def step(x, draw=draw):
            return (x * w).sum() * draw()

        with pytest.raises(tg.TraceError, match="Python's `random` or NumPy's global"):
            tg.trace(step, backend="numpy")(np.ones(3))


def test_a_constant_cotangent_of_an_indexed_row_traces():
    """`-w[tags[1]]`, a CRF's gold score: the row's cotangent is the constant -1, which the plan
    passes to the scatter of the gradient as a typed array (it was a Python float)."""
    w = tg.tensor(np.arange(5.0), requires_grad=True)

    @tg.trace(backend="numpy")
    def step(tags):
        w.grad = None
        loss = -w[tags[1]] * 2.0
        loss.backward()
        return loss

    assert float(step(tg.tensor([0, 2, 3]))) == -4.0
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0, -2.0, 0.0, 0.0])


def test_pytrees_in_and_out():
    @tg.trace(backend="numpy")
    def f(batch, extra):
        total = batch["x"] * extra[0] + batch["y"][1]
        return {"sum": total.sum(), "parts": [total, extra[1]], "label": "ok"}

    x = np.arange(3.0, dtype=np.float32)
    out = f({"x": x, "y": [None, x]}, (2.0, tg.tensor(5.0)))
    np.testing.assert_allclose(out["sum"].numpy(), 9.0)
    np.testing.assert_allclose(out["parts"][0].numpy(), 3 * x)
    np.testing.assert_allclose(out["parts"][1].numpy(), 5.0)
    assert out["label"] == "ok"


def test_from_numpy_of_an_array_argument():
    """reinforce.py's `torch.from_numpy(state)` on its NumPy argument, in a compiled function:
    the argument is already a tensor while tracing (it raised TypeError)."""
    f = tg.trace(lambda state: (tg.from_numpy(state).float().unsqueeze(0) * 2).sum())
    for i in range(3):
        assert f(np.arange(4, dtype=np.float32) + i).item() == 12.0 + 8 * i
    with pytest.raises(TypeError, match="expected an ndarray, got Tensor"):
        tg.from_numpy(tg.ones(2))


def test_a_modules_python_settings_are_guarded():
    """A number, flag or string a module's forward reads from its attributes (a temperature)
    was baked in unguarded: changed between calls, the plan kept dividing by the old one."""

    class Scaled(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.temperature, self.mode = tg.nn.Linear(2, 2), 1.0, "scale"

        def forward(self, x):
            y = self.lin(x)
            return y / self.temperature if self.mode == "scale" else y

    model, x = Scaled(), tg.ones(1, 2)
    step = tg.trace(lambda x: model(x).detach(), backend="numpy")
    first = step(x).numpy().copy()
    step(x)
    model.temperature = 2.0
    with pytest.warns(UserWarning, match=r"Scaled.temperature changed \(1.0 -> 2.0\)"):
        np.testing.assert_allclose(step(x).numpy(), first / 2)
    model.mode = "plain"
    with pytest.warns(UserWarning, match="Scaled.mode changed"):
        np.testing.assert_allclose(step(x).numpy(), first)
    assert sum(len(p) for p in step.plans.values()) == 3


def test_a_call_keeps_no_argument_or_result_alive_for_the_garbage_collector():
    """Flattening the arguments and building the results made reference cycles (closures
    calling themselves) that kept both lists, their batches and results, until a collection."""
    f = tg.trace(lambda batch: {"y": [batch["x"] * 2.0]}, backend="numpy")
    f({"x": tg.ones(3)})
    gc.collect()
    gc.disable()
    try:
        x = tg.ones(3)
        out = f({"x": x})
        gone = [weakref.ref(x), weakref.ref(out["y"][0])]
        del x, out
        assert [r() for r in gone] == [None, None]
    finally:
        gc.enable()


def test_no_grad_detach_retain_grad_and_two_managers_inside_trace():
    rng = np.random.default_rng(0)

    def make():
        a = tg.tensor(rng.standard_normal((3, 3)))
        b = tg.tensor(rng.standard_normal(3))
        return a, b, tg.GradManager().attach(a), tg.GradManager().attach(b)

    def step(a, b, gm_a, gm_b, x):
        with gm_a, gm_b:
            h = tg.tanh(x @ a)
            h.retain_grad()
            with tg.no_grad():
                frozen = (h * 3.0).sum()  # not recorded
            y = (h * b).sum() + (h.detach() * b).sum() + frozen
            gm_a.backward(y)
        gm_b.record()
        gm_b.backward((b * b).sum())
        return y, h.grad

    rng = np.random.default_rng(0)
    eager = make()
    rng = np.random.default_rng(0)
    traced_state = make()
    x = np.random.default_rng(1).standard_normal((2, 3))
    ye, hge = step(*eager, tg.tensor(x))
    yt, hgt = tg.trace(lambda x: step(*traced_state, x), backend="numpy")(x)
    np.testing.assert_allclose(yt.numpy(), ye.numpy(), rtol=1e-12)
    np.testing.assert_allclose(hgt.numpy(), hge.numpy(), rtol=1e-12)
    for te, tt in zip(eager[:2], traced_state[:2], strict=True):
        np.testing.assert_allclose(tt.grad.numpy(), te.grad.numpy(), rtol=1e-12)


def test_prune_leaves_3L_plus_2_matmuls_when_the_input_is_not_attached():
    L = 4
    model = MLP((6,) + (8,) * L + (4,), np.float32)  # L + 1 linear layers
    step = tg.trace(model.step, backend="numpy")
    step(*batches(1, np.float32, (6, 4))[0])
    assert step.graph.count("matmul") == 3 * L + 2


def test_graph_printing_and_export():
    model = MLP((6, 8, 4), np.float32)
    step = tg.trace(model.step, backend="numpy")
    step(*batches(1, np.float32, (6, 8, 4))[0])
    text = str(step.graph)
    assert text.startswith("{ lambda ")
    assert "= matmul " in text and "f32[8,8]" in text and "test_trace.py:" in text
    g = step.graph.to_networkx()
    assert isinstance(g, nx.DiGraph) and nx.is_directed_acyclic_graph(g)
    ops = [d for _, d in g.nodes(data=True) if d["kind"] == "op"]
    assert len(ops) == len(step.graph.nodes)
    assert all({"op", "shape", "dtype", "bytes"} <= set(d) for d in ops)
    assert step.graph.to_dot().startswith("digraph")
    assert "def step(" in step.source and "np.matmul(" in step.source and "del " in step.source


def test_reference_interpreter_agrees_with_the_plan():
    model = MLP((6, 8, 4), np.float64, "gelu")
    x, y = batches(1, np.float64, (6, 8, 4))[0]
    step = tg.trace(model.step, backend="numpy")
    step(x, y)
    cap = step.latest.capture
    owners = [(r.resolve([x, y]), via_grad) for r, via_grad in cap.reads]
    state = [t._grad if via_grad else t for t, via_grad in owners]
    inputs = [x, y] + [t.numpy().copy() for t in state]  # the arguments, then the state
    expected = tg.interpret(step.graph, *inputs)
    loss = step(x, y)
    np.testing.assert_allclose(expected[0], loss.numpy(), rtol=1e-12)
    new_params = expected[1 : 1 + len(step.latest.capture.value_writes)]
    for ref, value in zip(step.latest.capture.value_writes, new_params, strict=True):
        t = ref.resolve([x, y])
        np.testing.assert_allclose(t.numpy(), value, rtol=1e-12)


def test_report_lists_saved_values_and_peaks():
    model = MLP((6, 64, 64, 4), np.float32, "gelu")
    step = tg.trace(model.step, backend="numpy")
    step(*batches(1, np.float32, (6, 64, 64, 4), batch=256)[0])
    report = step.report()
    for word in ("prune", "cse", "simplify", "remat", "schedule", "saved for backward",
                 "planned peak", "measured peak"):  # fmt: skip
        assert word in report
    plan = step.latest
    assert abs(plan.run.peak - plan.memory.peak) <= 0.1 * plan.memory.peak


def test_runtime_errors_point_at_the_plan_line_and_the_user_source():
    model = MLP((6, 8, 4), np.float32)
    step = tg.trace(model.step, backend="numpy")
    x, y = batches(1, np.float32, (6, 8, 4))[0]
    step(x, y)
    with pytest.raises(IndexError) as err:
        step(x, np.full_like(y, 99))
    frames = [f for f in err.traceback if "tracegrad plan" in str(f.path)]
    assert frames, "the traceback shows a frame in the generated plan"
    assert "test_trace.py" in str(frames[-1].statement)


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_are_copied_out_of_the_arena_that_the_next_step_reuses(backend):
    w = tg.tensor(np.random.default_rng(0).standard_normal((16, 16)))

    @tg.trace(backend=backend)
    def hidden(x):  # returns an intermediate, and writes the state the next call reads
        h = tg.tanh(x @ w) * 2.0
        w.__isub__(0.1 * h.T @ h)
        return h

    x1, x2 = (np.random.default_rng(s).standard_normal((32, 16)) for s in (1, 2))
    w0 = w.numpy().copy()
    h1 = hidden(x1)
    kept, w1 = h1.numpy().copy(), w.numpy().copy()
    h2 = hidden(x2)
    np.testing.assert_array_equal(h1.numpy(), kept)
    np.testing.assert_allclose(kept, np.tanh(x1 @ w0) * 2.0, rtol=1e-12)
    np.testing.assert_allclose(w1, w0 - 0.1 * kept.T @ kept, rtol=1e-12)
    np.testing.assert_allclose(h2.numpy(), np.tanh(x2 @ w1) * 2.0, rtol=1e-12)
    assert hidden.latest.memory.arena > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_is_written_in_place_as_eager_in_place_ops_write_it(backend):
    def run(step):
        p = tg.tensor(np.ones(4), requires_grad=True)
        alias, array = p.detach(), p.numpy()
        version = p._version[0]

        def update(x):
            with tg.no_grad():
                p.__isub__(x * p)

        step(update)(np.full(4, 0.5))
        return alias.numpy(), array, p._version[0] - version

    eager = run(lambda f: f)
    traced = run(lambda f: tg.trace(f, backend=backend))
    for got, want in zip(traced, eager, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(traced[0], np.full(4, 0.5))  # the alias saw the update
    assert traced[2] == 1


def test_a_traced_update_invalidates_values_saved_for_backward():
    p = tg.tensor(np.ones(3), requires_grad=True)

    @tg.trace(backend="numpy")
    def step():
        with tg.no_grad():
            p.__isub__(0.5 * p)

    y = (p * p).sum()  # saves p
    step()
    with pytest.raises(RuntimeError, match="modified"):
        y.backward()


def test_concurrent_calls_get_buffers_of_their_own():
    import threading

    model = MLP((6, 64, 64, 4), np.float64)
    step = tg.trace(model.step, backend="numpy")
    x, y = batches(1, np.float64, (6, 64, 64, 4), batch=128)[0]
    step(x, y)
    forward = tg.trace(lambda x: model.forward(tg.tensor(x)).sum(), backend="numpy")
    want = float(model.forward(tg.tensor(x)).sum())
    assert float(forward(x)) == want  # traced here: the threads below only run the plan
    got, started = [], threading.Barrier(2)

    def run():
        started.wait()
        got.extend(float(forward(x)) for _ in range(50))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(got, [want] * 100, rtol=1e-12)  # a shared buffer would clash


def test_an_arena_lent_out_lends_a_private_buffer_and_grows_for_a_bigger_plan():
    step = tg.trace(MLP((6, 64, 4), np.float32).step, backend="numpy")
    step(*batches(1, np.float32, (6, 64, 4), batch=64)[0])
    run = step.latest.run
    arena, layout = runtime_arena.Arena(), run.layout
    views, lent = arena.lend(layout)
    assert lent and all(np.shares_memory(v, arena.buffer) for v in views)
    private, lent_again = arena.lend(layout)  # as another thread would, meanwhile
    assert not lent_again and not any(np.shares_memory(v, arena.buffer) for v in private)
    arena.give_back()
    assert arena.lend(layout)[0] is views  # views are made once per layout and buffer
    arena.give_back()
    bigger = runtime_arena.ArenaLayout(step.latest.memory)
    bigger.nbytes = layout.nbytes * 2
    arena.lend(bigger)
    assert arena.buffer.nbytes == bigger.nbytes and arena.buffer.ctypes.data % 64 == 0
    arena.give_back()


def test_a_step_that_cannot_get_its_arena_fails_cleanly_and_the_next_one_runs(monkeypatch):
    model = MLP((6, 64, 4), np.float64)
    step = tg.trace(model.step, backend="numpy")
    x, y = batches(1, np.float64, (6, 64, 4), batch=64)[0]
    arena = runtime_arena.shared_arena()  # the one its plan will use: we hold it alive
    arena.buffer = np.empty(0, np.uint8)  # force the arena to grow on this call
    before = model.state()

    def no_memory(nbytes):
        raise MemoryError(f"cannot allocate {nbytes} bytes")

    monkeypatch.setattr(runtime_arena, "_aligned_empty", no_memory)
    with pytest.raises(MemoryError):
        step(x, y)
    for a, b in zip(model.state(), before, strict=True):
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    step(x, y)
    assert step.latest.run.arena.lock.acquire(blocking=False)  # given back after the call
    step.latest.run.arena.lock.release()


def test_plans_share_one_arena_sized_by_the_largest():
    small = MLP((6, 16, 4), np.float32)
    big = MLP((6, 256, 256, 4), np.float32)
    small_step = tg.trace(small.step, backend="numpy")
    big_step = tg.trace(big.step, backend="numpy")
    small_step(*batches(1, np.float32, (6, 16, 4), batch=64)[0])
    big_step(*batches(1, np.float32, (6, 256, 256, 4), batch=64)[0])
    arena = big_step.latest.run.arena
    assert small_step.latest.run.arena is arena
    assert arena.buffer.nbytes == big_step.latest.memory.arena > small_step.latest.memory.arena
    del big_step  # a plan that is gone (or replaced by its kernels' plan) no longer counts
    gc.collect()
    small_step(*batches(1, np.float32, (6, 16, 4), batch=64)[0])
    assert small_step.latest.run.arena is arena
    assert arena.buffer.nbytes == small_step.latest.memory.arena


def test_tracing_in_one_thread_does_not_capture_another_threads_eager_ops():
    import threading

    inside, done = threading.Event(), threading.Event()

    @tg.trace(backend="numpy")
    def slow(x):
        y = tg.exp(x)
        inside.set()
        assert done.wait(10)  # the other thread computes while this one is tracing
        return y.sum()

    def eager():
        assert inside.wait(10)
        a = tg.tensor([1.0, 2.0], requires_grad=True)
        (a * a).sum().backward()
        grads.append(a.grad.numpy())
        done.set()

    grads = []
    other = threading.Thread(target=eager)
    other.start()
    result = slow(np.zeros(3))
    other.join()
    np.testing.assert_array_equal(grads[0], [2.0, 4.0])
    assert float(result) == 3.0
    assert [n.op for n in slow.graph.nodes] == ["exp", "sum"]


def test_the_arena_is_freed_with_the_last_plan():
    import gc
    import weakref

    gc.collect()  # plans of earlier tests
    step = tg.trace(MLP((6, 64, 4), np.float32).step, backend="numpy")
    step(*batches(1, np.float32, (6, 64, 4), batch=64)[0])
    arena = weakref.ref(step.latest.run.arena)
    assert arena() is not None
    del step
    gc.collect()
    assert arena() is None


def micro_batch_model(seed=0):
    tg.nn.manual_seed(seed)
    model = tg.nn.Sequential(tg.nn.Linear(6, 32), tg.nn.Tanh(), tg.nn.Linear(32, 4))
    gm = tg.GradManager().attach(model.parameters())
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(*batches):
        """Gradient accumulation: forward and backward per micro-batch, then one update."""
        for x, y in zip(batches[::2], batches[1::2], strict=True):
            with gm:
                loss = tg.nn.functional.cross_entropy(model(x), y)
                gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    return model, step


def runs(phases):
    return [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_two_micro_batches_are_traced_with_their_phases(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    rng = np.random.default_rng(3)
    data = []
    for _ in range(3):
        for _ in range(2):
            data += [rng.standard_normal((16, 6)).astype(np.float32), rng.integers(0, 4, 16)]
    eager_model, eager_step = micro_batch_model()
    traced_model, step = micro_batch_model()
    traced = tg.trace(step, backend=backend)
    for k in range(3):
        batch = data[4 * k : 4 * k + 4]
        want, got = eager_step(*batch), traced(*batch)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
    for a, b in zip(traced_model.parameters(), eager_model.parameters(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    captured = traced.latest.capture.graph
    assert runs([n.phase for n in captured.nodes]) == [
        Phase.FORWARD, Phase.BACKWARD, Phase.FORWARD, Phase.BACKWARD, Phase.UPDATE
    ]  # fmt: skip
    single = tg.trace(micro_batch_model()[1], backend=backend)
    single(*data[:2])
    saved = [line for line in traced.report().splitlines() if line.startswith("  f32")]
    one = [line for line in single.report().splitlines() if line.startswith("  f32")]
    assert one and len(saved) == 2 * len(one)  # both forwards keep what their backward reads


def test_manual_updates_outside_an_optimizer_are_forward_and_still_correct():
    """Phases are set where they happen: an update written by hand (no optimizer) is labelled
    forward; the schedule keeps its place, and the step still matches eager."""
    sizes = (6, 16, 4)
    step = tg.trace(MLP(sizes, np.float32).step, backend="numpy")
    step(*batches(1, np.float32, sizes)[0])
    assert {n.phase for n in step.latest.capture.graph.nodes} == {Phase.FORWARD, Phase.BACKWARD}


def test_a_phase_that_is_not_one_raises():
    from tracegrad.frontend.tensor import phase

    with pytest.raises(ValueError, match="updat"), phase("updat"):
        pass


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_step_may_return_item_numbers(backend):
    """`return loss.item(), len(xb)` (the PyTorch nn tutorial's loss_batch), `loss.item() / n`:
    the plan returns Python numbers, each call's own, as the eager step does. Kept in Python
    state instead (`history.append(loss.item())`) it refuses, naming the line: a plan would not
    append at every call."""
    results = {}
    for traced in (False, True):
        w = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)
        opt = tg.optim.SGD([w], lr=0.1)

        def step(x, n, w=w, opt=opt):
            loss = ((x * w).sum(1) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.item(), loss.item() / n + 1, len(x)

        step = tg.trace(step, backend=backend) if traced else step
        rng = np.random.default_rng(5)
        results[traced] = [step(tg.tensor(rng.standard_normal((4, 3))), 4) for _ in range(4)]
    for got, want in zip(results[True], results[False], strict=True):
        assert [type(v) for v in got] == [float, float, int]
        np.testing.assert_allclose(got[:2], want[:2], rtol=1e-6)
        assert got[2] == want[2]
    history = []
    w = tg.tensor([1.0], requires_grad=True)

    def keeps(x):
        loss = (x * w).sum()
        history.append(loss.item())
        return loss

    with pytest.raises(tg.TraceError, match=r"kept in Python state.*test_trace\.py:\d+"):
        tg.trace(keeps, backend=backend)(tg.ones(1))


def test_an_item_number_carries_no_gradient():
    """actor_critic's `advantage = R - value.item()`: a Python number, a constant to backward.
    The traced step differentiated through it (other gradients from the first call), silently;
    `tensor([v.item(), ...])` raised."""

    def step(w, x, r):
        value = (w * x).sum()
        loss = -(w * (r - value.item())).sum() + (value - r) ** 2
        loss = loss + (w * tg.tensor([value.item(), 2 * value.item()])).sum()
        w.grad = None
        loss.backward()
        return loss.detach(), w.grad.clone()

    traced = tg.trace(step, backend="numpy")
    w = tg.tensor([0.5, -0.25], requires_grad=True)
    for xs in ([1.0, 2.0], [3.0, -1.0], [0.2, 0.7]):
        x, r = tg.tensor(xs, dtype=np.float64), tg.tensor(1.5, dtype=np.float64)
        for got, want in zip(traced(w, x, r), step(w, x, r), strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_a_layer_built_inside_the_step_refuses_to_bake_its_random_weights():
    """BERT in graykode/nlp-tutorial builds nn.Linear in forward: eager draws new weights at
    each call, a plan would reuse the ones drawn while tracing. Refused, naming the line;
    layers without random weights (pooling, a fresh LayerNorm) build as before."""
    with pytest.raises(tg.TraceError, match=r"drawn inside the traced step.*test_trace\.py"):
        tg.trace(lambda x: tg.nn.Linear(3, 3)(x).sum())(tg.ones(1, 3))
    fixed = tg.trace(lambda x: tg.nn.LayerNorm(4)(x).sum() + tg.nn.MaxPool2d(2)(x).sum())
    assert fixed(tg.ones(1, 1, 4, 4)).item() == 4.0


def test_a_modules_config_entries_and_its_forwards_globals_are_guarded():
    """The numbers a forward reads from a config object, a dict it holds or its module's
    globals: each change traces again (they were baked in unguarded)."""
    global _SHIFT

    class Configured(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg, self.opts = types.SimpleNamespace(scale=1.0), {"power": 1}

        def forward(self, x):
            return (x * self.cfg.scale) ** self.opts["power"] + _SHIFT

    model, x = Configured(), tg.full((2,), 2.0)
    step = tg.trace(lambda x: model(x), backend="numpy")  # no parameters: no backward
    assert step(x).tolist() == [2.0, 2.0]
    with pytest.warns(UserWarning, match=r"Configured.cfg\['scale'\] changed"):
        model.cfg.scale = 3.0
        assert step(x).tolist() == [6.0, 6.0]
    with pytest.warns(UserWarning, match=r"Configured.opts\['power'\] changed"):
        model.opts["power"] = 2
        assert step(x).tolist() == [36.0, 36.0]
    with pytest.warns(UserWarning, match="global `_SHIFT` changed"):
        _SHIFT = 1.0
        assert step(x).tolist() == [37.0, 37.0]
    _SHIFT = 0.0


_SHIFT = 0.0


_ORDER = np.array([2, 0, 1])


def test_numpy_arrays_a_step_reads_from_globals_or_closures_are_guarded():
    """An index array or a mask the step reads from its globals, an enclosing function or a
    module's attribute becomes a constant of the plan: changed in place (a reshuffle) or
    rebound, the step traces again, as eager reads it anew (before, the old one stayed baked)."""
    global _ORDER
    mask = np.array([1.0, 0.0, 1.0])

    class Picked(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = np.array([1.0, 1.0, 1.0])
            self.replay = np.zeros(3)  # data it holds, which no method of its reads

        def forward(self, x):
            return x * self.factor()

        def factor(self):
            return self.scale

    model = Picked()
    step = tg.trace(lambda x: (model(x)[_ORDER] * tg.from_numpy(mask)).sum(), backend="numpy")
    x = tg.tensor([1.0, 2.0, 3.0])
    assert step(x).item() == 5.0  # x[[2, 0, 1]] * [1, 0, 1] = 3 + 2
    with pytest.warns(UserWarning, match="global `_ORDER` changed"):
        _ORDER[:] = [0, 1, 2]  # in place
        assert step(x).item() == 4.0
    with pytest.warns(UserWarning, match="`mask` .from an enclosing function. changed"):
        mask[1] = 1.0
        assert step(x).item() == 6.0
    with pytest.warns(UserWarning, match="Picked.scale changed"):
        model.scale = np.array([2.0, 2.0, 2.0])  # rebound
        assert step(x).item() == 12.0
    _ORDER = np.array([0, 1, 2])  # another array with the same contents: the plan holds
    model.replay[:] = 1.0
    assert step(x).item() == 12.0
    assert len(step.plans[next(iter(step.plans))]) == 4
    _ORDER = np.array([2, 0, 1])


def test_two_replaced_state_tensors_of_one_shape_are_both_followed():
    """A module replacing two state tensors of one shape, one computed from the other: finding
    which old tensor each replaced compared them as values (`if` on a traced tensor: the trace
    failed)."""

    class Two(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.h, self.stats = tg.zeros(2), {"peak": tg.ones(2)}

        def forward(self, x):
            self.stats["peak"] = self.stats["peak"] + self.h
            self.h = (0.5 * self.h + x).detach()
            return self.h.sum() + self.stats["peak"].sum()

    x, eager, traced = tg.tensor([1.0, 2.0]), Two(), Two()
    expected = [eager(x).item() for _ in range(3)]
    step = tg.trace(lambda x: traced(x), backend="numpy")
    assert [step(x).item() for _ in range(3)] == expected == [5.0, 9.5, 14.75]


_CACHE: dict = {}


def test_state_a_step_makes_at_its_first_call_is_read_at_the_next():
    """A hidden state a module makes when its attribute is None (or missing) or under a key it
    adds to a dict it holds, and an average a step keeps in a global dict under a key it adds:
    the first call's plan makes them anew, so each later call needs a plan that reads them
    (before, every call started from zeros). A module's detached state from the first plan
    (an alias) is followed by the second as the tensor it replaced."""

    class Carry(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.h, self.stats = None, {}

        def forward(self, x):
            if self.h is None:
                self.h = tg.zeros_like(x)
            if "peak" not in self.stats:
                self.stats["peak"] = x.detach().clone()
            self.stats["peak"] = self.stats["peak"] + self.h
            if not hasattr(self, "steps"):
                self.steps = tg.zeros(())
            self.h = (0.5 * self.h + x).detach()
            self.steps = self.steps + 1
            return self.h.sum() + self.steps

    def step(model, x):
        if "m" not in _CACHE:
            _CACHE["m"] = tg.zeros_like(x)
        _CACHE["m"].mul_(0.5).add_(x)
        return model(x) + _CACHE["m"].sum()

    x = tg.tensor([1.0, 2.0])
    eager, traced = Carry(), Carry()
    expected = [step(eager, x).item() for _ in range(4)]
    _CACHE.clear()
    compiled = tg.trace(step, backend="numpy")
    assert [compiled(traced, x).item() for _ in range(4)] == expected
    assert traced.h.tolist() == eager.h.tolist() and traced.steps.item() == 4.0
    assert traced.stats["peak"].tolist() == eager.stats["peak"].tolist()
    _CACHE.clear()


def test_state_a_step_replaces_by_a_result_it_returns_is_read_where_it_is_kept():
    """`self.h = 0.5 * self.h + x; return self.h` (a stateful cell, a streaming model), and a
    running average a step keeps in a dict and returns: each call leaves its result there, so
    the next call reads it from there. Before, every call read the first state (the plan
    never wrote it) and returned the same number, traced, as a compiled module, and in tuples."""

    class Cell(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.h, self.hc = tg.zeros(2), (tg.zeros(2), tg.ones(2))

        def forward(self, x):
            self.h = 0.5 * self.h + x
            h, c = self.hc
            self.hc = (h + c, c * 2)
            return self.h, self.hc[0]

    store: dict = {}

    def average(x):
        store["avg"] = 0.5 * store["avg"] + x if "avg" in store else x.clone()
        return store["avg"]

    x = tg.tensor([1.0, 2.0])
    eager = Cell()
    expected = [[t.tolist() for t in eager(x)] for _ in range(4)]
    cell = Cell()
    traced = tg.trace(lambda x: cell(x), backend="numpy")
    assert [[t.tolist() for t in traced(x)] for _ in range(4)] == expected
    assert cell.h.tolist() == eager.h.tolist() and cell.hc[1].tolist() == [16.0, 16.0]
    compiled = torch.compile(Cell())
    assert [[t.tolist() for t in compiled(x)] for _ in range(4)] == expected

    means = [average(x).tolist() for _ in range(4)]
    store.clear()
    compiled_average = tg.trace(average, backend="numpy")
    assert [compiled_average(x).tolist() for _ in range(4)] == means
    assert means[-1] == [1.875, 3.75]


def test_a_flag_the_step_replaces_is_read_where_it_is_kept():
    """vector-quantize-pytorch's EMA codebook: `if self.initted:` on a buffer the step then
    replaces (`register_buffer("initted", tensor(False))`) with the first batch's statistics,
    later calls averaging into them. The guard reads what the attribute holds at each call
    (it read the first tensor, still True: every call re-initialized); a forward whose
    backward compiles apart is traced twice, and the first trace's changes to the module are
    undone (its flag, already cleared, sent the compiled call down the other branch; its
    symbolic tensors crashed the plan)."""

    class Codebook(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("initted", torch.tensor(True))
            self.register_buffer("avg", torch.zeros(3))
            self.lin = torch.nn.Linear(3, 3)
            with torch.no_grad():
                self.lin.weight.copy_(torch.eye(3))
                self.lin.bias.zero_()

        def forward(self, x):
            y = self.lin(x)
            if self.initted:
                self.register_buffer("initted", torch.tensor(False))
                self.register_buffer("avg", y.mean(0).detach())
            else:
                self.register_buffer("avg", self.avg * 0.5 + y.mean(0).detach() * 0.5)
            return y.sum()

    def averages(make_step):
        model = Codebook()
        step = make_step(model)
        for i in range(4):
            step(torch.full((2, 3), float(i + 1)))
        return model.avg.tolist(), bool(model.initted)

    expected = averages(lambda m: m)
    assert expected == ([3.125] * 3, False)
    with torch.no_grad():  # traced whole
        assert averages(lambda m: tg.trace(lambda x: m(x), backend="numpy")) == expected
    assert averages(lambda m: torch.compile(m)) == expected
    assert averages(lambda m: torch.compile(lambda x: m(x), fullgraph=True)) == expected


def test_a_refused_trace_leaves_the_modules_attributes_as_they_were():
    """A forward that counts its calls in a Python attribute, then breaks the graph
    (`.item()` in an `if`): the eager call after the refused trace counts once, not twice."""

    class Counting(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls, self.last = 0, None

        def forward(self, x):
            self.calls += 1
            self.last = x * 2
            return x + 1 if self.last.sum().item() > 0 else x - 1

    model = Counting()
    step = torch.compile(lambda x: model(x))
    with pytest.warns(UserWarning, match="runs eagerly"):
        for _ in range(3):
            step(tg.ones(2))
    assert model.calls == 3 and model.last.tolist() == [2.0, 2.0]


def test_a_constant_result_the_step_also_keeps_is_not_followed():
    """A result made from no input (zeros, kept in a dict too) beside state the step reads:
    following held results read its history as a graph value and raised TypeError."""
    w, store = tg.tensor([1.0, 2.0]), {}

    def step(x):
        store["zero"] = tg.zeros(2)
        return x * w, store["zero"]

    traced = tg.trace(step, backend="numpy")
    for _ in range(2):
        out, zero = traced(tg.tensor([3.0, 4.0]))
        assert out.tolist() == [3.0, 8.0] and zero.tolist() == [0.0, 0.0]
        assert store["zero"] is zero


def test_a_refused_trace_leaves_state_it_made_concrete_for_the_eager_run():
    """An optimizer that makes its state at its first step (timm's nadamw, adamp) under a
    compiled step that falls back to eager: the refused trace had made the state and stepped
    it, leaving a traced value in it, so the eager run raised on `step += 1`."""

    class Lazy(torch.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, {"lr": lr})

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = torch.tensor(0.0)
                    state["step"] += 1
                    if p.grad.abs().max() > 0:  # a branch on a value: PyTorch breaks here
                        p.add_(p.grad, alpha=-group["lr"])

    w = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    opt = Lazy([w])

    @torch.compile
    def step():
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()

    with pytest.warns(UserWarning, match="runs eagerly"):
        for _ in range(3):
            step()
    assert opt.state[w]["step"].item() == 3.0 and np.allclose(w.detach().numpy(), 0.8**3)

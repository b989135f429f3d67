"""The commit part of a traced step (runtime/commit.py and the plan's write-back): a step that
fails before its commit point changes nothing, the update in place gives the copy plan's
values, a SIGINT after the commit point is delivered once the state is whole, and the report
names the commit point."""

import os
import signal

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn
from tracegrad.nn import functional as F
from tracegrad.runtime import commit
from tracegrad.runtime import plan as runtime_plan

V, D, C, B = 12, 8, 5, 16


class Net(nn.Module):
    """An embedding (an index op: may fail), batch norm (buffers), dropout (the random state),
    a linear layer."""

    def __init__(self):
        super().__init__()
        self.emb, self.norm = nn.Embedding(V, D), nn.BatchNorm1d(D)
        self.drop, self.out = nn.Dropout(0.25), nn.Linear(D, C)

    def forward(self, tokens):
        return self.out(self.drop(tg.tanh(self.norm(self.emb(tokens)))))


def setup(optimizer="sgd", seed=0, zero_first=False):
    """The model, its optimizer and a step that zeroes the gradients after the update, or, with
    `zero_first`, before the forward (PyTorch's usual order: each call then replaces the
    gradients the call before left)."""
    nn.manual_seed(seed)
    model = Net().double()
    if optimizer == "sgd":
        opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = tg.optim.AdamW(model.parameters(), lr=0.01)
    gm = tg.GradManager().attach(model.parameters())

    def step(tokens, labels):
        if zero_first:
            opt.zero_grad()
        with gm:
            loss = F.cross_entropy(model(tokens), labels)
            gm.backward(loss)
        opt.step()
        if not zero_first:
            opt.zero_grad()
        return loss

    return model, opt, step


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return tg.tensor(rng.integers(0, V, B)), tg.tensor(rng.integers(0, C, B))


def snapshot(model, opt):
    """Every value a step may change, as copies: parameters, gradients, buffers, optimizer
    state, the random state."""
    values = [p.numpy().copy() for p in model.parameters()]
    values += [None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()]
    values += [b.numpy().copy() for b in model.buffers()]
    values += [t.numpy().copy() for state in opt.state for t in state.values()]
    return values + [tg.frontend.random.default_state.numpy().copy()]


def assert_same(a, b, rtol=0.0):
    """Bitwise equal (or within `rtol`), None where the other is None."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            assert x is y
        elif rtol:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-12)
        else:
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_in_place_step_trains_as_eager(backend, optimizer):
    model, opt, step = setup(optimizer)
    model_e, opt_e, step_e = setup(optimizer)
    traced = tg.trace(step, backend=backend)
    for k in range(3):
        tokens, labels = batch(k)
        nn.manual_seed(k)  # the same dropout masks: one random state is shared
        loss = traced(tokens, labels).item()
        nn.manual_seed(k)
        np.testing.assert_allclose(loss, step_e(tokens, labels).item(), rtol=1e-10)
    assert_same(snapshot(model, opt), snapshot(model_e, opt_e), rtol=1e-9)
    memory = traced.latest.memory
    # every parameter and its optimizer state in place (the random state and batch norm's
    # statistics are written in forward, before the commit point: copied at the end)
    per_parameter = 2 if optimizer == "sgd" else 3  # the value, momentum; or both moments
    assert len(memory.in_place) >= per_parameter * len(list(model.parameters()))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gradients_a_step_replaces_are_written_into_the_old_ones(backend):
    """zero_grad() then backward(): the plan writes each new gradient into the buffer of the
    one it replaces (from the commit point on), as eager's copy-back did, and trains as eager."""
    model, opt, step = setup("sgd", zero_first=True)
    model_e, opt_e, step_e = setup("sgd", zero_first=True)
    traced = tg.trace(step, backend=backend)
    for k in range(4):
        tokens, labels = batch(k)
        nn.manual_seed(k)
        loss = traced(tokens, labels).item()
        nn.manual_seed(k)
        np.testing.assert_allclose(loss, step_e(tokens, labels).item(), rtol=1e-10)
        if k == 1:
            buffers = [p.grad.numpy() for p in model.parameters()]
    assert_same(snapshot(model, opt), snapshot(model_e, opt_e), rtol=1e-9)
    assert all(p.grad.numpy() is b for p, b in zip(model.parameters(), buffers, strict=True))
    plan = traced.latest
    old_grads = dict(zip(plan.capture.reads, plan.graph.inputs[len(plan.capture.args) :],
                         strict=True))  # fmt: skip
    weight_grad = next(v for (ref, via_grad), v in old_grads.items()
                       if via_grad and ref.tensor is model.out.weight)  # fmt: skip
    assert weight_grad in plan.memory.in_place.values()  # a matmul's result, written in place


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_in_place_plan_gives_the_copy_plans_values(backend, monkeypatch):
    model, opt, step = setup("adamw")
    traced = tg.trace(step, backend=backend)
    for k in range(3):
        traced(*batch(k))
    assert traced.latest.memory.in_place
    in_place = snapshot(model, opt)
    monkeypatch.setattr(runtime_plan, "state_updates", lambda cap: {})  # the copy plan
    model, opt, step = setup("adamw")
    copied = tg.trace(step, backend=backend)
    for k in range(3):
        copied(*batch(k))
    assert not copied.latest.memory.in_place
    assert_same(snapshot(model, opt), in_place)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("where", ["token", "label"])
@pytest.mark.parametrize("zero_first", [False, True])
def test_a_step_failing_before_its_commit_point_changes_nothing(backend, where, zero_first):
    model, opt, step = setup("sgd", zero_first=zero_first)
    traced = tg.trace(step, backend=backend)
    tokens, labels = batch(0)
    for _ in range(2):  # momentum buffers exist, the random state has advanced, and with
        traced(tokens, labels)  # `zero_first` the plan writes the gradients it replaces
    assert traced.latest.memory.in_place
    before = snapshot(model, opt)
    bad = tokens.numpy().copy(), labels.numpy().copy()
    bad[0 if where == "token" else 1][-1] = 99  # an index out of range, a label out of range
    with pytest.raises((IndexError, ValueError)):
        traced(tg.tensor(bad[0]), tg.tensor(bad[1]))
    assert_same(snapshot(model, opt), before)
    traced(tokens, labels)  # and the next step runs


def two_updates(optimizer="sgd"):
    """The model, its optimizer and a step that trains on two batches, one `step()` each: the
    second forward reads the weights the first update wrote."""
    model, opt, step = setup(optimizer)

    def step_twice(tokens, labels, tokens2, labels2):
        return tg.stack([step(tokens, labels), step(tokens2, labels2)])

    return model, opt, step_twice


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("where", ["token", "label", "shape"])
def test_a_step_with_two_updates_failing_in_its_second_forward_changes_nothing(backend, where):
    """A token out of range in the second batch fails in the embedding's lookup of the weights
    the first update wrote, so after that update; a label, in a check that may run before it;
    a batch of another shape, in the trace. Each leaves the state as it was, and the next call
    trains as eager."""
    model, opt, step = two_updates()
    model_e, opt_e, step_e = two_updates()
    traced = tg.trace(step, backend=backend)
    batches = [*batch(0), *batch(1)]
    for k in range(2):
        nn.manual_seed(k)
        traced(*batches)
        nn.manual_seed(k)
        step_e(*batches)
    before = snapshot(model, opt)
    bad = [t.numpy().copy() for t in batches]
    if where == "shape":
        bad[3] = bad[3][:-1]
    else:
        bad[2 if where == "token" else 3][-1] = 99
    with pytest.raises((IndexError, ValueError)):
        traced(*map(tg.tensor, bad))
    assert_same(snapshot(model, opt), before)
    nn.manual_seed(2)
    got = traced(*batches).numpy()
    nn.manual_seed(2)
    np.testing.assert_allclose(got, step_e(*batches).numpy(), rtol=1e-10)
    assert_same(snapshot(model, opt), snapshot(model_e, opt_e), rtol=1e-9)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_second_update_writes_in_place_when_the_commit_point_follows_the_first(backend):
    """The second forward's lookup of the updated embedding may fail, so the first update
    writes new buffers; the second then writes each parameter and momentum into the state's
    own buffer (free since the first read it), not into the arena for a copy at the end."""
    model, opt, step = two_updates()
    traced = tg.trace(step, backend=backend)
    traced(*batch(0), *batch(1))
    plan = traced.latest
    updates = [i for i, n in enumerate(plan.graph.nodes) if n.phase is tg.Phase.UPDATE]
    assert updates[0] < plan.memory.commit <= updates[-1]
    assert len(plan.memory.in_place) >= 2 * len(list(model.parameters()))


def test_a_node_that_may_fail_traced_after_the_update_runs_before_it():
    """An opaque op traced after `opt.step()` that does not read the new values runs before
    the first write to state: when it raises, nothing has changed."""
    fail = {"now": False}

    def impl(x):
        if fail["now"]:
            raise RuntimeError("late failure")
        return x.copy()

    late = tg.defprimitive("late_check", impl, vjp=None)
    model, opt, step = setup("sgd")

    def step_then_check(tokens, labels):
        loss = step(tokens, labels)
        return loss, late(tokens)

    traced = tg.trace(step_then_check, backend="numpy")
    traced(*batch(0))
    graph, memory = traced.latest.graph, traced.latest.memory
    at = next(i for i, n in enumerate(graph.nodes) if n.op == "late_check")
    assert memory.commit == at + 1 and memory.in_place
    before = snapshot(model, opt)
    fail["now"] = True
    with pytest.raises(RuntimeError, match="late failure"):
        traced(*batch(1))
    assert_same(snapshot(model, opt), before)


def test_sigint_after_the_commit_point_is_delivered_when_the_state_is_whole(monkeypatch):
    model, opt, step = setup("sgd")
    model_e, opt_e, step_e = setup("sgd")

    def interrupted():  # Ctrl-C right at the commit point
        commit.enter_commit()
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(runtime_plan, "enter_commit", interrupted)
    traced = tg.trace(step, backend="numpy")
    nn.manual_seed(1)
    with pytest.raises(KeyboardInterrupt):
        traced(*batch(0))
    nn.manual_seed(1)
    step_e(*batch(0))
    assert_same(snapshot(model, opt), snapshot(model_e, opt_e), rtol=1e-12)  # it completed
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_is_deferred_only_between_enter_and_leave():
    commit.enter_commit()
    os.kill(os.getpid(), signal.SIGINT)  # held
    with pytest.raises(KeyboardInterrupt):
        commit.leave_commit()
    commit.leave_commit()  # nothing pending: nothing raised


def test_the_report_names_the_commit_point():
    model, opt, step = setup("sgd")
    traced = tg.trace(step, backend="numpy")
    traced(*batch(0))
    text = str(traced.report())
    assert "commit point: before node" in text
    assert "(after check_range at test_commit.py:" in text  # the cross-entropy's labels
    assert "state updated in place after it" in text
    assert "each freed by its update inside backward" in text


def mlp_step(clip=False, depth=4, width=16, calls=1):
    """An MLP step with SGD momentum, optionally clipping gradients by their global norm;
    `calls` forward, backward and `step()` rounds in one step."""
    rng = np.random.default_rng(0)
    nn.manual_seed(0)
    layers = [nn.Linear(width, width) for _ in range(depth)]
    model = nn.Sequential(*[m for layer in layers for m in (layer, nn.Tanh())]).double()
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gm = tg.GradManager().attach(model.parameters())

    def step(x):
        for _ in range(calls):
            with gm:
                loss = (model(x) ** 2).mean()
                gm.backward(loss)
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
        return loss

    return step, tg.tensor(rng.standard_normal((8, width)))


def gradient_lifetimes(plan):
    """(born, died) of each gradient (a backward result read outside backward: by an update,
    or by the clipping), from the memory plan's `del` points."""
    graph, memory = plan.graph, plan.memory
    died = {v: i for i, values in memory.dead_after.items() for v in values}
    producer = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    backward = {v for v, i in producer.items() if graph.nodes[i].phase is tg.Phase.BACKWARD}
    grads = {
        v
        for n in graph.nodes
        if n.phase is not tg.Phase.BACKWARD
        for v in n.inputs
        if v in backward and v.ndim
    }
    return [(producer[v], died.get(v, len(graph.nodes))) for v in grads]


def most_alive(spans):
    return max(sum(b <= t <= d for b, d in spans) for t, _ in spans)


def test_gradients_never_coexist_when_the_optimizer_runs_inside_backward():
    step, x = mlp_step()
    traced = tg.trace(step, backend="numpy")
    traced(x)
    spans = gradient_lifetimes(traced.latest)
    assert len(spans) == 8
    assert most_alive(spans) == 1  # each gradient dies at its update, before the next exists
    assert "8 gradients, at most 1 alive at once: each freed" in str(traced.report())


def test_clipping_by_global_norm_keeps_every_gradient_and_the_report_says_why():
    step, x = mlp_step(clip=True)
    step_e, x_e = mlp_step(clip=True)
    traced = tg.trace(step, backend="numpy")
    np.testing.assert_allclose(traced(x).item(), step_e(x_e).item(), rtol=1e-12)
    spans = gradient_lifetimes(traced.latest)
    assert most_alive(spans) == len(spans) == 8
    text = str(traced.report())
    assert "kept until all exist, because an update reads a value computed from all" in text


@pytest.mark.parametrize("clip", [False, True])
def test_two_step_calls_each_free_or_keep_their_gradients_and_the_report_says_which(clip):
    """The report asks each `step()` call about its own gradients: the first call's updates
    run before the second backward's gradients exist, which hid the clipping's wait."""
    step, x = mlp_step(clip=clip, calls=2)
    step_e, x_e = mlp_step(clip=clip, calls=2)
    traced = tg.trace(step, backend="numpy")
    np.testing.assert_allclose(traced(x).item(), step_e(x_e).item(), rtol=1e-12)
    spans = gradient_lifetimes(traced.latest)
    assert len(spans) == 16 and most_alive(spans) == (8 if clip else 1)
    text = str(traced.report())
    assert ("kept until all exist" in text) == clip
    assert ("each freed by its update inside backward" in text) != clip


def test_the_timeline_counts_no_bytes_for_state_written_in_place():
    from tracegrad.runtime.timeline import lifetimes

    step, x = mlp_step()
    traced = tg.trace(step, backend="numpy")
    traced(x)
    plan = traced.latest
    counted = {life.value for life in lifetimes(plan)}
    assert plan.memory.in_place and not counted & set(plan.memory.in_place)

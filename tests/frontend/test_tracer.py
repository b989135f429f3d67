"""The tracer (frontend/tracer.py): tensors a traced step makes and keeps in Python state (a
module caching a mask on its first call, as pytorch/examples' word_language_model
TransformerModel does) hold, after every call, what the eager step leaves in them."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as tgt
from tracegrad.core.errors import TraceError


def cached_mask_model(torch, size: int = 5, d: int = 4):
    """A model written the PyTorch way that makes its causal mask on its first forward and
    keeps it on the module for the next calls."""
    nn = torch.nn

    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(d, d)
            self.mask = None

        def forward(self, x):
            if self.mask is None or self.mask.size(0) != x.shape[0]:
                self.mask = torch.log(torch.tril(torch.ones(x.shape[0], x.shape[0])))
            scores = self.proj(x) @ x.T + self.mask
            return torch.softmax(scores, dim=-1) @ x

    torch.manual_seed(0)
    return Masked()


def train(torch, model, steps: int = 3, traced: bool = False, size: int = 5, d: int = 4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = {}

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        kept["last"] = loss.detach() * 2  # also made inside the step and kept outside it
        return loss

    if traced:
        step = tg.trace(step)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        losses.append(float(step(torch.tensor(rng.standard_normal((size, d))))))
        np.testing.assert_allclose(float(kept["last"]), 2 * losses[-1], rtol=1e-12)
    return losses


def weights(model) -> dict[str, np.ndarray]:
    return {k: np.array(v.detach().numpy()) for k, v in model.state_dict().items()}


@pytest.fixture
def float64():
    tg.set_default_dtype(np.float64)
    yield
    tg.set_default_dtype(np.float32)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_tensor_kept_by_a_traced_step_is_concrete_after_it(float64, backend):
    eager_model = cached_mask_model(tgt)
    traced_model = cached_mask_model(tgt)
    traced_model.load_state_dict(eager_model.state_dict())
    eager = train(tgt, eager_model)
    opt = tgt.optim.SGD(traced_model.parameters(), lr=0.1)

    @tg.trace(backend=backend)
    def step(x):
        opt.zero_grad()
        loss = (traced_model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(1)
    traced = [float(step(tgt.tensor(rng.standard_normal((5, 4))))) for _ in range(3)]
    np.testing.assert_allclose(traced, eager, rtol=1e-12)
    assert isinstance(traced_model.mask._value, np.ndarray)  # not a symbolic value of a trace
    np.testing.assert_array_equal(traced_model.mask.numpy(), eager_model.mask.numpy())
    for k, v in weights(traced_model).items():
        np.testing.assert_allclose(v, weights(eager_model)[k], rtol=1e-12, err_msg=k)


def test_a_kept_tensor_is_written_at_every_call(float64):
    """The plan writes the kept tensor at each call (the eager step would make it anew)."""
    model = cached_mask_model(tgt)
    eager_model = cached_mask_model(tgt)
    eager_model.load_state_dict(model.state_dict())
    traced = train(tgt, model, steps=4, traced=True)  # checks `kept` after each call
    np.testing.assert_allclose(traced, train(tgt, eager_model, steps=4), rtol=1e-12)


def test_a_tensor_made_with_a_value_then_updated_in_place_and_kept_is_concrete_after_it():
    """`s = zeros(3); s.add_(x)` kept in Python state (an optimizer's state made at its first
    step): the in-place update made it symbolic, and the plan must write it like any kept
    tensor, or a later trace reading it finds a value of the finished one."""
    held = {}

    @tg.trace(backend="numpy")
    def step(x):
        s = tg.zeros(3, dtype=np.float64)
        s.add_(x)
        held["s"] = s
        return x * 2

    step(tg.tensor(np.arange(3.0)))
    assert isinstance(held["s"]._value, np.ndarray)
    np.testing.assert_array_equal(held["s"].numpy(), np.arange(3.0))


def test_a_step_keeping_nothing_writes_nothing_more():
    x = tg.tensor(np.ones(3, np.float32))

    @tg.trace(backend="numpy")
    def f(x):
        y = x * 2
        return (y + 1).sum()

    f(x)
    assert len(f.latest.graph.outputs) == 1


def test_a_kept_tensor_matches_pytorch(float64):
    torch = pytest.importorskip("torch")
    torch.set_default_dtype(torch.float64)
    try:
        reference_model = cached_mask_model(torch)
        initial = weights(reference_model)
        expected = train(torch, reference_model)
    finally:
        torch.set_default_dtype(torch.float32)
    model = cached_mask_model(tgt)
    model.load_state_dict({k: tgt.tensor(v) for k, v in initial.items()})
    np.testing.assert_allclose(train(tgt, model, traced=True), expected, rtol=1e-10)
    for k, v in weights(model).items():
        np.testing.assert_allclose(v, weights(reference_model)[k], rtol=1e-10, err_msg=k)
    np.testing.assert_array_equal(model.mask.numpy(), reference_model.mask.numpy())


class HandBatchNorm:
    """makemore's batch norm written by hand, in a plain class: its running statistics are
    replaced (not updated in place) at every call."""

    def __init__(self, torch, dim: int):
        self.gamma, self.beta = torch.ones(dim), torch.zeros(dim)
        self.running_mean, self.running_var = torch.zeros(dim), torch.ones(dim)

    def __call__(self, x):
        mean, var = x.mean(0), x.var(0)
        with tg.no_grad():
            self.running_mean = 0.9 * self.running_mean + 0.1 * mean
            self.running_var = 0.9 * self.running_var + 0.1 * var
        return self.gamma * (x - mean) / (var + 1e-5) ** 0.5 + self.beta


class BufferedCounter(tgt.nn.Module):
    """The same in a module: a registered buffer and a plain tensor attribute replaced."""

    def __init__(self):
        super().__init__()
        self.lin = tgt.nn.Linear(3, 3)
        self.register_buffer("running_mean", tgt.zeros(3))
        self.calls = tgt.zeros(())

    def forward(self, x):
        y = self.lin(x)
        with tg.no_grad():
            self.running_mean = 0.9 * self.running_mean + 0.1 * y.mean(0)
            self.calls = self.calls + 1
        return y


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_state_replaced_in_the_step_is_followed_at_every_call(float64, backend):
    """`self.running_mean = 0.9 * self.running_mean + ...`: the plan had read the tensor the
    first call replaced at every later call (the statistics stuck at their first update);
    now the old tensor takes the new one's place and value, as eager's state after each
    call."""
    results = {}
    for traced in (False, True):
        norm, model = HandBatchNorm(tgt, 3), BufferedCounter()
        model.lin.load_state_dict({"weight": tgt.eye(3), "bias": tgt.zeros(3)})
        w = tgt.ones(3, requires_grad=True)

        def step(x):
            loss = (norm(model(x) * w) ** 2).sum()
            loss.backward()
            return loss

        step = tg.trace(step, backend=backend) if traced else step
        rng = np.random.default_rng(2)
        for _ in range(5):
            step(tgt.tensor(rng.standard_normal((4, 3))))
        results[traced] = [norm.running_mean, norm.running_var, model.running_mean,
                           model.calls, w.grad]  # fmt: skip
        assert model.running_mean is model._buffers["running_mean"]
        assert "running_mean" in model.state_dict()
    for got, want in zip(results[True], results[False], strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    assert float(results[True][3]) == 5.0


def eager_and_traced(make, backend, lr):
    """Two copies of `make()`'s module, same weights, and an SGD step for each: eager, traced."""
    models = [make(), make()]
    models[1].load_state_dict(models[0].state_dict())
    steps = []
    for model, traced in zip(models, (False, True), strict=True):
        opt = tgt.optim.SGD(model.parameters(), lr=lr)

        def step(x, model=model, opt=opt):
            opt.zero_grad()
            loss = model(x)
            loss.backward()
            opt.step()
            return loss

        steps.append(tg.trace(step, backend=backend) if traced else step)
    return models, steps


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_kept_tensors_hold_the_latest_calls_values_across_plans(float64, backend):
    """A module caching results on itself (`self.state = ...`, a recurrent `(h, c)` tuple, a
    list entry) while the step runs two plans (two batch sizes): after each call the attributes
    hold that call's values, as eagerly. Each plan writes its own kept tensors, so the one
    that ran puts them back (before, the attribute kept the last-traced plan's, stale)."""

    class Caching(tgt.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = tgt.nn.Linear(3, 3)
            self.state, self.hc, self.log = None, None, [None]

        def forward(self, x):
            y = self.lin(x)
            self.state, self.hc = y.sum(0), (y.mean(0), y.max())
            self.log[0] = y.min()
            return (y**2).sum()

    models, steps = eager_and_traced(Caching, backend, lr=0.01)
    rng = np.random.default_rng(3)
    for n in (2, 3, 2, 3, 2):
        x = rng.standard_normal((n, 3))
        for step in steps:
            step(tgt.tensor(x))
        eager, traced = models
        for got, want in [(traced.state, eager.state), (traced.hc[0], eager.hc[0]),
                          (traced.hc[1], eager.hc[1]), (traced.log[0], eager.log[0])]:  # fmt: skip
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
        assert traced.state.grad_fn is None  # a value: the trace's tape is not kept


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_recurrent_state_carried_in_a_module_attribute_is_followed(float64, backend):
    """`self.hidden = (h, c)` carried between calls and detached (truncated BPTT, the PyTorch
    tutorials' LSTM tagger), with two sequence lengths (two plans): every plan reads and writes
    the same state, as eager reads the last call's. Before, each plan read its own first
    tensors (an LSTM's new h is computed from both old h and c, so the pair was ambiguous),
    and the losses drifted from the third call on."""

    class Carrying(tgt.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = tgt.nn.LSTM(3, 4)
            self.hidden = (tgt.zeros(1, 1, 4), tgt.zeros(1, 1, 4))

        def forward(self, x):
            self.hidden = tuple(h.detach() for h in self.hidden)
            out, self.hidden = self.lstm(x, self.hidden)
            return (out**2).sum()

    models, steps = eager_and_traced(Carrying, backend, lr=0.1)
    rng = np.random.default_rng(4)
    for n in (5, 4, 5, 5, 4, 4, 5):
        x = rng.standard_normal((n, 1, 3))
        eager, traced = (float(step(tgt.tensor(x))) for step in steps)
        assert traced == pytest.approx(eager, rel=1e-12)
        for got, want in zip(models[1].hidden, models[0].hidden, strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_state_rotated_between_module_attributes_is_refused():
    """`self.prev = self.cur; self.cur = f(self.cur)`: a plan reading fixed tensors cannot
    follow the old tensor moving to another attribute: refused, naming the attribute, rather
    than reading the first call's tensors at every call."""

    class Rotating(tgt.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = tgt.nn.Linear(2, 2)
            self.cur, self.prev = tgt.zeros(2), tgt.zeros(2)

        def forward(self, x):
            self.prev = self.cur
            self.cur = self.cur + x
            return self.lin(x).sum()

    model = Rotating()
    weight = model.lin.weight.numpy().copy()
    step = tg.trace(lambda x: model(x))
    with pytest.raises(TraceError, match="attribute `cur`"):
        step(tgt.ones(2))
    np.testing.assert_array_equal(model.lin.weight.numpy(), weight)


def test_a_result_also_kept_in_python_state_is_the_result_after_every_call(float64):
    """A forward hook storing a layer's output (`features[name] = out`) when the step returns
    that output: the stored tensor was the trace's symbolic one, unusable after the call."""
    nn = tgt.nn
    tgt.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    features = {}
    model[1].register_forward_hook(lambda mod, args, out: features.update(last=out))
    opt = tgt.optim.SGD(model.parameters(), lr=0.1)

    @tg.trace
    def step(x):
        opt.zero_grad()
        out = model(x)
        out.square().sum().backward()
        opt.step()
        return {"out": out, "pair": (out, out.sum())}

    for i in range(3):
        x = tgt.ones(2, 3) * i
        want = np.tanh(x.numpy() @ model[0].weight.detach().numpy().T + model[0].bias.numpy())
        got = step(x)
        assert features["last"] is got["out"] and got["pair"][0] is got["out"]
        np.testing.assert_allclose(features["last"].numpy(), want, rtol=1e-12)


def test_a_tensor_appended_to_a_list_refuses_and_a_compiled_module_runs_eagerly():
    """REINFORCE's `saved_log_probs.append(m.log_prob(action))` in a compiled function: the
    plan stored the first call's tensor in place at every call, and the list never grew,
    silently. A module's list entry assigned in place (`self.log[0] = x`) still compiles
    (test_kept_tensors_hold_the_latest_calls_values_across_plans)."""
    lin, saved = tgt.nn.Linear(4, 2), []

    def select(state):
        saved.append(tgt.log_softmax(lin(state), dim=-1)[0])
        return state.sum()

    with pytest.raises(TraceError, match=r"kept in a list.*test_tracer\.py:\d+"):
        tg.trace(select)(tgt.ones(4))

    class Policy(tgt.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.saved = tgt.nn.Linear(4, 2), []

        def forward(self, x):
            self.saved.append(tgt.log_softmax(self.lin(x), dim=-1)[0])
            return self.lin(x)

    policy = Policy()
    compiled = tgt.compile(policy)
    with pytest.warns(UserWarning, match="runs eagerly.*kept in a list"):
        compiled(tgt.ones(4))
    compiled(tgt.ones(4)), compiled(tgt.ones(4))
    assert len(policy.saved) == 3 and all(s.grad_fn is not None for s in policy.saved)


def test_a_bare_result_kept_by_a_hook_is_found_and_a_plain_one_costs_no_heap_sweep(
    float64, monkeypatch
):
    """Finding where Python state holds a result sweeps the heap (tens of ms with a large
    one), so it runs only when a result has references beyond the step's own; the count of
    those (frames holding a bare result included) must be exact both ways."""
    import tracegrad.frontend.tracer as tracer

    sweeps = []
    real = tracer.places
    monkeypatch.setattr(tracer, "places", lambda kept: sweeps.append(kept) or real(kept))
    nn = tgt.nn
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    for shape in [(), (0,), ("loss",)]:  # bare, in a tuple, in a dict
        sweeps.clear()

        def step(x, shape=shape):
            loss = model(x).square().sum()
            return loss if shape == () else (loss, 1) if shape == (0,) else {"loss": loss}

        tg.trace(step)(tgt.ones(2, 3))
        assert sweeps == []
    features = {}
    model[1].register_forward_hook(lambda mod, args, out: features.update(last=out))
    step = tg.trace(lambda x: model(x))
    for i in range(2):
        assert step(tgt.ones(2, 3) * i) is features["last"]


def test_each_optimizer_step_call_numbers_the_update_nodes_it_makes():
    """Two `step()` calls in one traced step: each call's update nodes carry one number, the
    second's another; nodes outside updates carry none. The schedule keeps pieces apart by it."""
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.1, momentum=0.9)

    def step(x):
        for _ in range(2):
            (w * x).sum().backward()
            opt.step()
            opt.zero_grad()

    traced = tg.trace(step, backend="numpy", passes=[])
    traced(tg.tensor([0.5, -1.0]))
    nodes = traced.latest.graph.nodes
    numbers = [n.update for n in nodes if n.phase is tg.Phase.UPDATE]
    first, second = dict.fromkeys(numbers)
    assert first is not None and second is not None and first != second
    assert numbers == sorted(numbers, key=[first, second].index)  # each call's nodes together
    assert all(n.update is None for n in nodes if n.phase is not tg.Phase.UPDATE)


def test_a_state_tensor_read_as_a_python_value_is_guarded():
    """`if self.needs_init:` on a buffer the step then clears in place (vector-quantize-
    pytorch's affine statistics; an `initted` flag): the plan baked in the first call's branch
    and ran it at every call. Now a new value traces again, and each call computes the eager
    step's values."""

    def make():
        flag, avg = tg.tensor(True), tg.zeros(3, dtype=np.float64)

        def step(x):
            if flag:
                flag.fill_(False)
                avg.copy_(x.mean(0))
            else:
                avg.mul_(0.5).add_(x.mean(0) * 0.5)
            return (x * 2).sum()

        return avg, step

    (avg1, eager), (avg2, traced) = make(), make()
    traced = tg.trace(traced)
    with pytest.warns(UserWarning, match=r"traced again because the tensor read by bool\(tensor\)"):
        for k in range(3):
            x = tg.tensor(np.full((2, 3), k + 1.0))
            assert float(traced(x)) == float(eager(x))
            np.testing.assert_allclose(avg2.numpy(), avg1.numpy())
    assert avg2.numpy().tolist() == [2.25] * 3 and len(traced.plans) == 1
    assert sum(len(p) for p in traced.plans.values()) == 2


class _Layout(tuple):
    """A tuple whose length is deliberately ambiguous, as e3nn's `Irreps` (len raises)."""

    def __len__(self):
        raise NotImplementedError("ambiguous")

    @property
    def dim(self):
        return sum(tuple.__iter__(self))


def test_a_step_reading_a_tuple_subclass_that_refuses_len_traces_and_guards_it():
    layout = _Layout((2, 3))
    w = tg.Tensor(np.ones((5, 5), np.float32), requires_grad=True)
    holder = {"layout": layout}

    @tg.trace
    def step(x):
        return (x[:, : holder["layout"].dim] @ w[: holder["layout"].dim]).sum()

    x = tg.Tensor(np.arange(10.0, dtype=np.float32).reshape(2, 5))
    assert [float(step(x)) for _ in range(3)] == [225.0] * 3  # 5 columns of (0..4)+(5..9)
    holder["layout"] = _Layout((1, 1))
    with pytest.warns(UserWarning, match=r"\['layout'\] is another _Layout now"):
        assert float(step(x)) == 5.0 * (0 + 1 + 5 + 6)  # traced again

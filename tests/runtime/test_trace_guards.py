"""What a traced step read of Python state, beyond its arguments, is guarded: a number reached
through a dict, a list or an object, the model or optimizer a global or a dict names, a
module's parameter, whether a parameter requires grad. Each test runs a step eagerly and traced
through the same changes between calls and asks for the same numbers: before these guards the
plan kept what the first trace saw and went on silently."""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pytest

import tracegrad.torch as torch

CONFIG = {"loss": {"beta": 1.0}}
ARGS = argparse.Namespace(kl_weight=1.0, unread=1.0)
MODEL: torch.nn.Module | None = None
OPT: torch.optim.Optimizer | None = None


def _fresh(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 1).double()
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _both(run) -> tuple[list, list]:
    """`run(compile)` with the step as it is and compiled (NumPy backend): their results."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "traced again because ..."
        return run(lambda f: f), run(lambda f: torch.compile(f, backend="numpy"))


X = torch.tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3))


def test_numbers_reached_through_dicts_lists_and_objects_are_guarded():
    def run(compile):
        model, opt = _fresh()
        weights = [1.0]

        def step():
            opt.zero_grad()
            out = model(X).pow(2).mean()
            loss = CONFIG["loss"]["beta"] * out + ARGS.kl_weight * out.abs() * weights[0]
            loss.backward()
            opt.step()
            return loss

        step, losses = compile(step), []
        for i in range(5):
            CONFIG["loss"]["beta"], ARGS.kl_weight, weights[0] = 1.0 + i % 2, 0.5 * i, 2.0 - i
            losses.append(step().item())
        return losses + model.weight.numpy().ravel().tolist()

    eager, traced = _both(run)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)


def test_an_attribute_the_code_does_not_read_is_not_guarded():
    ARGS.unread = 1.0
    step = torch.compile(lambda: X.sum() * ARGS.kl_weight, backend="numpy")
    step()
    ARGS.unread = 2.0
    step()
    assert len(step.plans) == 1 and len(next(iter(step.plans.values()))) == 1


def test_a_model_and_optimizer_rebound_between_calls_are_the_ones_trained():
    """A new fold or a restart: `model, opt = fresh()` in the globals, or in a dict."""

    def run(compile):
        global MODEL, OPT
        MODEL, OPT = _fresh(0)
        held = {"model": _fresh(1)[0]}
        held["opt"] = torch.optim.SGD(held["model"].parameters(), lr=0.1)

        def step():
            OPT.zero_grad()
            held["opt"].zero_grad()
            loss = MODEL(X).pow(2).mean() + held["model"](X).abs().mean()
            loss.backward()
            OPT.step()
            held["opt"].step()
            return loss

        step, seen = compile(step), []
        for i in range(4):
            if i == 2:
                MODEL, OPT = _fresh(2)
                held["model"] = _fresh(3)[0]
                held["opt"] = torch.optim.SGD(held["model"].parameters(), lr=0.1)
            seen.append(step().item())
        return seen + [
            v
            for m in (MODEL, held["model"])
            for p in m.parameters()
            for v in p.numpy().ravel().tolist()
        ]

    eager, traced = _both(run)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)


BATCH = X


def test_a_tensor_rebound_and_a_parameter_replaced_are_read_anew():
    """A loss (its backward outside the compiled function: the plans of a compiled module) and
    a step reading a batch from a dict and from the globals, then a replaced parameter."""

    def run(compile):
        global BATCH
        BATCH, model, data = X, _fresh()[0], {"x": X}

        def loss():
            return model(data["x"]).sum() + model(BATCH).mean()

        loss, seen = compile(loss), []
        for i in range(5):
            out = loss()
            out.backward()
            seen += [out.item(), *model.weight.grad.numpy().ravel().tolist()]
            model.zero_grad()
            if i in (0, 1):
                data["x"] = X * (i + 2)
            elif i == 2:
                BATCH = X * 3
            else:
                model.weight = torch.nn.Parameter(torch.full((1, 3), 0.1 * i).double())
        return seen

    eager, traced = _both(run)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_freezing_and_unfreezing_a_parameter_between_calls(momentum):
    def run(compile):
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1)).double()
        for p, v in zip(model.parameters(), (0.1, 0.2, -0.3, 0.4), strict=True):
            torch.nn.init.constant_(p, v)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)

        def step():
            opt.zero_grad()
            loss = model(X).pow(2).mean()
            loss.backward()
            opt.step()
            return loss

        step, seen = compile(step), []
        for frozen in (True, True, False, False, True):
            model[0].requires_grad_(not frozen)
            seen.append(step().item())
        return seen + [t.item() for p in model.parameters() for t in p.reshape(-1)]

    eager, traced = _both(run)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)


def test_an_argument_that_requires_grad_or_not_traces_apart():
    def run(compile):
        def loss(x):
            return (x * x).sum()

        loss, grads = compile(loss), []
        for wants in (False, True, False, True):
            x = X.clone().requires_grad_(wants)
            out = loss(x)
            if wants:
                out.backward()
                grads.append(x.grad.numpy().ravel().tolist())
            grads.append(out.item())
        return grads

    eager, traced = _both(run)
    assert traced == eager


def test_a_submodule_setting_read_by_its_parent_is_guarded():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Identity()
            self.inner.scale = 1.0

        def forward(self, x):
            return (x * self.inner.scale).sum()

    def run(compile):
        net = Net()
        forward, seen = compile(lambda: net(X)), []
        for scale in (1.0, 2.0, 3.0):
            net.inner.scale = scale
            seen.append(forward().item())
        return seen

    eager, traced = _both(run)
    assert traced == eager


def test_a_change_says_what_changed():
    box = {"beta": 1.0}
    step = torch.compile(lambda: X.sum() * box["beta"], backend="numpy")
    step()
    box["beta"] = 2.0
    with pytest.warns(UserWarning, match=r"because `box` \(from an enclosing function\)\['beta'\]"):
        assert step().item() == pytest.approx(2.0 * X.sum().item())


def test_a_module_tensor_replaced_outside_the_step_is_read_anew():
    """`model.mask = ...` or a hidden state reset between calls (not by the step itself)."""

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2).double()
            self.mask = torch.ones(2, dtype=torch.float64)

        def forward(self, x):
            return (self.lin(x) * self.mask).sum()

    def run(compile):
        torch.manual_seed(0)
        net = Masked()
        forward, seen = compile(lambda: net(X)), []
        for i in range(3):
            seen.append(forward().item())
            net.mask = torch.full((2,), float(i + 2), dtype=torch.float64)
        return seen

    eager, traced = _both(run)
    assert traced == eager


def _weighted(out):  # a helper defined outside the step: what it reads is guarded too
    return CONFIG["loss"]["beta"] * out


def test_a_number_a_helper_reads_is_guarded():
    def run(compile):
        step, seen = compile(lambda: _weighted(X.sum())), []
        for beta in (1.0, 2.0, 3.0):
            CONFIG["loss"]["beta"] = beta
            seen.append(step().item())
        return seen

    eager, traced = _both(run)
    assert traced == eager


class _Trainer:
    """A trainer object, not a module: its step is a compiled method that calls another."""

    def __init__(self, compile):
        self.model, self.opt = _fresh()
        self.scale = 1.0
        self.step = compile(self._step)

    def loss(self, x):
        return self.model(x).pow(2).mean() * self.scale  # read in a method the step calls

    def _step(self, x):
        self.opt.zero_grad()
        loss = self.loss(x)
        loss.backward()
        self.opt.step()
        return loss


def test_what_a_method_the_step_calls_reads_of_its_object_is_guarded():
    def run(compile):
        trainer, losses = _Trainer(compile), []
        for i in range(4):
            trainer.scale = 1.0 + (i >= 2)
            losses.append(trainer.step(X).item())
        return [*losses, *trainer.model.weight.numpy().ravel()]

    eager, traced = _both(run)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)


CALLS = 0


def test_a_count_a_compiled_loss_keeps_is_the_eager_count():
    """The trace runs the step's Python once (twice for a loss whose backward compiles too):
    what it changed is put back, and each call sets what the step leaves."""

    def run(compile):
        global CALLS
        model, CALLS = _fresh()[0], 0

        def loss_fn(x):
            global CALLS
            CALLS += 1
            return model(x).pow(2).mean()

        loss_fn, counts = compile(loss_fn), []
        for _ in range(3):
            loss_fn(X).backward()
            counts.append(CALLS)
        return [*counts, *model.weight.grad.numpy().ravel()]

    eager, traced = _both(run)
    assert eager[:3] == [1, 2, 3]
    np.testing.assert_allclose(traced, eager, rtol=1e-12)


class _Scaled:
    def __init__(self):
        self.model, self.scale = _fresh()[0], 1.0

    @torch.compile(backend="numpy")
    def forward_loss(self, x):
        return self.model(x).sum() * self.scale


def test_a_method_compiled_in_its_class_binds_and_guards_its_object():
    """`@torch.compile` on a method: each instance is the call's first argument; what the step
    reads of it is guarded (PyTorch's decorator on a method)."""
    a, b = _Scaled(), _Scaled()
    b.model.weight.data.mul_(2.0)
    with torch.no_grad():
        want = [(o.model(X).sum() * o.scale).item() for o in (a, b)]
        assert [o.forward_loss(X).item() for o in (a, b)] == pytest.approx(want, rel=1e-12)
        a.scale = 3.0
        with pytest.warns(UserWarning, match="scale"):
            got = a.forward_loss(X).item()
    assert got == pytest.approx(3.0 * want[0], rel=1e-12)
    assert sum(map(len, _Scaled.forward_loss.plans.values())) == 3  # a, b, and a again


def test_a_mode_the_step_switches_is_left_as_eager_leaves_it():
    """A setting the step changes (a phase name a global object holds) is put back after the
    trace and set by every call, as the eager step sets it; an eval pass between calls sets it
    back."""
    run_state = argparse.Namespace(phase="eval")

    def run(compile):
        model, opt = _fresh()
        run_state.phase, seen = "eval", []

        def step():
            run_state.phase = "train" if run_state.phase == "eval" else run_state.phase
            opt.zero_grad()
            loss = model(X).pow(2).mean()
            loss.backward()
            opt.step()
            return loss

        step = compile(step)
        for _ in range(3):
            step()
            seen.append(run_state.phase)
            run_state.phase = "eval"  # an evaluation between steps
        return [*seen, *model.weight.numpy().ravel()]

    eager, traced = _both(run)
    assert eager[:3] == traced[:3] == ["train"] * 3
    np.testing.assert_allclose(traced[3:], eager[3:], rtol=1e-12)


def test_a_numpy_array_the_step_changes_in_place_is_refused():
    counts = np.zeros(2)

    @torch.compile(backend="numpy", fullgraph=True)
    def step(x):
        counts[0] += 1
        return x.sum()

    with pytest.raises(Exception, match="a NumPy array it reads"):
        step(X)


def test_a_count_the_step_changed_before_its_trace_refused_is_counted_once():
    """The step's Python ran while tracing; where the trace refuses, the call runs eagerly and
    counts again: the trace's change is undone first."""
    global CALLS
    CALLS = 0

    def step(x):
        global CALLS
        CALLS += 1
        return x * 2 if x.sum() > 0 else x  # a branch on a value: PyTorch breaks the graph

    step = torch.compile(step, backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs eagerly"
        step(X), step(X)
    assert CALLS == 2


def test_a_modules_forward_compiled_in_its_class_trains_as_eager():
    """`@torch.compile` on `forward` in the class body: the module is the first argument, the
    forward and its backward compile, and training matches the eager module."""

    def run(compile):
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(3, 2).double()

            def forward(self, x):
                return torch.tanh(self.fc(x))

        Net.forward = compile(Net.forward)
        torch.manual_seed(0)
        net = Net()
        opt, losses = torch.optim.SGD(net.parameters(), lr=0.1), []
        for _ in range(3):
            opt.zero_grad()
            loss = net(X).pow(2).sum()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses + net.fc.weight.numpy().ravel().tolist()

    eager, traced = _both(run)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)


NEXT_BATCH = None


def test_a_batch_rebound_in_the_globals_before_each_call_is_read_without_tracing_again():
    """`x = next_batch(); step()` with `x` a global the step reads: each call reads the tensor
    there then (its shape and dtype guarded, as an argument's), one plan for every batch, as
    PyTorch's compiled step; a batch of another shape traces again."""

    def run(compile):
        global NEXT_BATCH
        model, opt = _fresh()

        def step():
            opt.zero_grad()
            loss = model(NEXT_BATCH).pow(2).mean()
            loss.backward()
            opt.step()
            return loss

        step, rng, losses = compile(step), np.random.default_rng(0), []
        for rows in (4, 4, 4, 4, 3, 4):
            NEXT_BATCH = torch.tensor(rng.standard_normal((rows, 3)))
            losses.append(step().item())
        return losses, step

    eager, _ = run(lambda f: f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "traced again" for a batch of the same shape
        traced, step = run(lambda f: torch.compile(f, backend="numpy"))
    np.testing.assert_allclose(traced, eager, rtol=1e-12)
    assert sum(map(len, step.plans.values())) == 3  # grads None, then set; then 3 rows


class ActNorm(torch.nn.Module):
    """nflib's ActNorm: a data-dependent initialization on the first batch, gated by a flag."""

    def __init__(self):
        super().__init__()
        self.log_scale = torch.nn.Parameter(torch.zeros(1, 2, dtype=torch.float64))
        self.initialized = False

    def forward(self, x):
        if not self.initialized:
            self.log_scale.data = -torch.log(x.std(dim=0, keepdim=True)).detach()
            self.initialized = True
        return x * torch.exp(self.log_scale)


class Masked(torch.nn.Module):
    """A write through a boolean mask: the trace refuses it, the call runs eagerly."""

    def forward(self, x):
        out = torch.zeros_like(x)
        inside = x.abs() < 1.0
        out[inside] = 2 * x[inside]
        return out + x


class Flow(torch.nn.Module):
    """nflib's NormalizingFlow: its layers run by `.forward(x)`, not called."""

    def __init__(self, *layers):
        super().__init__()
        self.flows = torch.nn.ModuleList(layers)

    def forward(self, x):
        for f in self.flows:
            x = f.forward(x)
        return x


def run_flow(layers, compiled, steps=3):
    """Losses and final parameters of SGD on a flow of `layers()`, eager or compiled."""
    model = torch.nn.Sequential(Flow(*layers()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.tensor([[1.0, 2.0], [3.0, 5.0], [-1.0, 0.5], [2.0, -3.0]],
                            dtype=torch.float64) * (k + 1) for k in range(steps)]  # fmt: skip

    def step(x):
        loss = (model(x) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    run = torch.compile(step) if compiled else step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses = [float(run(x)) for x in batches]
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("layers", [
    lambda: [ActNorm()],
    lambda: [ActNorm(), Masked(), ActNorm()],  # the trace refused: eager calls
])  # fmt: skip
def test_a_flag_of_a_module_run_by_forward_deep_inside_is_guarded_and_put_back(layers):
    """A setting of a module two levels down that the step never calls (run by `.forward()`)
    is guarded, and put back where the step changed it while tracing: the compiled step
    initializes once, from the first batch, as the eager one (the plan baked the init in and
    ran it at every call; a refused trace left the flag set, and the eager call skipped it)."""
    want_losses, want_params = run_flow(layers, compiled=False)
    got_losses, got_params = run_flow(layers, compiled=True)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-12)
    for got, want in zip(got_params, want_params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_flag_deep_inside_an_inference_function_is_guarded():
    """Without a backward to trace again at the second call: the plan must not run the init at
    every call (it re-normalized each batch: the second came out ten times too small)."""

    def outputs(compiled):
        model = torch.nn.Sequential(Flow(ActNorm()))

        def f(x):
            with torch.no_grad():
                return model(x).sum()

        run = torch.compile(f) if compiled else f
        x = torch.tensor([[1.0, 2.0], [3.0, 5.0], [-1.0, 0.5]], dtype=torch.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "traced again because ActNorm.initialized changed"
            return [float(run(x * k)) for k in (1, 10, 10)]

    np.testing.assert_allclose(outputs(compiled=True), outputs(compiled=False), rtol=1e-12)

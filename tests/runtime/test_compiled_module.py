"""`torch.compile(model)`: the module's calls run a compiled forward and, when backward reaches
them, a compiled backward (runtime/compiled_module.py). Each check trains a compiled module
and an uncompiled copy from the same weights in float64, eagerly around the module (loss,
backward, optimizer), and compares losses, gradients and weights."""

from __future__ import annotations

import copy
import weakref

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch
from tracegrad.frontend.tensor import TraceError
from tracegrad.runtime.compiled_module import OptimizedModule

nn, F = torch.nn, torch.nn.functional


def _pair(make):
    torch.manual_seed(0)
    plain = make().double()
    torch.manual_seed(0)
    compiled = torch.compile(make().double(), backend="numpy")
    return plain, compiled


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)


class Classifier(nn.Module):
    """Batch norm (running statistics written by the forward), dropout (random numbers drawn
    by it), and a (logits, loss) result with the targets by keyword, as nanoGPT's."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.GELU(),
                                  nn.Dropout(0.2), nn.Linear(16, 4))  # fmt: skip

    def forward(self, x, targets=None):
        logits = self.body(x)
        loss = None if targets is None else F.cross_entropy(logits, targets)
        return logits, loss


def _train(model, x, y, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, loss = model(x, targets=y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def test_trains_as_the_eager_module_does():
    plain, compiled = _pair(Classifier)
    rng = np.random.default_rng(0)
    x, y = torch.tensor(rng.standard_normal((8, 6))), torch.tensor(rng.integers(0, 4, 8))
    torch.manual_seed(1)
    want = _train(plain, x, y)
    torch.manual_seed(1)
    got = _train(compiled, x, y)
    _close(got, want)
    assert want[-1] < want[0]
    for (k, a), (j, b) in zip(plain.state_dict().items(), compiled.state_dict().items(),
                              strict=True):  # fmt: skip
        assert j == f"_orig_mod.{k}"  # PyTorch's names for a compiled module's state
        _close(b, a)
    calls = compiled._calls.plans
    assert len(calls) == 1 and all(c.backward is not None for cs in calls.values() for c in cs)


def test_gradients_of_inputs_and_of_every_output():
    plain, compiled = _pair(Classifier)
    plain.eval(), compiled.eval()
    rng = np.random.default_rng(1)
    data, y = rng.standard_normal((5, 6)), torch.tensor(rng.integers(0, 4, 5))
    w = torch.tensor(rng.standard_normal((5, 4)))
    grads = []
    for model in (plain, compiled):
        x = torch.tensor(data, requires_grad=True)
        logits, loss = model(x, targets=y)
        ((logits * w).sum() + 3 * loss).backward()
        grads.append([x.grad, *(p.grad for p in model.parameters())])
    for a, b in zip(*grads, strict=True):
        _close(b, a)


def test_inference_runs_the_forward_alone():
    plain, compiled = _pair(Classifier)
    x = torch.tensor(np.random.default_rng(2).standard_normal((4, 6)))
    plain.eval(), compiled.eval()
    with torch.no_grad():
        _close(compiled(x)[0], plain(x)[0])
    assert all(c.backward is None for cs in compiled._calls.plans.values() for c in cs)
    assert compiled(x)[0].requires_grad  # with grad enabled: another plan, with a backward


def test_frozen_parameters_get_no_gradient():
    plain, compiled = _pair(Classifier)
    x, y = torch.ones(3, 6, dtype=torch.float64), torch.tensor([0, 1, 2])
    for model in (plain, compiled):
        model.eval()
        model.body[0].weight.requires_grad_(False)
        model(x, targets=y)[1].backward()
    assert compiled.body[0].weight.grad is None  # attributes read through to the module
    _close(compiled.body[4].weight.grad, plain.body[4].weight.grad)


def test_backward_twice_needs_retain_graph():
    _, compiled = _pair(Classifier)
    compiled.eval()
    x, y = torch.ones(3, 6, dtype=torch.float64), torch.tensor([0, 1, 2])
    _, loss = compiled(x, targets=y)
    loss.backward(retain_graph=True)
    once = compiled.body[4].bias.grad.clone()
    loss.backward()
    _close(compiled.body[4].bias.grad, 2 * once)  # accumulated, as PyTorch does
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_the_residuals_go_with_the_backward():
    """What the forward kept for backward is freed by a backward that does not retain the graph,
    as PyTorch frees saved tensors, not when the loss tensor goes (a training loop holds it
    until the next step's forward has made its own)."""
    _, compiled = _pair(Classifier)
    x, y = torch.ones(3, 6, dtype=torch.float64), torch.tensor([0, 1, 2])
    _, loss = compiled(x, targets=y)
    ctx = loss.grad_fn.next_functions[0][0].ctx  # the loss's input is the module's node
    kept = [weakref.ref(t) for t in ctx.to_save]
    assert kept and all(r() is not None for r in kept)
    loss.backward()
    assert all(r() is None for r in kept)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if y.sum().item() > 0 else -y  # PyTorch breaks the graph here


def test_a_graph_break_runs_eagerly_or_refuses_with_fullgraph():
    torch.manual_seed(0)
    model = Branchy().double()
    compiled = torch.compile(model, backend="numpy")
    x = torch.ones(2, 3, dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"torch.compile\(Branchy\): this call runs eagerly"):
        got = compiled(x)
    _close(got, model(x))
    got.sum().backward()
    assert model.lin.weight.grad is not None
    with pytest.raises(TraceError, match="fullgraph=True"):
        torch.compile(model, fullgraph=True)(x)


def test_a_compiled_module_inside_a_compiled_step_is_part_of_the_step():
    plain, compiled = _pair(Classifier)
    x, y = torch.ones(4, 6, dtype=torch.float64), torch.tensor([0, 1, 2, 3])
    plain.eval(), compiled.eval()
    step = tg.trace(lambda: compiled(x, targets=y)[1], backend="numpy")
    _close(step(), plain(x, targets=y)[1])
    assert not compiled._calls.plans  # traced into the step's plan, not compiled on its own


def test_torch_compile_returns_an_optimized_module():
    model = nn.Linear(2, 2)
    compiled = torch.compile(model)
    import tracegrad.torch._dynamo as dynamo  # `import torch._dynamo`

    assert isinstance(compiled, dynamo.eval_frame.OptimizedModule)
    assert isinstance(compiled, OptimizedModule) and compiled._orig_mod is model
    assert compiled.weight is model.weight and compiled.in_features == 2
    assert [n for n, _ in compiled.named_parameters()] == ["_orig_mod.weight", "_orig_mod.bias"]


def test_past_eight_signatures_calls_run_eagerly():
    """A module called with ever new shapes (a sequence growing token by token) stops compiling
    after eight, as PyTorch's cache_size_limit, rather than compiling at every call."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2).double()
    compiled = torch.compile(model, backend="numpy")
    with torch.no_grad():
        for n in range(1, 9):
            compiled(torch.ones(n, 3, dtype=torch.float64))
        with pytest.warns(UserWarning, match="8 signatures compiled already"):
            got = compiled(torch.ones(9, 3, dtype=torch.float64))
    assert len(compiled._calls.plans) == 8
    _close(got, model(torch.ones(9, 3, dtype=torch.float64)).detach())


class Exp(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return torch.exp(self.lin(x))  # backward reads the output itself


def test_an_output_backward_reads_is_saved_as_itself():
    torch.manual_seed(0)
    compiled = torch.compile(Exp().double(), backend="numpy")
    out = compiled(torch.ones(2, 3, dtype=torch.float64))
    with torch.no_grad():
        out.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_a_compiled_forward_or_loss_function_passes_gradients_back():
    """`torch.compile(fn)` of a function that returns what autograd tracks without running
    backward itself (a forward, a loss) compiles its backward too: its results' gradients
    reach the parameters it reads (a closure's, a global's) and its arguments. Before, its
    results were constants: `loss.backward()` raised, or, beside another path, the gradient
    through it was silently missing."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 2).double()
    w = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)

    def forward(x):
        return torch.tanh(lin(x)) @ w

    compiled = torch.compile(forward, backend="numpy")
    compiled_loss = torch.compile(lambda a, b: F.cross_entropy(a, b), backend="numpy")
    data, y = np.random.default_rng(0).standard_normal((4, 3)), torch.tensor([0, 1, 0, 1])
    grads = []
    for f, loss_fn in ((forward, F.cross_entropy), (compiled, compiled_loss)):
        for _ in range(2):  # the second call runs the plans compiled by the first
            lin.zero_grad(), setattr(w, "grad", None)
            x = torch.tensor(data, requires_grad=True)
            out = f(x)
            (loss_fn(out, y) + out.sum() + lin(x).sum()).backward()  # beside another path
        grads.append([x.grad, w.grad, lin.weight.grad, lin.bias.grad])
    for a, b in zip(*grads, strict=True):
        _close(b, a)
    with torch.no_grad():  # no grad: the forward plan alone
        _close(compiled(torch.tensor(data)), forward(torch.tensor(data)))
    compiled.wait_for_kernels()
    assert "tanh" in compiled.source  # its forward plan, as a step's plan is shown


def test_a_parameter_written_between_forward_and_backward_is_refused():
    """The backward plan reads parameters at backward time: one written in place since the
    forward (a clipping step under no_grad) would give the new weight's gradient, silently;
    it raises, as eager tracegrad does (PyTorch too, wherever it saved the weight)."""

    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64))

        def forward(self, x):
            return torch.relu(x * self.w)

    model = torch.compile(Gate(), backend="numpy")
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    model(x).sum().backward()
    _close(model.w.grad, [1.0, 0.0, 3.0])
    out = model(x).sum()
    with torch.no_grad():
        model.w.mul_(-1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_a_deep_copy_compiles_its_own_plans():
    """timm's ModelEmaV2 deep-copies the (compiled) model after it has run."""
    plain, compiled = _pair(Classifier)
    plain.eval(), compiled.eval()
    x = torch.ones(4, 6, dtype=torch.float64)
    compiled(x)
    twin = copy.deepcopy(compiled)
    assert isinstance(twin, OptimizedModule) and not twin._calls.plans
    assert twin.body[0].weight is not compiled.body[0].weight
    with torch.no_grad():
        twin.body[0].weight.mul_(0.0)
    _close(compiled(x)[0], plain(x)[0])  # the original's plans still read the original
    assert not np.allclose(twin(x)[0].detach().numpy(), plain(x)[0].detach().numpy())


def test_a_changed_setting_compiles_again_with_a_warning():
    class Tempered(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.temperature = nn.Linear(2, 2).double(), 1.0

        def forward(self, x):
            return self.lin(x) / self.temperature

    model = Tempered()
    compiled, x = torch.compile(model, backend="numpy"), torch.ones(1, 2, dtype=torch.float64)
    first = compiled(x).detach().numpy().copy()
    model.temperature = 4.0
    with pytest.warns(UserWarning, match=r"Tempered.temperature changed \(1.0 -> 4.0\)"):
        _close(compiled(x).detach(), first / 4)


def test_a_forward_reading_another_modules_parameter_runs_eagerly():
    """A parameter the forward reads from outside the module (tied to another module's) would
    get no gradient from the compiled backward: that call runs eagerly, with a warning."""
    torch.manual_seed(0)
    shared = nn.Linear(2, 2).double()

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.own = nn.Linear(2, 2).double()

        def forward(self, x):
            return self.own(x) @ shared.weight

    compiled = torch.compile(Tied(), backend="numpy")
    with pytest.warns(UserWarning, match="not one of the module's parameters"):
        compiled(torch.ones(1, 2, dtype=torch.float64)).sum().backward()
    assert shared.weight.grad is not None


def test_module_compile_compiles_in_place():
    """PyTorch 2.2's `model.compile()`: the calls compile as `torch.compile(model)`'s, while the
    module keeps its class, its `state_dict` keys and its hooks (which run inside the plans)."""
    torch.manual_seed(0)
    plain = Classifier().double()
    torch.manual_seed(0)
    model = Classifier().double()
    seen = []
    model.body[0].register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    assert model.compile(backend="numpy") is None
    rng = np.random.default_rng(0)
    x, y = torch.tensor(rng.standard_normal((8, 6))), torch.tensor(rng.integers(0, 4, 8))
    torch.manual_seed(1)
    want = _train(plain, x, y)
    torch.manual_seed(1)
    _close(_train(model, x, y), want)
    assert type(model) is Classifier and list(model.state_dict()) == list(plain.state_dict())
    assert seen == [(8, 16)]  # traced once: the plan ran the hook's part of the other calls
    assert len(model._compiled.plans) == 1
    twin = copy.deepcopy(model)  # compiles its own plans, as a deep-copied OptimizedModule
    assert twin._compiled.module is twin and not twin._compiled.plans
    with pytest.raises(ValueError, match="unknown backend"):
        nn.Linear(2, 2).compile(backend="no such backend")


def test_a_compiled_submodule_passes_gradients_to_the_rest():
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    model = copy.deepcopy(plain)
    model[2].compile(backend="numpy")
    x = torch.tensor(np.random.default_rng(0).standard_normal((4, 3)))
    for net in (plain, model):
        net(x).square().sum().backward()
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        _close(a.grad, b.grad)
    assert model[2]._compiled.latest is not None and model._compiled is None
    step = tg.trace(lambda: model(x).sum(), backend="numpy")  # inside a step: part of its plan
    _close(step(), plain(x).sum())


class KeepsLosses(nn.Module):
    """llama2.c keeps its loss on the module (`self.last_loss`); mixtures of experts keep an
    auxiliary loss; a hook-like cache keeps the output itself."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.extra = {}

    def forward(self, x, y):
        logits = self.lin(x)
        self.last = logits
        self.pair = (logits.sum(), (self.lin.weight**2).sum())
        self.extra["aux"] = self.lin.bias.abs().sum()
        self.last_loss = F.cross_entropy(logits, y)
        return logits


def test_tensors_the_forward_keeps_carry_their_gradients():
    """They were the plan's values without autograd history: `model.last_loss.backward()`
    raised, and a loss adding a kept auxiliary term lost its gradient silently."""
    plain, compiled = _pair(KeepsLosses)
    x, y = (
        torch.tensor(np.random.default_rng(0).standard_normal((5, 4))),
        torch.tensor([0, 1, 2, 0, 1]),
    )
    for step in range(3):
        for model in (plain, compiled):
            model.zero_grad()
            out = model(x + step, y)
            loss = model.last_loss + model.pair[1] + model.extra["aux"] + model.last.mean()
            (loss + model.pair[0] / 100).backward()
            assert model.last is out
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
        _close(compiled.last_loss.detach(), plain.last_loss.detach())
        for a, b in zip(compiled.parameters(), plain.parameters(), strict=True):
            _close(a.grad, b.grad)
    with torch.no_grad():  # under no_grad the kept tensors are values, as eager's
        compiled(x, y), plain(x, y)
    _close(compiled.last_loss, plain.last_loss)
    assert not compiled.last_loss.requires_grad

"""Module forward hooks (pre-hooks and forward hooks, the global ones, handles): their calling
order, replacement arguments and outputs, removal, against PyTorch's where installed; a traced
step with hooks matches the eager one, and adding or removing a hook traces again."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import assert_traced_training_matches_eager
from tests.nn.test_layers_resampling import needs_torch, torch
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F
from tracegrad.nn.modules import (
    RemovableHandle,
    register_module_forward_hook,
    register_module_forward_pre_hook,
)


def test_a_pre_hook_replaces_the_arguments_and_a_forward_hook_the_output():
    m = nn.Linear(3, 2).double()
    x = tg.tensor(np.ones((1, 3)))
    expected = m(x * 2.0).numpy() + 1.0
    h1 = m.register_forward_pre_hook(lambda mod, args: args[0] * 2.0)  # one value: the args
    h2 = m.register_forward_hook(lambda mod, args, out: out + 1.0)
    assert isinstance(h1, RemovableHandle)
    np.testing.assert_allclose(m(x).numpy(), expected)
    h1.remove()
    h2.remove()
    h2.remove()  # twice is harmless
    np.testing.assert_allclose(m(x).numpy(), m.forward(x).numpy())
    assert not np.allclose(m(x).numpy(), expected)


def test_hooks_run_in_order_prepend_first_and_none_keeps_the_value():
    calls = []
    m = nn.Identity()
    m.register_forward_hook(lambda mod, args, out: calls.append("a"))
    m.register_forward_hook(lambda mod, args, out: calls.append("b") or out * 10)
    m.register_forward_hook(lambda mod, args, out: calls.append("first"), prepend=True)
    m.register_forward_pre_hook(lambda mod, args: calls.append("pre") or (args[0] + 1,))
    m.register_forward_pre_hook(lambda mod, args: calls.append("pre0"), prepend=True)
    assert m(1) == 20
    assert calls == ["pre0", "pre", "first", "a", "b"]


def test_with_kwargs_hooks_see_and_replace_the_keywords():
    class Scale(nn.Module):
        def forward(self, x, *, factor=1.0):
            return x * factor

    m = Scale()
    seen = []
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"factor": 3.0}),
                                with_kwargs=True)  # fmt: skip
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(kwargs) or out + 1,
                            with_kwargs=True)  # fmt: skip
    assert m(2.0, factor=5.0) == 7.0
    assert seen == [{"factor": 3.0}]
    m.register_forward_pre_hook(lambda mod, args, kwargs: 1, with_kwargs=True)
    with pytest.raises(RuntimeError, match="new_kwargs"):
        m(2.0)


def test_always_call_hooks_run_when_forward_raises():
    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m, seen = Fails(), []
    m.register_forward_hook(lambda mod, args, out: seen.append(("plain", out)))
    m.register_forward_hook(lambda mod, args, out: seen.append(("always", out)),
                            always_call=True)  # fmt: skip
    with pytest.raises(ValueError, match="boom"):
        m(1)
    assert seen == [("always", None)]


def test_handles_as_context_managers_and_the_fast_path_comes_back():
    m = nn.Identity()
    with m.register_forward_hook(lambda mod, args, out: out + 1) as handle:
        assert m(1) == 2 and "_hooks" in m.__dict__
        assert list(m._forward_hooks) == [handle.id]
    assert m(1) == 1
    assert "_hooks" not in m.__dict__ and nn.Module._hooks is None


def test_global_hooks_run_before_the_modules_own_for_every_module():
    calls = []
    a, b = nn.Identity(), nn.Identity()
    a.register_forward_hook(lambda mod, args, out: calls.append("own"))
    handles = [
        register_module_forward_pre_hook(lambda mod, args: calls.append(("pre", mod))),
        register_module_forward_hook(lambda mod, args, out: calls.append("global")),
    ]
    a(1)
    b(1)
    assert calls == [("pre", a), "global", "own", ("pre", b), "global"]
    for h in handles:
        h.remove()
    calls.clear()
    assert b(1) == 1 and calls == [] and nn.Module._hooks is None


def test_a_feature_extractor_collects_every_layers_output():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    features = {}
    handles = [
        layer.register_forward_hook(lambda mod, args, out, name=name: features.update({name: out}))
        for name, layer in model.named_children()
    ]
    x = tg.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    y = model(x)
    assert list(features) == ["0", "1", "2"]
    np.testing.assert_array_equal(features["2"].numpy(), y.numpy())
    np.testing.assert_array_equal(features["1"].numpy(), np.maximum(features["0"].numpy(), 0))
    for h in handles:
        h.remove()


@needs_torch
def test_calling_order_and_replacements_match_torch():
    from torch.nn.modules.module import register_module_forward_hook as torch_global_hook

    def run(lib, global_hook):
        log = []
        m = lib.nn.Linear(2, 2).double()
        hooks = [
            m.register_forward_pre_hook(lambda mod, args: log.append("pre1")),
            m.register_forward_pre_hook(
                lambda mod, args: log.append("pre0") or (args[0] * 2,), prepend=True
            ),  # fmt: skip
            m.register_forward_hook(lambda mod, args, out: log.append("post1") or out - 1),
            m.register_forward_hook(
                lambda mod, args, kw, out: log.append(("post0", kw)), prepend=True, with_kwargs=True
            ),  # fmt: skip
            global_hook(lambda mod, args, out: log.append("global")),
        ]
        with torch.no_grad() if lib is torch else tg.no_grad():
            m.weight.copy_(lib.tensor(np.eye(2)))
            m.bias.copy_(lib.tensor(np.array([0.5, -0.5])))
        y = m(lib.tensor(np.array([[1.0, 2.0]])))
        hooks[1].remove()
        z = m(lib.tensor(np.array([[1.0, 2.0]])))
        for h in hooks:
            h.remove()
        return log, y.detach().numpy(), z.detach().numpy()

    ours, theirs = run(tg, register_module_forward_hook), run(torch, torch_global_hook)
    assert ours[0] == theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1])
    np.testing.assert_allclose(ours[2], theirs[2])


class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 3)
        self.fc1.register_forward_pre_hook(lambda mod, args: (args[0] * 0.5,))
        self.fc2.register_forward_hook(lambda mod, args, out: out + args[0].sum() * 0.01)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_with_hooks_matches_the_eager_step(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    batches = [(rng.standard_normal((6, 4)), rng.integers(0, 3, 6)) for _ in range(3)]
    assert_traced_training_matches_eager(lambda: Hooked().double(), batches, backend,
                                         lambda ps: optim.SGD(ps, lr=0.1))  # fmt: skip


def test_a_traced_function_traces_again_when_a_hook_is_added_or_removed():
    m = nn.Linear(2, 2).double()
    x = np.ones((1, 2))
    f = tg.trace(lambda x: m(x), backend="numpy")
    plain = f(x).numpy()
    with m.register_forward_hook(lambda mod, args, out: out * 3.0):
        np.testing.assert_allclose(f(x).numpy(), plain * 3.0)
    np.testing.assert_allclose(f(x).numpy(), plain)
    doubled = m(tg.tensor(x * 2.0)).numpy()
    with register_module_forward_pre_hook(lambda mod, args: (args[0] * 2.0,)):
        np.testing.assert_allclose(f(x).numpy(), doubled)
    np.testing.assert_allclose(f(x).numpy(), plain)


def _backward_hooked(lib, seen):
    """A Linear whose backward pre-hook doubles the output's cotangent and whose full backward
    hook triples the input's gradient, run on an input that needs a gradient and one that
    does not."""
    lib.manual_seed(0)
    lin = lib.nn.Linear(3, 2).double()
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])))
        lin.bias.zero_()

    def pre(module, grad_output):
        seen.append(("pre", [tuple(g.shape) for g in grad_output]))
        return (grad_output[0] * 2,)

    def full(module, grad_input, grad_output):
        seen.append(("full", [None if g is None else tuple(g.shape) for g in grad_input]))
        return None if grad_input[0] is None else (grad_input[0] * 3,)

    lin.register_full_backward_pre_hook(pre)
    lin.register_full_backward_hook(full)
    x = lib.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (lin(x) ** 2).sum().backward()
    (lin(lib.tensor(np.ones((2, 3)))) ** 2).sum().backward()
    return x.grad.numpy(), lin.weight.grad.numpy()


def test_backward_hooks_see_and_replace_the_cotangents():
    seen = []
    x_grad, w_grad = _backward_hooked(tg, seen)
    x = np.arange(6.0).reshape(2, 3)
    w = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    dy = 2 * (2 * x @ w.T)  # the pre-hook doubled d(y^2)/dy
    np.testing.assert_allclose(x_grad, 3 * dy @ w)  # and the full hook tripled the input's
    np.testing.assert_allclose(
        w_grad, dy.T @ x + (2 * 2 * np.ones((2, 3)) @ w.T).T @ np.ones((2, 3))
    )
    assert seen == [("pre", [(2, 2)]), ("full", [(2, 3)]), ("pre", [(2, 2)]), ("full", [None])]


def test_backward_hooks_fire_for_an_input_no_one_holds():
    """`lin(torch.randn(..., requires_grad=True))`: the input dies at once, but PyTorch's graph
    keeps it, so the hooks (opacus's per-sample gradients), and tensor hooks on the way, run."""
    seen = []
    lin = nn.Linear(3, 2)
    lin.register_full_backward_hook(lambda m, gi, go: seen.append(tuple(gi[0].shape)))
    h = lin(tg.ones(4, 3, requires_grad=True))
    h.register_hook(lambda g: seen.append("tensor hook"))
    h.sum().backward()
    assert seen == ["tensor hook", (4, 3)] and lin.weight.grad is not None


def test_registered_backward_hooks_are_listed_as_pytorch_lists_them():
    """captum's DeepLift asks `module._backward_hooks` before adding its own."""
    lin = nn.Linear(2, 2)
    assert lin._backward_hooks == {} and lin._backward_pre_hooks == {}

    def hook(m, gi, go):
        return None

    handle = lin.register_full_backward_hook(hook)
    assert list(lin._backward_hooks.values()) == [hook] and lin._backward_pre_hooks == {}
    handle.remove()
    assert lin._backward_hooks == {}


@needs_torch
def test_backward_hooks_match_torch():
    import warnings

    seen, want_seen = [], []
    import tracegrad.torch as tt

    got = _backward_hooked(tt, seen)
    with warnings.catch_warnings():  # PyTorch's note that no input needs a gradient
        warnings.simplefilter("ignore")
        want = _backward_hooked(torch, want_seen)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert seen == want_seen


def _clipped_model():
    """Gradient clipping per layer, as a backward hook writes it, and a pre-hook's scaling."""
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    model[2].register_full_backward_hook(
        lambda m, gi, go: tuple(None if g is None else tg.clamp(g, -0.01, 0.01) for g in gi)
    )
    model[0].register_full_backward_pre_hook(lambda m, go: (go[0] * 0.5,))
    return model


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_with_a_backward_hook_matches_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    batch = (rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6))
    assert_traced_training_matches_eager(_clipped_model, [batch] * 3, backend,
                                         lambda ps: optim.SGD(ps, lr=0.1))  # fmt: skip

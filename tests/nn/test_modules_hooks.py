"""Module forward hooks (pre-hooks and forward hooks, the global ones, handles): their calling
order, replacement arguments and outputs, removal, against PyTorch's where installed; a traced
step with hooks matches the eager one, and adding or removing a hook traces again."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
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
    models = []
    for _ in range(2):
        nn.manual_seed(0)
        models.append(Hooked().double())
    steps = []
    for model in models:
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y, model=model, opt=opt):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        steps.append(step)
    eager, traced = steps[0], tg.trace(steps[1], backend=backend)
    for _ in range(3):
        x, y = rng.standard_normal((6, 4)), rng.integers(0, 3, 6)
        np.testing.assert_allclose(float(traced(x, y)), float(eager(tg.tensor(x), tg.tensor(y))),
                                   rtol=1e-10)  # fmt: skip
    for (k, v), w in zip(models[0].state_dict().items(), models[1].state_dict().values(),
                         strict=True):  # fmt: skip
        np.testing.assert_allclose(w.numpy(), v.numpy(), rtol=1e-10, err_msg=k)


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

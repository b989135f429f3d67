"""Module's state API as PyTorch 2.13's (the expected keys and calls are what it gives):
get_extra_state/set_extra_state, the state-dict and load-state-dict hooks, set_submodule,
to_empty, call_super_init."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.count = nn.Linear(1, 1), 3

    def get_extra_state(self):
        return {"count": self.count}

    def set_extra_state(self, state):
        self.count = state["count"]


def test_extra_state_is_saved_and_loaded():
    model = nn.Sequential(_Counter())
    state = model.state_dict()
    assert list(state) == ["0._extra_state", "0.lin.weight", "0.lin.bias"]
    other = nn.Sequential(_Counter())
    other[0].count = 0
    assert other.load_state_dict(state) == ([], []) and other[0].count == 3
    del state["0._extra_state"]
    with pytest.raises(RuntimeError, match="missing key '0._extra_state'"):
        other.load_state_dict(state)
    assert other.load_state_dict(state, strict=False).missing_keys == ["0._extra_state"]
    plain = nn.Linear(1, 1)
    keys = plain.load_state_dict({**plain.state_dict(), "_extra_state": 1}, strict=False)
    assert keys.unexpected_keys == ["_extra_state"]
    with pytest.raises(RuntimeError, match="should never be called"):
        plain.get_extra_state()


def test_state_dict_hooks():
    layer, calls = nn.Linear(1, 1), []
    handle = layer.register_state_dict_pre_hook(
        lambda m, prefix, keep: calls.append((prefix, keep))
    )
    layer.register_state_dict_post_hook(lambda m, sd, prefix, meta: sd.pop(prefix + "bias"))
    model = nn.Sequential(layer)
    assert list(model.state_dict(prefix="p.")) == ["p.0.weight"] and calls == [("p.0.", False)]
    handle.remove()
    model.state_dict()
    assert calls == [("p.0.", False)]


def test_load_state_dict_hooks_rename_report_and_forgive():
    def rename(module, state, prefix, meta, strict, missing, unexpected, errors):
        if prefix + "w" in state:
            state[prefix + "weight"] = state.pop(prefix + "w")

    seen = []

    def forgive(module, keys):
        seen.append(list(keys.unexpected_keys))
        keys.unexpected_keys.clear()

    layer = nn.Linear(1, 1)
    layer.register_load_state_dict_pre_hook(rename)
    layer.register_load_state_dict_post_hook(forgive)
    model = nn.Sequential(layer)
    model.load_state_dict({"0.w": np.full((1, 1), 2.0), "0.bias": np.zeros(1), "x": 1})
    assert seen == [["x"]] and layer.weight.item() == 2.0

    old = nn.Linear(1, 1)  # the older private spelling: a hook without the module
    old._register_load_state_dict_pre_hook(
        lambda state, prefix, *rest: rename(None, state, prefix, *rest)
    )
    old.load_state_dict({"w": np.full((1, 1), 5.0), "bias": np.zeros(1)})
    assert old.weight.item() == 5.0

    failing = nn.Linear(1, 1)
    failing.register_load_state_dict_pre_hook(lambda *args: args[-1].append("refused"))
    with pytest.raises(RuntimeError, match="refused"):
        failing.load_state_dict(failing.state_dict())


def test_set_submodule_to_empty_call_super_init():
    net = nn.Sequential(nn.Sequential(nn.ReLU(), nn.Linear(1, 1)))
    net.set_submodule("0.1", nn.Tanh())
    assert type(net[0][1]) is nn.Tanh and list(net.state_dict()) == []
    with pytest.raises(ValueError, match="without a target name"):
        net.set_submodule("", nn.ReLU())
    with pytest.raises(AttributeError, match="has no attribute `x`"):
        net.set_submodule("0.x", nn.ReLU(), strict=True)
    with pytest.raises(ValueError, match="is not an nn.Module"):
        net.set_submodule("0.1", 3)
    with pytest.raises(AttributeError, match="`training` is not an nn.Module"):
        net.set_submodule("0.training", nn.ReLU())
    net.set_submodule("0.x", nn.ReLU())
    assert list(net[0]._modules) == ["0", "1", "x"]
    assert net.to_empty(device="cpu") is net and nn.Module.call_super_init is False
    with pytest.raises(ValueError):
        net.to_empty(device="cuda")
    assert tg.ones(1).shape == (1,)


def test_load_state_dict_assign_makes_the_states_tensors_the_modules():
    """assign=True, PyTorch 2.13's: the module holds the given tensors (their dtype, sharing
    their memory), its parameters still parameters with their requires_grad; buffers too."""
    src = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).double()
    state = {k: v.clone() for k, v in src.state_dict().items()}
    dst = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    dst[0].bias.requires_grad_(False)
    dst.load_state_dict(state, assign=True)
    assert isinstance(dst[0].weight, nn.Parameter) and dst[0].weight.dtype == np.float64
    assert not dst[0].bias.requires_grad and dst[0].weight.requires_grad
    state["0.weight"].numpy()[0, 0] = 7.0  # shared, as PyTorch's
    assert dst[0].weight.numpy()[0, 0] == 7.0
    assert dst[1].running_var is state["1.running_var"]
    x = tg.ones((4, 3), dtype=tg.float64)
    src[0].weight.data[0, 0] = 7.0
    np.testing.assert_allclose(dst(x).numpy(), src(x).numpy())


class _Tally(nn.Module):
    """A module keeping state of its own in the state dict, as torchmetrics' metrics do: it
    overrides `state_dict` (through `destination=`) and `_load_from_state_dict`."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.scale = nn.Parameter(tg.ones(2))

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        state = super().state_dict(*args, destination=destination, prefix=prefix,
                                   keep_vars=keep_vars)  # fmt: skip
        state[prefix + "count"] = tg.tensor(self.count)
        return state

    def _load_from_state_dict(self, state, prefix, *rest):
        if prefix + "count" in state:
            self.count = int(state.pop(prefix + "count"))
        super()._load_from_state_dict(state, prefix, *rest)


class _Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.counter = _Tally()


def test_a_submodules_own_state_dict_and_load_overrides_are_called():
    """A child's overrides were never called: its state was silently left out of the parent's
    state dict and dropped by `load_state_dict(strict=False)` (torchmetrics in a model)."""
    a = _Holder()
    a.counter.count = 7
    a.counter.scale.data.fill_(3.0)
    state = a.state_dict()
    assert list(state) == ["lin.weight", "lin.bias", "counter.scale", "counter.count"]
    b = _Holder()
    assert b.load_state_dict(state) == ([], [])
    assert b.counter.count == 7 and b.counter.scale.tolist() == [3.0, 3.0]
    np.testing.assert_array_equal(b.lin.weight.numpy(), a.lin.weight.numpy())
    # its own level's keys it does not take are unexpected, its missing ones missing
    with pytest.raises(RuntimeError, match=r"counter\.other"):
        _Holder().load_state_dict({**state, "counter.other": tg.ones(1)})
    keys = _Holder().load_state_dict({"lin.weight": state["lin.weight"]}, strict=False)
    assert sorted(keys.missing_keys) == ["counter.scale", "lin.bias"]


def test_state_dict_takes_a_destination_and_pytorchs_positional_order():
    layer = nn.Linear(2, 1)
    into = {"kept": 1}
    assert layer.state_dict(destination=into, prefix="m.") is into
    assert list(into) == ["kept", "m.weight", "m.bias"]
    assert list(layer.state_dict(None, "p.")) == ["p.weight", "p.bias"]


class _Spy(nn.Module):
    """PyTorch keeps parameters and submodules out of the instance's dict, so a class's
    `__getattr__` sees every read of one (pyro's PyroModule registers parameters there)."""

    def __init__(self):
        super().__init__()
        self.seen = []
        self.w = nn.Parameter(tg.ones(2))
        self.sub = nn.Linear(2, 2)
        self.register_buffer("b", tg.zeros(2))

    def __getattr__(self, name):
        self.__dict__["seen"].append(name)
        return super().__getattr__(name)

    def forward(self, x):
        return self.sub(x * self.w + self.b)


def test_a_class_with_getattr_sees_every_read_of_what_it_registered(rng):
    m = _Spy()
    m.w, m.sub, m.b  # noqa: B018
    assert m.seen == ["w", "sub", "b"] and "w" not in vars(m)
    del m.b
    assert "b" not in m._buffers
    with pytest.raises(AttributeError):
        del m.missing
    # trained eagerly and traced from the same weights: the same parameters after 3 steps
    x = tg.tensor(rng.standard_normal((4, 2)))
    eager, traced = _Spy().double(), _Spy().double()
    traced.load_state_dict(eager.state_dict())

    def step(model, opt):
        opt.zero_grad()
        loss = model(x).square().sum()
        loss.backward()
        opt.step()
        return loss

    opts = [tg.optim.SGD(m.parameters(), lr=0.1) for m in (eager, traced)]
    compiled = tg.trace(step)
    for _ in range(3):
        np.testing.assert_allclose(compiled(traced, opts[1]).item(), step(eager, opts[0]).item())
    for (name, a), b in zip(eager.state_dict().items(), traced.state_dict().values(),
                            strict=True):  # fmt: skip
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, err_msg=name)


class _Registering(nn.Module):
    """PyroModule's pattern: `__setattr__` registers modules through `add_module`."""

    def __setattr__(self, name, value):
        if isinstance(value, nn.Module):
            self.add_module(name, value)
        else:
            super().__setattr__(name, value)


def test_add_module_does_not_go_through_setattr():
    m = _Registering()
    m.lin = nn.Linear(2, 2)  # recursed without end: add_module called setattr
    assert list(m._modules) == ["lin"] and m.lin is m._modules["lin"]
    m.value = 3
    with pytest.raises(KeyError, match="attribute 'value' already exists"):
        m.add_module("value", nn.Linear(1, 1))


def test_a_module_dict_without_modules_calls_no_update():
    class Collection(nn.ModuleDict):  # torchmetrics' MetricCollection overrides update()
        def update(self, *args, **kwargs):
            raise AssertionError("update called with nothing to add")

    assert len(Collection()) == 0
    assert list(nn.ModuleDict([("a", nn.ReLU())])) == ["a"]


def test_writing_a_registry_entry_is_what_the_module_reads(tmp_path):
    """accelerate's loader (diffusers' from_pretrained) writes `module._parameters[name]`: the
    module kept computing with its old weight, silently, while state_dict showed the new."""
    import copy

    import tracegrad.torch as torch

    lin = nn.Linear(2, 2, bias=False)
    lin._parameters["weight"] = nn.Parameter(tg.ones(2, 2))
    assert lin.weight is lin._parameters["weight"]
    assert lin(tg.ones(1, 2)).tolist() == [[2.0, 2.0]]
    bn = nn.BatchNorm1d(2).eval()
    bn._buffers["running_mean"] = tg.full((2,), 5.0)
    np.testing.assert_allclose(bn(tg.zeros(1, 2)).numpy(), [[-5.0, -5.0]], rtol=1e-4)
    del lin._parameters["weight"]
    assert not hasattr(lin, "weight")
    lin._parameters.update(weight=nn.Parameter(tg.zeros(2, 2)))
    assert lin.weight.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    twin = copy.deepcopy(lin)  # a copy's registries are its own
    twin._parameters["weight"] = nn.Parameter(tg.ones(2, 2))
    assert twin.weight.tolist()[0] == [1.0, 1.0] and lin.weight.tolist()[0] == [0.0, 0.0]
    tg.save(lin, tmp_path / "lin.pt")  # pickled whole: the registries as plain dicts
    with torch.serialization.safe_globals([nn.Linear]):
        back = tg.load(tmp_path / "lin.pt")
    back._parameters["weight"] = nn.Parameter(tg.ones(2, 2))
    assert back(tg.ones(1, 2)).tolist() == [[2.0, 2.0]]


def test_train_and_eval_run_each_childs_own_train():
    """gpytorch's variational strategy clears a cached factor in its `train()`: `model.eval()`
    set every module's flag directly, so the stale factor gave predictions 5-49% off."""

    class Cached(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = "factor"

        def train(self, mode=True):
            self.cache = None
            return super().train(mode)

    class Frozen(nn.BatchNorm1d):  # a norm that stays in eval mode (fine-tuning recipes)
        def train(self, mode=True):
            return super().train(False)

    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(Cached(), Frozen(2)))
    assert model.eval() is model and model[1][0].cache is None
    model.train()
    assert model.training and model[1].training and not model[1][1].training
    with pytest.raises(ValueError, match="expected to be boolean"):
        model.train("no")


def test_zero_grad_without_none_zeroes_the_same_gradient():
    """`model.zero_grad(set_to_none=False)` made new gradient tensors: a reference kept to
    `p.grad` (an accumulation buffer, a hook's) kept the old values."""
    layer = nn.Linear(2, 1)
    layer(tg.ones(1, 2)).sum().backward()
    kept = layer.weight.grad
    layer.zero_grad(set_to_none=False)
    assert layer.weight.grad is kept and kept.tolist() == [[0.0, 0.0]]
    layer.zero_grad()
    assert layer.weight.grad is None


class _KeepsItsState(tg.nn.Module):
    """A module whose class defines `__getstate__` (LightningModule does)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tg.nn.Linear(2, 3)
        self.register_buffer("seen", tg.zeros(3))

    def __getstate__(self) -> dict:
        return dict(self.__dict__)


def test_a_module_with_its_own_getstate_pickles_with_its_parameters_in_place():
    """pickle restores a dict subclass's entries before its attributes: the parameter registry
    is rebuilt whole, so the unpickled module's attributes are its registered tensors."""
    import pickle

    model = _KeepsItsState()
    again = pickle.loads(pickle.dumps(model))
    assert list(again.state_dict()) == ["seen", "net.weight", "net.bias"]
    assert again.net.weight is again.net._parameters["weight"]
    assert again.seen is again._buffers["seen"]
    np.testing.assert_array_equal(again.net.weight.numpy(), model.net.weight.numpy())

"""tracegrad.nn: Module registration and traversal, state dicts, the layers, Dropout's rules."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F


class Block(nn.Module):
    def __init__(self, shared: nn.Linear):
        super().__init__()
        self.first = shared
        self.scale = nn.Parameter(tg.tensor(np.ones(3, np.float32)))
        self.second = shared  # the same layer twice: its parameters count once

    def forward(self, x):
        return self.second(self.first(x) * self.scale)


def test_named_parameters_are_recursive_ordered_and_unique():
    shared = nn.Linear(3, 3)
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), Block(shared), nn.LayerNorm(3))
    names = [name for name, _ in model.named_parameters()]
    assert names == [
        "0.weight", "0.bias", "2.scale", "2.first.weight", "2.first.bias", "3.weight", "3.bias",
    ]  # fmt: skip
    assert [id(p) for p in model.parameters()] == [id(p) for _, p in model.named_parameters()]
    assert all(p.is_leaf and p.requires_grad for p in model.parameters())


def test_registration_follows_attribute_assignment():
    m = nn.Module()
    m.w = nn.Parameter(tg.tensor([1.0]))
    m.constant = tg.tensor([2.0])  # a plain attribute, not a parameter
    m.scratch = tg.tensor([3.0], requires_grad=True)  # neither, as in PyTorch (d2l's scratch
    m.child = nn.Linear(1, 1)  # models keep their weights so, for an SGD of their own)
    assert [n for n, _ in m.named_parameters()] == ["w", "child.weight", "child.bias"]
    assert list(m.state_dict()) == ["w", "child.weight", "child.bias"]
    assert m.scratch.requires_grad and m.scratch.item() == 3.0
    m.child = None
    del m.w
    assert list(m.named_parameters()) == []


def test_reassigning_a_submodule_or_parameter_keeps_its_place():
    """PyTorch's dict semantics: `model.conv1 = Conv2d(...)` stays first, so children(),
    state_dict() and `Sequential(*list(model.children())[:-1])` are PyTorch's."""
    model = nn.Module()
    model.conv1, model.relu, model.fc = nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Linear(2, 2)
    model.scale = nn.Parameter(tg.tensor([1.0]))
    model.bias = nn.Parameter(tg.tensor([0.0]))
    model.conv1 = nn.Conv2d(1, 2, 5)
    model.scale = nn.Parameter(tg.tensor([2.0]))
    assert [n for n, _ in model.named_children()] == ["conv1", "relu", "fc"]
    assert list(model.state_dict()) == [
        "scale", "bias", "conv1.weight", "conv1.bias", "fc.weight", "fc.bias",
    ]  # fmt: skip
    assert model.conv1.weight.shape == (2, 1, 5, 5) and model.scale.item() == 2.0
    head = nn.Sequential(*list(model.children())[:-1])
    assert [type(m).__name__ for m in head] == ["Conv2d", "ReLU"]
    model.fc = nn.Parameter(tg.tensor([1.0]))  # a module becomes a parameter: moves
    assert [n for n, _ in model.named_children()] == ["conv1", "relu"]
    assert list(dict(model.named_parameters()))[:3] == ["scale", "bias", "fc"]


def test_assigning_before_init_names_the_fix():
    class Broken(nn.Module):
        def __init__(self):
            self.layer = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Broken()


def test_linear_matches_numpy_and_pytorch_init():
    nn.manual_seed(0)
    layer = nn.Linear(400, 300)
    assert layer.weight.shape == (300, 400) and layer.bias.shape == (300,)
    assert layer.weight.dtype == np.float32 and layer.bias.dtype == np.float32
    bound = 1 / np.sqrt(400)
    for p in (layer.weight.numpy(), layer.bias.numpy()):
        assert np.abs(p).max() <= bound and np.abs(p).max() > 0.95 * bound
        assert abs(p.std() - bound / np.sqrt(3)) < 0.05 * bound  # U(-b, b) has std b/sqrt(3)
    x = np.random.default_rng(0).standard_normal((5, 400)).astype(np.float32)
    expected = x @ layer.weight.numpy().T + layer.bias.numpy()
    np.testing.assert_allclose(layer(tg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert nn.Linear(4, 2, bias=False).bias is None


def test_manual_seed_makes_initialization_reproducible():
    nn.manual_seed(7)
    a = nn.Linear(3, 2).weight.numpy().copy()
    nn.manual_seed(7)
    np.testing.assert_array_equal(nn.Linear(3, 2).weight.numpy(), a)


def test_linear_gradients_match_finite_differences(rng):
    layer = nn.Linear(4, 3)
    w, b = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
    check_grad(lambda x, w, b: x @ w.T + b, rng.standard_normal((2, 4)), w, b)
    x = tg.tensor(rng.standard_normal((2, 4)).astype(np.float32))
    layer(x).sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), np.tile(x.numpy().sum(0), (3, 1)), 1e-6)
    np.testing.assert_allclose(layer.bias.grad.numpy(), np.full(3, 2.0))


def test_layernorm_module_gradient_float64(rng):
    ln = nn.LayerNorm(5)
    assert ln.weight.dtype == np.float32
    np.testing.assert_array_equal(ln.weight.numpy(), 1.0)
    np.testing.assert_array_equal(ln.bias.numpy(), 0.0)
    w, b = rng.standard_normal(5), rng.standard_normal(5)
    x = rng.standard_normal((3, 5))

    def through_module(x, w, b):
        ln.weight, ln.bias = w, b
        return ln(x)

    check_grad(through_module, x, w, b)
    y = nn.LayerNorm(5, elementwise_affine=False)(tg.tensor(x)).numpy()
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1 / (1 + 1e-5 / x.var(-1)), rtol=1e-10)


@pytest.mark.parametrize(
    "layer, fn",
    [(nn.ReLU(), F.relu), (nn.GELU(), F.gelu), (nn.Tanh(), F.tanh), (nn.Sigmoid(), F.sigmoid)],
)
def test_activation_layers_apply_their_function(layer, fn, rng):
    x = tg.tensor(rng.standard_normal((2, 3)))
    np.testing.assert_array_equal(layer(x).numpy(), fn(x).numpy())
    assert list(layer.parameters()) == []


def test_sequential_indexing_and_forward(rng):
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    assert len(model) == 3 and isinstance(model[1], nn.Tanh) and model[-1] is model[2]
    x = tg.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    np.testing.assert_array_equal(model(x).numpy(), model[2](model[1](model[0](x))).numpy())
    with pytest.raises(TypeError, match="layer 1 is a function"):
        nn.Sequential(nn.ReLU(), F.relu)


def test_sequential_sliced_to_nothing_is_empty():
    """`seq[:0]` and `Sequential(OrderedDict())` are empty Sequentials (torchvision's detection
    backbones iterate `backbone[:0]`), not a dict taken for a layer."""
    from collections import OrderedDict

    seq = tg.nn.Sequential(tg.nn.ReLU(), tg.nn.Tanh())
    for empty in (seq[:0], tg.nn.Sequential(OrderedDict()), tg.nn.Sequential({})):
        assert len(empty) == 0 and list(empty) == []
    x = tg.ones(2)
    assert seq[:0](x) is x


def test_sequential_edits_as_pytorchs():
    """Slices are Sequentials keeping their layers' names (`model[:-1]` as a feature extractor);
    deleting, inserting and popping number the layers again by place, as PyTorch does."""
    relu, tanh, gelu = nn.ReLU(), nn.Tanh(), nn.GELU()
    model = nn.Sequential(nn.Linear(1, 2), relu, nn.Linear(2, 3), tanh)
    head = model[1:3]
    assert isinstance(head, nn.Sequential) and [n for n, _ in head.named_children()] == ["1", "2"]
    assert head[0] is relu and model[:-1][-1] is model[2]
    del model[1]
    assert [n for n, _ in model.named_children()] == ["0", "1", "2"] and model[2] is tanh
    model.append(nn.Sigmoid()).insert(1, gelu)
    assert [type(m).__name__ for m in model] == ["Linear", "GELU", "Linear", "Tanh", "Sigmoid"]
    assert model.pop(1) is gelu and len(model) == 4 and "4" not in dict(model.named_children())
    model[0] = nn.Identity()
    assert isinstance(model[0], nn.Identity) and model.state_dict().keys() == {"1.weight", "1.bias"}
    with pytest.raises(IndexError, match="index 4 is out of range for 4 layers"):
        model[4]


def test_getattr_finds_what_was_registered():
    """pytorch-cifar's DLA calls `self.__getattr__('level_%d' % i)` itself, as PyTorch's
    Module defines it; a missing name gets PyTorch's message."""
    model = nn.Sequential(nn.Linear(2, 2))
    model.register_buffer("steps", tg.zeros(1))
    assert model.__getattr__("0") is model[0] and model.__getattr__("steps") is model.steps
    assert model[0].__getattr__("weight") is model[0].weight
    with pytest.raises(AttributeError, match="'Sequential' object has no attribute 'nope'"):
        _ = model.nope


def test_plain_attributes_may_come_before_init():
    """timm's DenseNet sets `self.num_classes` before `super().__init__()`, as PyTorch allows;
    parameters and submodules must wait for it."""

    class Early(nn.Module):
        def __init__(self, early):
            self.n = 3
            if early:
                self.lin = nn.Linear(2, 2)
            super().__init__()
            self.lin = nn.Linear(2, self.n)

    assert Early(False).n == 3 and Early(False).lin.out_features == 3
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early(True)


def test_repr_is_readable():
    model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Dropout(0.25)))
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): Sequential(\n"
        "    (0): ReLU()\n"
        "    (1): Dropout(p=0.25, inplace=False)\n"
        "  )\n"
        ")"
    )


def test_train_and_eval_set_every_module():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout()))
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


def test_a_step_that_sets_train_mode_itself_traces_once_and_matches_eager():
    """gcn's and gat's loop: the step starts with model.train(), and the model is evaluated
    (model.eval()) between steps. The flag the step reads is the step's own, so the plan is not
    traced again at each call; after a call the model is in training mode, as after eager's;
    the batch norm's running statistics and the losses equal eager's."""

    def setup():
        nn.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
        opt = tg.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            model.train()
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        return model, step

    x = tg.tensor(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32))
    (model, eager), (traced_model, step) = setup(), setup()
    traced = tg.trace(step, backend="numpy")
    for _ in range(4):
        assert float(traced(x)) == pytest.approx(float(eager(x)), rel=1e-6)
        assert all(m.training for m in traced_model.modules())
        evaluated = [m.eval()(x).numpy() for m in (model, traced_model)]
        np.testing.assert_allclose(evaluated[1], evaluated[0], rtol=1e-5, atol=1e-6)
    assert sum(len(plans) for plans in traced.plans.values()) == 2  # no grads yet, then grads


# --- state dicts --------------------------------------------------------------------------------


def test_state_dict_round_trip_writes_into_existing_parameters():
    nn.manual_seed(0)
    source = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    target = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    state = source.state_dict()
    assert list(state) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    before = [id(p) for p in target.parameters()]
    arrays_before = [p.numpy() for p in target.parameters()]
    result = target.load_state_dict({k: v.numpy().copy() for k, v in state.items()})
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert [id(p) for p in target.parameters()] == before  # optimizers keep valid references
    for p, a, (_, q) in zip(
        target.parameters(), arrays_before, source.named_parameters(), strict=True
    ):
        assert p.numpy() is a
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_state_dict_shares_data_and_is_detached():
    layer = nn.Linear(2, 2)
    state = layer.state_dict()
    assert not state["weight"].requires_grad
    assert np.shares_memory(state["weight"].numpy(), layer.weight.numpy())


def test_load_state_dict_strict_names_every_problem_and_writes_nothing():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    saved = [p.numpy().copy() for p in model.parameters()]
    state = {
        "0.weight": np.zeros((4, 3)),
        "0.bias": np.zeros(5),
        "1.weight": np.zeros((2, 4)),
        "head.weight": np.zeros(1),
    }
    with pytest.raises(RuntimeError) as info:
        model.load_state_dict(state)
    message = str(info.value)
    assert "missing key '1.bias'" in message
    assert "unexpected key 'head.weight'" in message
    assert (
        "shape mismatch for '0.bias': checkpoint torch.Size([5]), model torch.Size([4])" in message
    )
    for p, a in zip(model.parameters(), saved, strict=True):
        np.testing.assert_array_equal(p.numpy(), a)


def test_load_state_dict_non_strict_reports_keys_but_checks_shapes():
    model = nn.Linear(3, 2)
    result = model.load_state_dict({"weight": np.ones((2, 3)), "extra": np.ones(1)}, strict=False)
    assert result == (["bias"], ["extra"])
    np.testing.assert_array_equal(model.weight.numpy(), 1.0)
    assert model.weight.dtype == np.float32
    with pytest.raises(RuntimeError, match="shape mismatch for 'weight'"):
        model.load_state_dict({"weight": np.ones((3, 2))}, strict=False)


# --- Dropout ------------------------------------------------------------------------------------


def test_dropout_masks_scales_and_is_reproducible():
    x = tg.tensor(np.ones((200, 50), np.float32), requires_grad=True)
    y = nn.Dropout(0.3, seed=1)(x)
    values = np.unique(y.numpy())
    np.testing.assert_allclose(values, [0.0, 1 / 0.7], rtol=1e-6)
    assert abs((y.numpy() == 0).mean() - 0.3) < 0.02
    np.testing.assert_array_equal(nn.Dropout(0.3, seed=1)(x).numpy(), y.numpy())
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())  # d(x * mask)/dx = mask


def test_dropout_is_identity_in_eval_and_for_p_zero():
    x = tg.tensor(np.ones(10, np.float32))
    assert nn.Dropout(0.5).eval()(x) is x
    assert nn.Dropout(0.0)(x) is x
    np.testing.assert_array_equal(nn.Dropout(1.0)(x).numpy(), 0.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        nn.Dropout(1.5)


def dropout_model(seed):
    nn.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 2))
    gm = tg.GradManager().attach(model.parameters())
    opt = tg.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        with gm:
            loss = (model(x) ** 2).mean()
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    return model, step


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_dropout_draws_fresh_masks_and_the_same_as_eager(backend, monkeypatch):
    """The random state is state: each call draws anew, and a traced run with the same seed
    draws exactly the masks an eager run draws."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    eager_model, eager_step = dropout_model(5)
    eager = [eager_step(x).item() for _ in range(4)]
    traced_model, step = dropout_model(5)
    traced = tg.trace(step, backend=backend)
    got = [traced(x).item() for _ in range(4)]
    np.testing.assert_allclose(got, eager, rtol=1e-5)
    assert len(set(np.round(got, 6))) == 4  # a fresh mask each call (and a new model)
    for a, b in zip(traced_model.parameters(), eager_model.parameters(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert sum(len(p) for p in traced.plans.values()) == 1


def test_a_plan_traced_in_eval_is_not_reused_in_training():
    model, step = dropout_model(0)
    traced = tg.trace(lambda x: model(x), backend="numpy")
    x = np.ones((4, 8), np.float32)
    model.eval()
    with tg.no_grad():  # inference: a forward plan (with grad, a backward plan besides)
        a, b = traced(x).numpy(), traced(x).numpy()
        np.testing.assert_array_equal(a, b)  # no dropout in eval: one plan, same output
        model.train()
        c, d = traced(x).numpy(), traced(x).numpy()
        assert not np.array_equal(c, a) and not np.array_equal(c, d)  # dropout is on again
        model.eval()
        np.testing.assert_array_equal(traced(x).numpy(), a)
    assert len(traced.plans[next(iter(traced.plans))]) == 2  # train and eval plans, both kept


# --- nn.Parameter -------------------------------------------------------------------------------


def test_parameter_is_a_tensor_sharing_its_data_and_registered_even_when_frozen():
    data = tg.tensor(np.arange(3.0, dtype=np.float32))
    p = nn.Parameter(data)
    assert isinstance(p, tg.Tensor) and p.is_leaf and p.requires_grad
    assert p.numpy() is data.numpy()  # an alias, as PyTorch's
    assert type(p * 2) is tg.Tensor and type(p.detach()) is tg.Tensor
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), 2 * data.numpy())
    m = nn.Module()
    m.frozen = nn.Parameter(tg.ones(2), requires_grad=False)
    m.register_parameter("w", nn.Parameter(tg.zeros(1)))
    m.plain = tg.tensor([1.0], requires_grad=True)  # not a Parameter: not one, as in PyTorch
    assert [n for n, _ in m.named_parameters()] == ["frozen", "w"]
    assert not m.frozen.requires_grad
    with pytest.raises(TypeError, match="must be an nn.Parameter or None"):
        m.register_parameter("x", tg.ones(1))
    with pytest.raises(RuntimeError, match="complex dtype can require gradients"):
        nn.Parameter(tg.tensor([1, 2]))
    assert nn.Parameter().shape == (0,)


def test_layers_make_parameters_and_repr_says_so():
    layer = nn.Linear(2, 3)
    assert all(isinstance(p, nn.Parameter) for p in layer.parameters())
    assert all(isinstance(p, nn.Parameter) for p in nn.LayerNorm(3).parameters())
    assert repr(nn.Parameter(tg.zeros(2))) == (
        "Parameter containing:\ntensor([0., 0.], requires_grad=True)"
    )


def test_parameter_repr_matches_pytorch_up_to_the_dtype():
    torch = pytest.importorskip("torch")
    ours = repr(nn.Parameter(tg.zeros(2), requires_grad=False))
    assert ours.replace(", dtype=float32", "") == repr(torch.nn.Parameter(torch.zeros(2), False))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_module_of_parameters_trains_traced_as_eager(backend):
    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(tg.ones(3))
            self.shift = nn.Parameter(tg.zeros(3))

        def forward(self, x):
            return x * self.scale + self.shift

    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    runs = []
    for traced in (False, True):
        model = Affine()
        opt = tg.optim.SGD(model.parameters(), lr=0.1)

        def step(x, model=model, opt=opt):
            loss = ((model(x) - 1.0) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        step = tg.trace(step, backend=backend) if traced else step
        runs.append(([step(x).item() for _ in range(3)], model.scale.numpy().copy()))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    np.testing.assert_allclose(runs[1][1], runs[0][1], rtol=1e-6)


def test_parameter_traversal_options_as_pytorch():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, shared)
    model.own = nn.Parameter(tg.ones(1))
    assert [n for n, _ in model.named_parameters()] == ["own", "0.weight", "0.bias"]
    assert [n for n, _ in model.named_parameters(remove_duplicate=False)] == [
        "own", "0.weight", "0.bias", "1.weight", "1.bias",
    ]  # fmt: skip
    assert [n for n, _ in model.named_parameters(prefix="m")][1] == "m.0.weight"
    assert len(list(model.parameters(recurse=False))) == 1
    assert [n for n, _ in model.named_modules(remove_duplicate=False)] == ["", "0", "1"]


# --- state dicts of tied parameters -------------------------------------------------------------


class TiedLM(nn.Module):
    """nanoGPT's tying: the output layer's weight is the token embedding's."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(5, 3)
        self.mid = nn.Linear(3, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        return self.head(self.mid(self.wte(idx)))


def torch_tied_lm(torch):
    class TorchTiedLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(5, 3)
            self.mid = torch.nn.Linear(3, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx):
            return self.head(self.mid(self.wte(idx)))

    return TorchTiedLM()


TIED_KEYS = ["wte.weight", "mid.weight", "mid.bias", "head.weight"]


def test_a_tied_parameter_is_in_the_state_dict_under_every_name():
    model = TiedLM()
    state = model.state_dict()
    assert list(state) == TIED_KEYS
    assert state["head.weight"].numpy() is state["wte.weight"].numpy()
    assert [n for n, _ in model.named_parameters()] == TIED_KEYS[:3]
    assert model.state_dict(keep_vars=True)["head.weight"] is model.wte.weight
    assert list(model.state_dict(prefix="lm.")) == ["lm." + k for k in TIED_KEYS]
    fresh = TiedLM()
    assert repr(fresh.load_state_dict(state)) == "<All keys matched successfully>"
    assert fresh.head.weight is fresh.wte.weight  # still tied
    np.testing.assert_array_equal(fresh.wte.weight.numpy(), model.wte.weight.numpy())


def test_tied_copies_that_differ_and_a_missing_one_load_as_in_pytorch():
    """PyTorch 2.13: the copy under the name listed last wins, whatever the dict's order; with
    strict=False one name is enough (the other is reported missing), strict wants both."""
    model = TiedLM()
    state = {"head.weight": np.full((5, 3), 3.0)}  # first in the dict, last in the model
    state.update({k: v for k, v in model.state_dict().items() if k not in state})
    state["wte.weight"] = np.full((5, 3), 2.0)
    model.load_state_dict(state)
    np.testing.assert_array_equal(model.wte.weight.numpy(), 3.0)
    del state["head.weight"]
    with pytest.raises(RuntimeError, match="missing key 'head.weight'"):
        model.load_state_dict(state)
    assert model.load_state_dict(state, strict=False) == (["head.weight"], [])
    np.testing.assert_array_equal(model.head.weight.numpy(), 2.0)


def test_tied_state_dicts_match_pytorch_and_load_both_ways():
    torch = pytest.importorskip("torch")
    reference, model = torch_tied_lm(torch), TiedLM()
    assert list(model.state_dict()) == list(reference.state_dict())
    assert model.load_state_dict(reference.state_dict()) == ([], [])
    idx = np.array([[0, 3, 4], [1, 2, 2]])
    expected = reference(torch.tensor(idx)).detach().numpy()
    np.testing.assert_allclose(model(tg.tensor(idx)).numpy(), expected, rtol=1e-6, atol=1e-6)

    nn.manual_seed(3)
    model = TiedLM()
    back = {k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()}
    assert repr(reference.load_state_dict(back)) == "<All keys matched successfully>"
    expected = reference(torch.tensor(idx)).detach().numpy()
    np.testing.assert_allclose(model(tg.tensor(idx)).numpy(), expected, rtol=1e-6, atol=1e-6)

    # the rules of the test above, checked against PyTorch itself
    state = {"head.weight": torch.full((5, 3), 3.0)}
    state.update({k: v for k, v in reference.state_dict().items() if k not in state})
    state["wte.weight"] = torch.full((5, 3), 2.0)
    reference.load_state_dict(state)
    assert reference.wte.weight.detach().numpy().max() == 3.0
    del state["head.weight"]
    assert reference.load_state_dict(state, strict=False).missing_keys == ["head.weight"]
    assert reference.wte.weight.detach().numpy().max() == 2.0


def test_a_shared_module_is_in_the_state_dict_under_each_name_as_in_pytorch():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, shared)
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    torch = pytest.importorskip("torch")
    layer = torch.nn.Linear(2, 2)
    assert list(torch.nn.Sequential(layer, layer).state_dict()) == list(model.state_dict())


# --- dtype and device -----------------------------------------------------------------------------


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("count", tg.tensor(3))
        self.register_buffer("scale", tg.tensor(2.0))


def dtypes(module):
    return [t.dtype for t in (*module.parameters(), *module.buffers())]


def test_dtype_conversions_convert_floating_tensors_in_place():
    f32, f64, i64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
    m = WithBuffers()
    weight = m.lin.weight
    m.lin.weight.grad = tg.ones((2, 2))
    assert m.double() is m and dtypes(m) == [f64, f64, i64, f64]
    assert m.lin.weight is weight and weight.grad.dtype == f64  # the same tensors, converted
    assert dtypes(m.float()) == [f32, f32, i64, f32]
    assert dtypes(m.to(np.float64)) == [f64, f64, i64, f64]
    assert dtypes(m.to("cpu", tg.float32)) == [f32, f32, i64, f32]
    assert dtypes(m.to(tg.zeros(1, dtype=np.float64))) == [f64, f64, i64, f64]
    assert dtypes(m.to(device="cpu", dtype=np.float32, non_blocking=True)) == [f32] * 2 + [i64, f32]
    assert dtypes(m.half()) == [np.float16, np.float16, i64, np.float16]
    assert dtypes(m.type(np.float32)) == [f32] * 4  # type() converts integer buffers too
    assert m.cpu() is m and m.to("cpu:0") is m
    with pytest.raises(TypeError, match="only accepts floating point dtypes, but got int64"):
        m.to(np.int64)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "mps"])
def test_other_devices_are_a_clear_error_never_a_silent_cpu_run(device):
    m = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=f"device '{device}' is not available: tracegrad runs"):
        m.to(device)
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        m.to(device=device, dtype=np.float64)
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        m.cuda()
    assert m.weight.dtype == np.float32  # nothing converted before the refusal


def test_module_to_matches_pytorch():
    torch = pytest.importorskip("torch")

    class Reference(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.register_buffer("count", torch.tensor(3))
            self.register_buffer("scale", torch.tensor(2.0))

    ours, theirs = WithBuffers(), Reference()
    for convert in [
        lambda m, t: m.double(),
        lambda m, t: m.half(),
        lambda m, t: m.float(),
        lambda m, t: m.to(t.float64),
        lambda m, t: m.type(t.float32),
        lambda m, t: m.to("cpu"),
    ]:
        convert(ours, tg)
        convert(theirs, torch)
        assert [str(d).removeprefix("torch.") for d in dtypes(ours)] == [
            str(t.dtype).removeprefix("torch.") for t in (*theirs.parameters(), *theirs.buffers())
        ]
    with pytest.raises(TypeError, match="floating point"):
        theirs.to(torch.int64)


def test_an_optimizer_built_before_double_keeps_training_the_converted_parameters():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((6, 3))
    nn.manual_seed(0)
    model = nn.Linear(3, 2)
    reference = torch.nn.Linear(3, 2)
    reference.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    model.double()
    reference.double()
    for _ in range(3):
        (model(tg.tensor(x)) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        (reference(torch.tensor(x)) ** 2).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
    assert model.weight.dtype == np.float64
    # the momentum buffers stay float32 (made with the optimizer); PyTorch makes them later
    np.testing.assert_allclose(model.weight.numpy(), reference.weight.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_traces_again_after_a_conversion_and_matches_eager(backend):
    x = np.random.default_rng(0).standard_normal((4, 3))

    def run(traced):
        nn.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        opt = tg.optim.Adam(model.parameters(), lr=0.01)

        def step(x):
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        step = tg.trace(step, backend=backend) if traced else step
        losses = [step(x.astype(np.float32)).item()]
        model.double()
        losses += [step(x).item() for _ in range(2)]
        model.half()
        losses += [step(x.astype(np.float16)).item()]
        return losses, step

    eager, _ = run(False)
    traced, step = run(True)
    np.testing.assert_allclose(traced, eager, rtol=1e-3)
    assert sum(len(p) for p in step.plans.values()) == 3


def test_converting_inside_a_traced_step_is_refused():
    model = nn.Linear(2, 2)
    step = tg.trace(lambda x: model.double()(x), backend="numpy")
    with pytest.raises(tg.TraceError, match="convert the module before the traced step"):
        step(np.ones((1, 2)))
    assert model.weight.dtype == np.float32


def embedding_model():
    nn.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 3))
    gm = tg.GradManager().attach(model.parameters())
    opt = tg.optim.Adam(model.parameters(), lr=0.1)

    def step(idx, y):
        with gm:
            loss = F.cross_entropy(model(idx), y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    return model, opt, step


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_a_step_with_an_index_out_of_range_raises_and_changes_nothing(backend, monkeypatch):
    """Embedding index -1 read and trained the last row; now the check fails the step (in the
    plan when traced) before anything is written: parameters and optimizer state stay, and the
    next good step goes on as if the bad one had not been called."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    good, labels = np.array([0, 1, 2, 4]), np.array([0, 2, 1, 1])
    model, opt, step = embedding_model()
    step = tg.trace(step, backend=backend) if backend else step
    step(good, labels)
    state = [t.numpy().copy() for t in [*model.parameters(), *opt.state[0].values()]]
    with pytest.raises(ValueError, match=r"embedding: indices must lie in \[0, 5\), found -1"):
        step(np.array([0, 1, -1, 4]), labels)
    after = [t.numpy() for t in [*model.parameters(), *opt.state[0].values()]]
    for a, b in zip(after, state, strict=True):
        np.testing.assert_array_equal(a, b)
    step(good, labels)
    reference, _, reference_step = embedding_model()
    reference_step(good, labels)
    reference_step(good, labels)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_batch_norm_without_momentum_keeps_a_cumulative_average_also_traced(backend, monkeypatch):
    """momentum=None: the running statistics are the average of the batches' statistics so far
    (the factor 1 / num_batches_tracked, read from the count's tensor: a traced step raised on
    float(num_batches_tracked))."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    bn = nn.BatchNorm2d(3, momentum=None)
    step = lambda x: bn(x).sum().detach()  # the statistics alone: no backward to compile
    step = tg.trace(step, backend=backend) if backend else step
    batches = [np.random.default_rng(i).normal(i, 1 + i, (4, 3, 2, 2)).astype(np.float32)
               for i in range(3)]  # fmt: skip
    for x in batches:
        step(x)
    assert bn.num_batches_tracked.item() == 3
    means = [x.mean(axis=(0, 2, 3), dtype=np.float64) for x in batches]
    variances = [x.var(axis=(0, 2, 3), ddof=1, dtype=np.float64) for x in batches]
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean(means, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), np.mean(variances, 0), rtol=1e-5)
    if backend:
        assert sum(len(plans) for plans in step.plans.values()) == 1


FACTORY_BUILT = [  # PyTorch's layers take device= and dtype=; so do tracegrad's
    ("Linear", (3, 2)),
    ("Conv1d", (2, 3, 3)), ("Conv2d", (2, 3, 3)), ("ConvTranspose2d", (2, 3, 3)),
    ("Embedding", (10, 4)), ("LayerNorm", (4,)), ("BatchNorm2d", (4,)), ("GroupNorm", (2, 4)),
    ("LSTM", (4, 5)), ("GRU", (4, 5)), ("PReLU", ()), ("RMSNorm", (4,)),
    ("MultiheadAttention", (8, 2)), ("TransformerEncoderLayer", (8, 2, 16)),
]  # fmt: skip


@pytest.mark.parametrize("name, args", FACTORY_BUILT)
def test_layers_take_pytorchs_factory_keywords(name, args):
    layer = getattr(nn, name)(*args, device="cpu", dtype=np.float64)
    dtypes = {p.dtype for p in layer.parameters()}
    dtypes |= {b.dtype for b in layer.buffers() if b.dtype.kind == "f"}
    assert dtypes == {np.dtype(np.float64)}
    assert all(b.dtype.kind != "f" for b in layer.buffers() if b.dtype != np.float64)
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        getattr(nn, name)(*args, device="cuda")


def test_factory_keywords_passed_by_position_as_subclasses_do():
    class Scaled(nn.Linear):  # as PyTorch code subclasses it (mnist_forward_forward's Layer)
        def __init__(self, n_in, n_out, bias=True, device=None, dtype=None):
            super().__init__(n_in, n_out, bias, device, dtype)

    layer = Scaled(3, 2, False, "cpu", np.float64)
    assert layer.weight.dtype == np.float64 and layer.bias is None
    with pytest.raises(TypeError, match="positional arguments"):
        nn.Linear(3, 2, True, "cpu", np.float64, 7)


def test_modules_added_by_name_and_found_by_path():
    model = nn.Sequential()
    for i in range(2):
        model.add_module(f"conv{i}", nn.Conv2d(2, 2, 3))
    model.register_module("norm", nn.BatchNorm2d(2))
    assert [name for name, _ in model.named_children()] == ["conv0", "conv1", "norm"]
    assert model.get_submodule("conv1") is model.conv1 and model.get_submodule("") is model
    assert model.get_parameter("conv0.bias") is model.conv0.bias
    assert model.get_buffer("norm.running_var") is model.norm.running_var
    with pytest.raises(AttributeError, match="no submodule 'conv7'"):
        model.get_submodule("conv7.weight")
    with pytest.raises(KeyError, match="without '.'"):
        model.add_module("a.b", nn.ReLU())


def test_sync_batch_norm_is_batch_norm_in_one_process():
    tg.nn.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    x = tg.tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32))
    want = model(x).numpy()
    weight = model[1].weight
    synced = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(synced[1], nn.SyncBatchNorm) and synced[1].weight is weight
    np.testing.assert_allclose(synced(x).numpy(), want, rtol=1e-6)
    assert nn.SyncBatchNorm(4)(tg.ones((2, 4, 2, 3, 3))).shape == (2, 4, 2, 3, 3)


def test_buffers_assigned_as_nn_buffer():
    class Scaled(nn.Module):  # PyTorch 2.5's spelling of register_buffer
        def __init__(self):
            super().__init__()
            self.scale = nn.Buffer(tg.ones(3) * 2)
            self.cache = nn.Buffer(tg.zeros(2), persistent=False)
            self.w = nn.Parameter(tg.ones(3))

        def forward(self, x):
            return x * self.scale * self.w

    m = Scaled()
    assert list(m.state_dict()) == ["w", "scale"]  # parameters first, as PyTorch's
    assert [n for n, _ in m.named_buffers()] == ["scale", "cache"]
    assert type(m.scale) is tg.Tensor and [n for n, _ in m.named_parameters()] == ["w"]
    np.testing.assert_array_equal(m(tg.ones(3)).numpy(), [2.0, 2.0, 2.0])


REPRS = [  # modules as PyTorch prints them (a script's print(model)), built alike in both
    lambda n: n.Sequential(n.Conv2d(3, 8, 3, stride=2, padding=1), n.BatchNorm2d(8),
                           n.ReLU(inplace=True), n.MaxPool2d(2), n.Dropout(0.1), n.Flatten(),
                           n.Linear(8, 4, bias=False)),
    lambda n: n.TransformerEncoder(n.TransformerEncoderLayer(8, 2, 16), 2),
    lambda n: n.ModuleList([n.ReLU(), n.ReLU(), n.Tanh(), n.ReLU()]),
    lambda n: n.Sequential(n.LayerNorm(4, bias=False), n.GroupNorm(2, 4, affine=False),
                           n.InstanceNorm1d(3, affine=True), n.BatchNorm1d(4, affine=False)),
    lambda n: n.Sequential(n.Embedding(10, 4, padding_idx=0), n.Embedding(5, 2, max_norm=1.0),
                           n.LSTM(4, 8, 2, batch_first=True), n.GRUCell(3, 4, bias=False)),
    lambda n: n.Sequential(n.AvgPool1d(3), n.AvgPool2d(2), n.MaxPool3d(2), n.LPPool2d(2, 3),
                           n.MaxUnpool2d(2), n.AdaptiveAvgPool2d((1, 1)), n.Unflatten(1, (2, 4))),
    lambda n: n.Sequential(n.ZeroPad2d(1), n.ReflectionPad2d(2), n.ConstantPad1d(2, 1.5),
                           n.Upsample(scale_factor=2), n.UpsamplingBilinear2d(size=4),
                           n.PixelShuffle(2)),
    lambda n: n.Sequential(n.ReLU6(True), n.Hardswish(True), n.Softshrink(0.3), n.CELU(0.5, True),
                           n.Threshold(0.1, 2.0, True), n.GLU(), n.SiLU(True), n.ELU(inplace=True),
                           n.LeakyReLU(0.2, True), n.Hardtanh(-2, 2, True), n.GELU("tanh"),
                           n.Softmax(1), n.PReLU(3), n.Unfold(2), n.Fold(4, 2),
                           n.LocalResponseNorm(3), n.ChannelShuffle(2)),
    lambda n: n.Sequential(n.CrossEntropyLoss(label_smoothing=0.1), n.MSELoss(reduction="sum")),
    lambda n: n.ParameterList([n.Parameter(n.init.zeros_(n.Linear(2, 2).weight))]),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(REPRS)))
def test_modules_print_as_pytorchs(case):
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")
    import tracegrad.torch as tt

    assert repr(REPRS[case](tt.nn)) == repr(REPRS[case](torch.nn))

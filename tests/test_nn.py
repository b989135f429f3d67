"""tracegrad.nn: Module registration and traversal, state dicts, the layers, Dropout's rules."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import check_grad

import tracegrad as tg
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F


class Block(nn.Module):
    def __init__(self, shared: nn.Linear):
        super().__init__()
        self.first = shared
        self.scale = tg.tensor(np.ones(3, np.float32), requires_grad=True)
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
    m.w = tg.tensor([1.0], requires_grad=True)
    m.constant = tg.tensor([2.0])  # no requires_grad: a plain attribute, not a parameter
    m.child = nn.Linear(1, 1)
    assert [n for n, _ in m.named_parameters()] == ["w", "child.weight", "child.bias"]
    m.child = None
    del m.w
    assert list(m.named_parameters()) == []


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


def test_repr_is_readable():
    model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Dropout(0.25)))
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): Sequential(\n"
        "    (0): ReLU()\n"
        "    (1): Dropout(p=0.25)\n"
        "  )\n"
        ")"
    )


def test_train_and_eval_set_every_module():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout()))
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


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
    assert "shape mismatch for '0.bias': checkpoint (5,), model (4,)" in message
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
    a, b = traced(x).numpy(), traced(x).numpy()
    np.testing.assert_array_equal(a, b)  # no dropout in eval: one plan, same output
    model.train()
    c, d = traced(x).numpy(), traced(x).numpy()
    assert not np.array_equal(c, a) and not np.array_equal(c, d)  # dropout is on again
    model.eval()
    np.testing.assert_array_equal(traced(x).numpy(), a)
    assert len(traced.plans[next(iter(traced.plans))]) == 2  # train and eval plans, both kept


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
    step = lambda x: bn(x).sum()
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

"""PyTorch's spellings: Tensor methods, grad modes, autograd.grad, losses, optimizers with param
groups, schedulers, clipping and Module helpers. PyTorch is the oracle where it is installed
(those tests skip without it); gradients are checked against finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import check_grad

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

R = np.random.default_rng(11)
X = R.standard_normal((4, 3))


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")


def test_tensor_methods_spelled_as_in_pytorch():
    x = tg.tensor(X)
    assert x.size(0) == 4 and x.size() == (4, 3) and x.size == 12 and x.numel() == 12
    assert x.view(3, 4).shape == (3, 4) and x.view(-1).shape == (12,)
    assert x.permute(1, 0).shape == (3, 4) and x.transpose(0, 1).shape == (3, 4)
    np.testing.assert_array_equal(x.transpose(0, 1).numpy(), X.T)
    np.testing.assert_array_equal(x.mT.numpy(), X.T)
    assert x.unsqueeze(1).shape == (4, 1, 3) and x.unsqueeze(-1).shape == (4, 3, 1)
    assert x.unsqueeze(0).expand(2, -1, -1).shape == (2, 4, 3)
    assert tg.tensor(np.zeros((2, 3, 4))).flatten(1).shape == (2, 12)
    assert x.flatten().shape == (12,)
    np.testing.assert_array_equal(x.clamp(min=0).numpy(), np.clip(X, 0, None))
    np.testing.assert_array_equal(x.clamp(max=0.5, min=-0.5).numpy(), np.clip(X, -0.5, 0.5))
    np.testing.assert_allclose(x.sum(dim=1, keepdim=True).numpy(), X.sum(1, keepdims=True))
    np.testing.assert_allclose(x.mean(dim=0).numpy(), X.mean(0))
    np.testing.assert_allclose(x.var(dim=0, correction=1).numpy(), X.var(0, ddof=1))
    np.testing.assert_allclose(x.std().numpy(), X.std())
    np.testing.assert_allclose(x.std(dim=1, unbiased=True).numpy(), X.std(1, ddof=1))
    np.testing.assert_allclose(x.softmax(dim=1).numpy().sum(1), np.ones(4))
    assert x.argmax(dim=1).tolist() == X.argmax(1).tolist()
    assert x.tolist() == X.tolist() and x.float().dtype == np.float32 and x.dim() == 2
    c = x.clone()
    assert c.numpy() is not x.numpy() and np.array_equal(c.numpy(), X)
    assert c.zero_() is c and not c.numpy().any() and X.any()
    assert tg.cat([x, x], dim=1).shape == (4, 6)
    assert tg.zeros(2, 3).shape == (2, 3) and tg.ones((2, 3), np.float64).dtype == np.float64
    assert tg.randn(2, 3).shape == (2, 3) and tg.rand(5).numpy().max() < 1
    assert tg.arange(5).tolist() == [0, 1, 2, 3, 4] and tg.arange(0.0, 1.0, 0.5).dtype == np.float32
    a = np.ones(3)
    assert tg.from_numpy(a).numpy() is a or np.shares_memory(tg.from_numpy(a).numpy(), a)
    with pytest.raises(TypeError, match="both dim= and axis="):
        x.sum(dim=0, axis=0)


def test_every_function_taking_axis_takes_dim_through_the_one_alias():
    import inspect

    public = [getattr(tg, n) for n in tg.__all__] + [getattr(F, n) for n in F.__all__]
    public += [getattr(tg.linalg, n) for n in tg.linalg.__all__]
    with_axis = [f for f in public if inspect.isfunction(f)
                 and "axis" in inspect.signature(f).parameters]  # fmt: skip
    assert len(with_axis) > 30
    missing = [f.__name__ for f in with_axis if not hasattr(f, "__wrapped__")]
    assert not missing, f"no dim= alias: {missing}"
    np.testing.assert_array_equal(tg.roll(X, 1, dim=0).numpy(), np.roll(X, 1, 0))
    np.testing.assert_allclose(tg.linalg.norm(X, dim=1, keepdim=True).numpy(),
                               np.linalg.norm(X, axis=1, keepdims=True))  # fmt: skip


def test_manual_seed_makes_randn_and_init_repeatable():
    tg.manual_seed(3)
    a, la = tg.randn(3), nn.Linear(2, 2)
    tg.manual_seed(3)
    b, lb = tg.randn(3), nn.Linear(2, 2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(la.weight.numpy(), lb.weight.numpy())


def test_grad_modes_and_autograd_grad():
    x = tg.tensor([1.0, 2.0], requires_grad=True)

    @tg.no_grad
    def bare(t):
        return t * 2

    assert not bare(x).requires_grad and tg.is_grad_enabled()
    with tg.no_grad():
        with tg.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    with tg.set_grad_enabled(False):
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()

    y = x**3
    y.backward(gradient=tg.tensor([1.0, 0.5]))
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 6.0])
    (g,) = tg.autograd.grad((x**3).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), [3.0, 12.0])
    (h,) = tg.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(h.numpy(), [6.0, 12.0])
    z = tg.tensor(1.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="allow_unused"):
        tg.autograd.grad((x * 2).sum(), [x, z])
    assert tg.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)[1] is None


# --- losses ---------------------------------------------------------------------------------

LOGITS = R.standard_normal((5, 4))
LABELS = np.array([0, 3, -100, 1, 3])
PROBS = np.exp(LOGITS[::-1]) / np.exp(LOGITS[::-1]).sum(1, keepdims=True)
P01 = R.uniform(0.05, 0.95, (5, 4))
T01 = R.uniform(0, 1, (5, 4))
W4 = np.array([0.5, 1.0, 2.0, 1.5])

LOSSES = {
    "ce ignore+smoothing+weight": ("cross_entropy", [LOGITS, LABELS],
                                   dict(weight=W4, label_smoothing=0.1)),
    "ce probabilities": ("cross_entropy", [LOGITS, PROBS], dict(label_smoothing=0.2)),
    "ce sum": ("cross_entropy", [LOGITS, np.array([0, 3, 2, 1, 3])], dict(reduction="sum")),
    "nll": ("nll_loss", [LOGITS, LABELS], dict(weight=W4)),
    "bce": ("binary_cross_entropy", [P01, T01], {}),
    "bce logits": ("binary_cross_entropy_with_logits", [LOGITS, T01], dict(pos_weight=W4)),
    "l1": ("l1_loss", [LOGITS, T01], {}),
    "smooth l1": ("smooth_l1_loss", [LOGITS, T01], dict(beta=0.5)),
    "huber": ("huber_loss", [LOGITS * 2, T01], dict(delta=0.7, reduction="none")),
    "mse": ("mse_loss", [LOGITS, T01], dict(reduction="sum")),
}  # fmt: skip
MODULES = {"cross_entropy": "CrossEntropyLoss", "nll_loss": "NLLLoss", "mse_loss": "MSELoss",
           "binary_cross_entropy": "BCELoss", "binary_cross_entropy_with_logits":
           "BCEWithLogitsLoss", "l1_loss": "L1Loss", "smooth_l1_loss": "SmoothL1Loss",
           "huber_loss": "HuberLoss"}  # fmt: skip


def _np_log_softmax(z):
    z = z - z.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def _np_ce(z, labels, weight, eps):
    """PyTorch's documented formula: weighted, smoothed, ignored samples out of the mean."""
    logp, keep = _np_log_softmax(z), labels != -100
    safe = np.where(keep, labels, 0)
    w = weight[safe] * keep
    nll = -logp[np.arange(len(z)), safe] * w
    smooth = -(logp * weight).sum(1) / z.shape[1] * keep
    return ((1 - eps) * nll + eps * smooth).sum() / w.sum()


def _np_softplus(z):
    return np.log1p(np.exp(-np.abs(z))) + np.maximum(z, 0)


NUMPY_LOSSES = {  # independent NumPy references, so CI (without PyTorch) checks values too
    "ce ignore+smoothing+weight": lambda z, t: _np_ce(z, t, W4, 0.1),
    "nll": lambda z, t: -(z[np.arange(5), np.where(t < 0, 0, t)] * W4[np.where(t < 0, 0, t)]
                          * (t >= 0)).sum() / (W4[np.where(t < 0, 0, t)] * (t >= 0)).sum(),
    "bce": lambda p, t: -(t * np.log(p) + (1 - t) * np.log1p(-p)).mean(),
    "bce logits": lambda z, t: (W4 * t * _np_softplus(-z) + (1 - t) * _np_softplus(z)).mean(),
    "l1": lambda z, t: np.abs(z - t).mean(),
    "smooth l1": lambda z, t: np.where(np.abs(z - t) < 0.5, (z - t) ** 2, np.abs(z - t) - 0.25)
    .mean(),
    "huber": lambda z, t: np.where(np.abs(z - t) < 0.7, 0.5 * (z - t) ** 2,
                                   0.7 * (np.abs(z - t) - 0.35)),
}  # fmt: skip


@pytest.mark.parametrize("case", LOSSES)
def test_losses_match_numpy_pytorch_and_finite_differences(case):
    name, (x, t), kw = LOSSES[case]
    got = getattr(F, name)(tg.tensor(x), t, **kw)
    module = getattr(nn, MODULES[name])(**kw)
    np.testing.assert_array_equal(module(tg.tensor(x), t).numpy(), got.numpy())
    check_grad(lambda z: getattr(F, name)(z, t, **kw), x)
    if case in NUMPY_LOSSES:
        np.testing.assert_allclose(got.numpy(), NUMPY_LOSSES[case](x, t), rtol=1e-10)
    torch = torch_or_skip()
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    want = getattr(torch.nn.functional, name)(torch.tensor(x), torch.tensor(t), **tkw).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_linear_and_log_softmax_dim():
    w, b = R.standard_normal((2, 3)), R.standard_normal(2)
    np.testing.assert_allclose(F.linear(tg.tensor(X), w, b).numpy(), X @ w.T + b)
    np.testing.assert_allclose(
        F.log_softmax(tg.tensor(X), dim=0).numpy(), X - np.log(np.exp(X).sum(0, keepdims=True))
    )


# --- optimizers -----------------------------------------------------------------------------

OPTIMIZERS = {
    "rmsprop": ("RMSprop", dict(lr=0.01, alpha=0.9, weight_decay=0.1)),
    "rmsprop centered momentum": ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
    "adagrad": ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1,
                                initial_accumulator_value=0.1)),
    "sgd groups": ("SGD", dict(lr=0.1, momentum=0.9)),
    "adam groups": ("Adam", dict(lr=0.01, betas=(0.8, 0.9))),
}  # fmt: skip
GROUP_OPTIONS = {
    "sgd groups": dict(lr=0.05, weight_decay=0.1),
    "adam groups": dict(betas=(0.5, 0.6)),
}


def _run_optimizer(lib, cls, kwargs, groups, traced=False):
    """Six steps on two parameters (in two groups where given), grads from a fixed sequence."""
    start = [np.linspace(-1, 1, 6).reshape(2, 3), np.array([0.5, -0.25])]
    grads = [[np.cos(k + a) for a in start] for k in range(6)]
    if lib == "torch":
        import torch

        ps = [torch.tensor(a, requires_grad=True) for a in start]
        opt_cls = getattr(torch.optim, cls)
    else:
        ps = [tg.tensor(a, requires_grad=True) for a in start]
        opt_cls = getattr(optim, cls)
    params = [{"params": [ps[0]]}, {"params": [ps[1]], **groups}] if groups else ps
    opt = opt_cls(params, **kwargs)
    for gs in grads:
        for p, g in zip(ps, gs, strict=True):
            p.grad = torch.tensor(g) if lib == "torch" else tg.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in ps]


def _np_rmsprop(p, grads, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                centered=False):  # fmt: skip
    v, mean_g, buf = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        mean_g = alpha * mean_g + (1 - alpha) * g
        denom = np.sqrt(v - mean_g**2 if centered else v) + eps
        buf = momentum * buf + g / denom
        p = p - lr * (buf if momentum else g / denom)
    return p


def _np_adagrad(p, grads, lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                eps=1e-10):  # fmt: skip
    total = np.full_like(p, initial_accumulator_value)
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * p
        total = total + g * g
        p = p - lr / (1 + (t - 1) * lr_decay) * g / (np.sqrt(total) + eps)
    return p


NUMPY_OPTIMIZERS = {"rmsprop": _np_rmsprop, "rmsprop centered momentum": _np_rmsprop,
                    "adagrad": _np_adagrad}  # fmt: skip


@pytest.mark.parametrize("case", OPTIMIZERS)
def test_optimizers_match_numpy_and_pytorch(case):
    cls, kwargs = OPTIMIZERS[case]
    groups = GROUP_OPTIONS.get(case)
    got = _run_optimizer("tg", cls, kwargs, groups)
    if case in NUMPY_OPTIMIZERS:
        start = [np.linspace(-1, 1, 6).reshape(2, 3), np.array([0.5, -0.25])]
        for i, a in enumerate(start):
            grads = [np.cos(k + a) for k in range(6)]
            want = NUMPY_OPTIMIZERS[case](a, grads, **kwargs)
            np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-14)
    torch_or_skip()
    want = _run_optimizer("torch", cls, kwargs, groups)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_param_groups_and_schedulers_run_traced_without_tracing_again():
    """Two groups with their own lr; a scheduler and a manual group lr change between steps:
    the traced step follows them as the eager one does, from one trace."""

    def run(traced):
        w = tg.tensor(np.linspace(-1, 1, 6), requires_grad=True)
        b = tg.tensor(np.array([0.3]), requires_grad=True)
        opt = optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.5)
        sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        gm = tg.GradManager().attach([w, b])

        def step():
            with gm:
                loss = ((w * b - 1.0) ** 2).sum()
                gm.backward(loss)
            opt.step()
            opt.zero_grad()
            return loss

        run_step = tg.trace(step, backend="numpy") if traced else step
        for i in range(6):
            run_step()
            sched.step()
            if i == 3:
                opt.param_groups[1]["lr"] = 0.01
        return np.concatenate([w.numpy(), b.numpy()]), run_step

    eager, _ = run(False)
    traced, step = run(True)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)
    assert sum(len(plans) for plans in step.plans.values()) == 1


def test_add_param_group_and_zero_grad():
    a, b = tg.tensor([1.0], requires_grad=True), tg.tensor([2.0], requires_grad=True)
    opt = optim.Adam([a], lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.01})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)
    with pytest.raises(ValueError, match="already"):
        opt.add_param_group({"params": [a]})
    a.grad = tg.tensor([1.0])
    opt.zero_grad(set_to_none=False)
    assert a.grad.numpy().tolist() == [0.0] and b.grad is None
    opt.zero_grad()
    assert a.grad is None
    opt.lr = 0.5  # every group, as before param groups
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5]


SCHEDULERS = {
    "StepLR": dict(step_size=3, gamma=0.5),
    "MultiStepLR": dict(milestones=[2, 5], gamma=0.3),
    "ExponentialLR": dict(gamma=0.9),
    "CosineAnnealingLR": dict(T_max=6, eta_min=0.01),
    "LinearLR": dict(start_factor=0.2, total_iters=4),
    "OneCycleLR": dict(max_lr=1.0, total_steps=12, cycle_momentum=False),
    "OneCycleLR 3": dict(max_lr=1.0, total_steps=12, cycle_momentum=False, three_phase=True,
                         anneal_strategy="linear"),
    "LambdaLR": dict(lr_lambda=lambda e: 1.0 / (1 + e)),
}  # fmt: skip


def _lrs(lib, name, steps=11):
    mod = __import__("torch").optim if lib == "torch" else optim
    p = (__import__("torch").zeros(1, requires_grad=True) if lib == "torch"
         else tg.tensor([0.0], requires_grad=True))  # fmt: skip
    opt = mod.SGD([p], lr=0.1)
    sched_mod = mod.lr_scheduler
    if name == "SequentialLR":
        first = sched_mod.LinearLR(opt, start_factor=0.5, total_iters=2)
        second = sched_mod.ExponentialLR(opt, gamma=0.8)
        sched = sched_mod.SequentialLR(opt, [first, second], milestones=[3])
    elif name == "ReduceLROnPlateau":
        sched = sched_mod.ReduceLROnPlateau(opt, patience=1, factor=0.5, cooldown=1)
    else:
        sched = getattr(sched_mod, name.split()[0])(opt, **SCHEDULERS[name])
    out = []
    for i in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step(
            float([3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1][i])
        ) if "Plateau" in name else sched.step()
    return out


def test_schedules_by_their_definitions():
    """Without PyTorch: the schedules' values from their definitions."""
    assert np.allclose(_lrs("tg", "StepLR", 7), [0.1] * 3 + [0.05] * 3 + [0.025])
    assert np.allclose(_lrs("tg", "MultiStepLR", 6), [0.1, 0.1, 0.03, 0.03, 0.03, 0.009])
    assert np.allclose(_lrs("tg", "LinearLR", 6), [0.02, 0.04, 0.06, 0.08, 0.1, 0.1])
    assert np.allclose(_lrs("tg", "CosineAnnealingLR", 7)[::3], [0.1, 0.055, 0.01])
    one_cycle = _lrs("tg", "OneCycleLR", 11)  # 12 steps: warm-up ends at step 2.6
    assert np.isclose(one_cycle[0], 1.0 / 25) and np.argmax(one_cycle) == 3
    assert np.all(np.diff(one_cycle[:4]) > 0) and np.all(np.diff(one_cycle[3:]) < 0)
    plateau = _lrs("tg", "ReduceLROnPlateau")  # patience 1: the third non-improvement halves
    assert plateau[:6] == [0.1, 0.1, 0.1, 0.1, 0.05, 0.05]


@pytest.mark.parametrize("name", [*SCHEDULERS, "SequentialLR", "ReduceLROnPlateau"])
def test_schedulers_match_pytorch(name):
    torch_or_skip()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _lrs("torch", name)
    np.testing.assert_allclose(_lrs("tg", name), want, rtol=1e-12)


def test_clip_grad_norm_and_value():
    ps = [tg.tensor(np.ones(3), requires_grad=True), tg.tensor(np.ones(2), requires_grad=True)]
    ps[0].grad, ps[1].grad = tg.tensor([3.0, 0.0, 0.0]), tg.tensor([0.0, 4.0])
    total = nn.utils.clip_grad_norm_(ps, max_norm=1.0)
    assert math.isclose(float(total), 5.0)
    np.testing.assert_allclose(ps[1].grad.numpy(), [0.0, 0.8], rtol=1e-6)
    total = nn.utils.clip_grad_norm_(ps, max_norm=10.0, norm_type=math.inf)
    np.testing.assert_allclose(ps[1].grad.numpy(), [0.0, 0.8], rtol=1e-6)  # under the limit
    nn.utils.clip_grad_value_(ps, 0.5)
    np.testing.assert_allclose(ps[0].grad.numpy(), [0.5, 0.0, 0.0])


def test_module_helpers():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    seen = []
    model.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "Sequential"]
    assert [n for n, _ in model.named_modules()] == ["", "0", "1", "2"]
    assert len(list(model.children())) == 3
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())
    model.requires_grad_()
    for p in model.parameters():
        p.grad = tg.zeros(p.shape)
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", tg.zeros(1))
            self.register_buffer("scratch", tg.zeros(2), persistent=False)

    c = Counter()
    assert list(c.state_dict()) == ["count"] and [n for n, _ in c.named_buffers()] == [
        "count",
        "scratch",
    ]
    assert not list(c.parameters())
    c.load_state_dict({"count": np.array([3.0])})
    assert c.count.tolist() == [3.0]


def test_the_pytorch_mlp_example_runs_unchanged_and_learns():
    """examples/pytorch_mlp.py is a PyTorch script with its imports renamed; a few epochs."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "pytorch_mlp.py"
    lines = path.read_text().splitlines()
    imports = [
        line for line in lines if "tracegrad" in line and line.split()[0] in ("import", "from")
    ]
    assert imports == [
        "import tracegrad as torch",
        "import tracegrad.nn.functional as F",
        "from tracegrad import nn, optim",
    ]
    spec = importlib.util.spec_from_file_location("pytorch_mlp", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    _, losses, (test_loss, accuracy) = example.train(epochs=3, log=None)
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
    assert accuracy > 0.7 and test_loss < 0.6


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_pytorch_style_step_matches_eager(backend, monkeypatch):
    """Loss modules (ignore_index, label smoothing, logits BCE), clip_grad_norm_, RMSprop and a
    scheduler in one step: traced equals eager, and the schedule needs no new trace."""

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x = R.standard_normal((8, 3))
    labels = np.array([0, 1, 2, -100, 1, 0, 2, 2])
    flags = (R.random((8, 2)) > 0.5).astype(np.float64)

    def run(traced):
        tg.manual_seed(0)
        shapes = [(5, 3), (5,), (5, 5), (5,)]
        params = [tg.randn(*s, dtype=np.float64, requires_grad=True) for s in shapes]
        w1, b1, w2, b2 = params
        ce = nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
        bce = nn.BCEWithLogitsLoss()
        opt = optim.RMSprop(params, lr=0.01, momentum=0.5)
        sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
        gm = tg.GradManager().attach(params)

        def step(xb, yb, fb):
            with gm:
                out = F.linear(tg.tanh(F.linear(xb, w1, b1)), w2, b2)
                loss = ce(out[:, :3], yb) + bce(out[:, 3:], fb)
                gm.backward(loss)
            nn.utils.clip_grad_norm_(params, max_norm=0.5)
            opt.step()
            opt.zero_grad()
            return loss

        run_step = tg.trace(step, backend=backend) if traced else step
        losses = []
        for _ in range(4):
            losses.append(float(run_step(x, labels, flags)))
            sched.step()
        return losses, [p.numpy().copy() for p in params], run_step

    eager_losses, eager_params, _ = run(False)
    losses, params, step = run(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-10)
    for a, b in zip(params, eager_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert sum(len(plans) for plans in step.plans.values()) == 1


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_zero_grad_without_none_zeroes_in_place_eagerly_and_traced(backend):
    """`zero_grad(set_to_none=False)` zeroes `.grad` in place, as PyTorch's does: an alias
    taken after backward sees the zeros; a traced step with it matches eager, step by step."""

    def make():
        w = tg.tensor(np.arange(3.0), requires_grad=True)
        gm = tg.GradManager().attach([w])
        opt = optim.SGD([w], lr=0.1, momentum=0.9)
        w.grad = tg.zeros_like(w)

        def step(x):
            with gm:
                gm.backward((w * x).sum() ** 2)
            alias = w.grad
            before = alias.sum() * 1.0
            opt.step()
            opt.zero_grad(set_to_none=False)
            return before, alias.sum()

        return w, step

    (w_eager, eager), (w_traced, traced) = make(), make()
    traced = tg.trace(traced, backend=backend)
    for i in range(3):
        x = tg.tensor(np.full(3, 1.0 + i))
        (before_e, after_e), (before_t, after_t) = eager(x), traced(x)
        assert float(before_e) != 0 and float(after_e) == 0
        assert float(before_t) == float(before_e) and float(after_t) == 0
        np.testing.assert_allclose(w_traced.numpy(), w_eager.numpy(), rtol=1e-12)
        assert w_traced.grad.numpy().tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_gradients_accumulate_in_place_eagerly_and_traced(backend):
    """Backward adds into an existing `.grad` in place, as PyTorch does: an alias of it taken
    before sees the sum, eagerly as in a traced step (which writes state in place)."""
    w = tg.tensor(np.arange(3.0), requires_grad=True)
    w.grad = tg.ones_like(w)
    alias = w.grad
    gm = tg.GradManager().attach([w])

    def step(x):
        with gm:
            gm.backward((w * x).sum())

    step = step if backend is None else tg.trace(step, backend=backend)
    step(tg.tensor(np.array([1.0, 2.0, 3.0])))
    assert w.grad.numpy().tolist() == [2.0, 3.0, 4.0]
    assert alias.numpy().tolist() == [2.0, 3.0, 4.0]


def test_a_read_only_grad_accumulates_into_a_buffer_of_its_own():
    frozen = np.ones(3)
    frozen.flags.writeable = False
    w = tg.tensor(np.zeros(3), requires_grad=True)
    w.grad = tg.tensor(frozen)  # shares the read-only array
    (w * 2).sum().backward()
    assert w.grad.numpy().tolist() == [3.0, 3.0, 3.0] and frozen.tolist() == [1.0, 1.0, 1.0]

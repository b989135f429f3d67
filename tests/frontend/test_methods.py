"""PyTorch's spellings: Tensor methods, grad modes, autograd.grad, losses, optimizers with param
groups, schedulers, clipping and Module helpers. PyTorch is the oracle where it is installed
(those tests skip without it); gradients are checked against finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
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
    np.testing.assert_allclose(x.std().numpy(), X.std(ddof=1))
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


def test_top_level_functions_take_pytorch_keywords_and_axis_as_their_alias():
    """One meaning per name: no top-level function takes NumPy's axis=/keepdims=/ddof= as its
    own keyword; each with a dim takes axis=/keepdims= as aliases (as PyTorch's do)."""
    import inspect

    public = [getattr(tg, n) for n in tg.__all__] + [getattr(F, n) for n in F.__all__]
    public += [getattr(tg.linalg, n) for n in tg.linalg.__all__]
    functions = [f for f in public if inspect.isfunction(f)]
    numpy_style = [
        f.__name__
        for f in functions
        if {"axis", "keepdims", "ddof"} & set(inspect.signature(f).parameters)
    ]
    assert not numpy_style, numpy_style
    with_dim = [f for f in functions if "dim" in inspect.signature(f).parameters]
    assert len(with_dim) > 30
    missing = [f.__name__ for f in with_dim if not hasattr(f, "__wrapped__")]
    assert not missing, f"no axis= alias: {missing}"
    np.testing.assert_allclose(tg.sum(X, axis=1, keepdims=True).numpy(), X.sum(1, keepdims=True))
    np.testing.assert_allclose(tg.linalg.norm(X, dim=1, keepdim=True).numpy(),
                               np.linalg.norm(X, axis=1, keepdims=True))  # fmt: skip


def test_numpy_only_names_and_keywords_at_the_top_level_say_where_numpy_lives():
    for name in ("make_diagonal", "take_along_axis", "array_split", "expand_dims", "repeat"):
        with pytest.raises(AttributeError, match=rf"tracegrad.{name} is NumPy's; use "
                                                 rf"tracegrad.numpy.{name}"):  # fmt: skip
            getattr(tg, name)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        tg.no_such_name  # noqa: B018
    with pytest.raises(TypeError, match=r"ddof= is NumPy's: NumPy's var is tracegrad.numpy.var"):
        tg.var(X, ddof=1)
    with pytest.raises(TypeError, match="tracegrad.numpy.split"):
        tg.tensor(X).split(2, axis=0)
    with pytest.raises(TypeError, match="a_min"):
        tg.clip(X, a_min=0)


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

    path = Path(__file__).resolve().parents[2] / "examples" / "pytorch_mlp.py"
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


# --- PyTorch's meanings where NumPy's differ: the same call on tracegrad and on torch ------------

S = np.array([[3.0, 1.0, 4.0, 1.5], [5.0, 9.0, 2.0, 6.0], [5.5, 3.5, 8.0, 9.5]])  # no ties
V3 = R.standard_normal((2, 3, 3))


def _take(lib, *values):
    return lib.tensor(np.array(values))


MEANINGS = {  # name: (the call, given the library module and a float64 tensor of S)
    "max dim": lambda lib, x: lib.max(x, dim=1),
    "max dim keepdim": lambda lib, x: x.max(0, keepdim=True),
    "max dim axis alias": lambda lib, x: x.max(axis=1),
    "max all": lambda lib, x: x.max(),
    "max of two": lambda lib, x: lib.max(x, x.flip(1)),
    "min dim": lambda lib, x: lib.min(x, 1),
    "min dim indices": lambda lib, x: x.min(dim=0).indices,
    "median all (lower)": lambda lib, x: x.median(),
    "median dim": lambda lib, x: lib.median(x, dim=1),
    "sort": lambda lib, x: lib.sort(x, dim=0),
    "sort descending": lambda lib, x: x.sort(descending=True),
    "topk": lambda lib, x: lib.topk(x, 2, dim=1),
    "topk smallest": lambda lib, x: x.topk(2, 0, largest=False),
    "kthvalue": lambda lib, x: lib.kthvalue(x, 3, 1, True),
    "argmax flat": lambda lib, x: lib.argmax(x),
    "argmax keepdim": lambda lib, x: x.argmax(1, keepdim=True),
    "argmin": lambda lib, x: lib.argmin(x, dim=0),
    "argsort descending": lambda lib, x: lib.argsort(x, dim=1, descending=True),
    "split by size": lambda lib, x: lib.split(x, 2),
    "split by sizes": lambda lib, x: lib.split(x, [1, 3], dim=1),
    "x.split": lambda lib, x: x.split(3, 1),
    "chunk": lambda lib, x: lib.chunk(x, 3, 1),
    "chunk fewer": lambda lib, x: x.chunk(3, dim=0)[-1],
    "unbind": lambda lib, x: lib.unbind(x, 1),
    "tensor_split": lambda lib, x: lib.tensor_split(x, 3, dim=1),
    "std": lambda lib, x: x.std(),
    "var dim": lambda lib, x: lib.var(x, 1),
    "var correction": lambda lib, x: lib.var(x, 0, correction=0, keepdim=True),
    "std unbiased=False": lambda lib, x: x.std(1, unbiased=False),
    "var(False)": lambda lib, x: x.var(False),
    "std of equal values": lambda lib, x: (x[:, :1] * lib.ones(1, 4)).std(1),
    "linalg.eigh upper": lambda lib, x: lib.linalg.eigh(x @ x.T, "U").eigenvalues,
    "repeat tiles": lambda lib, x: x.repeat(2, 1, 2),
    "repeat_interleave": lambda lib, x: lib.repeat_interleave(x, 2, dim=1),
    "repeat_interleave flat": lambda lib, x: x.repeat_interleave(2),
    "repeat_interleave counts": lambda lib, x: x.repeat_interleave(_take(lib, 1, 0, 2), dim=0),
    "tile": lambda lib, x: lib.tile(x, (2, 1)),
    "cumsum": lambda lib, x: lib.cumsum(x, 1),
    "cumsum method": lambda lib, x: x.cumsum(dim=0),
    "flip": lambda lib, x: lib.flip(x, (0, 1)),
    "x.flip": lambda lib, x: x.flip(1),
    "squeeze a dim not of size 1": lambda lib, x: lib.squeeze(x, 0),
    "squeeze": lambda lib, x: x[:1].squeeze(0),
    "transpose": lambda lib, x: lib.transpose(x, 0, 1),
    "tensordot": lambda lib, x: lib.tensordot(x, x, dims=([0], [0])),
    "tensordot int": lambda lib, x: lib.tensordot(x, x.T, 1),
    "where one argument": lambda lib, x: lib.where(x > 4.0),
    "nonzero": lambda lib, x: lib.nonzero(x > 4.0),
    "trace method": lambda lib, x: x.trace(),
    "cat": lambda lib, x: lib.cat([x, x], dim=1),
    "select": lambda lib, x: lib.select(x, 1, 2),
    "gradient": lambda lib, x: lib.gradient(x, dim=1),
    "dot": lambda lib, x: lib.dot(x[0], x[1]),
    "outer": lambda lib, x: lib.outer(x[0], x[1]),
    "cross default dim": lambda lib, x: lib.cross(x[:, :3], x[:, 1:]),
    "logsumexp": lambda lib, x: lib.logsumexp(x, 1),
    "diagonal": lambda lib, x: lib.diagonal(x, 1),
    "take_along_dim": lambda lib, x: lib.take_along_dim(x, _take(lib, [0], [3], [1]), 1),
    "gather": lambda lib, x: lib.gather(x, 0, _take(lib, [2, 0], [1, 1])),
    "einsum sublist": lambda lib, x: lib.einsum(x, [0, 1], x, [2, 1]),
    "einsum list": lambda lib, x: lib.einsum("ij,kj->ik", [x, x]),
    "nan_to_num positional nan": lambda lib, x: lib.nan_to_num(x / (x - 5.0) * 0.0, 7.0),
    "equal": lambda lib, x: lib.equal(x, x * 1.0),
    "amax": lambda lib, x: lib.amax(x, dim=1),
    "msort": lambda lib, x: lib.msort(x),
    "linalg.norm ord 1": lambda lib, x: lib.linalg.norm(x, 1),
    "x.norm(1)": lambda lib, x: x.norm(1),
    "linalg.vector_norm": lambda lib, x: lib.linalg.vector_norm(x, 3, dim=1),
    "linalg.matrix_norm": lambda lib, x: lib.linalg.matrix_norm(x, "nuc"),
}  # fmt: skip


def _leaves(out):
    """A result as (field, tensor or Python value) pairs: named tuples keep their names."""
    if isinstance(out, tuple) and hasattr(out, "indices"):  # ours and torch.return_types
        return [("values", out.values), ("indices", out.indices)]
    if isinstance(out, tuple | list):
        return [(None, v) for v in out]
    return [(None, out)]


@pytest.mark.parametrize("name", MEANINGS)
def test_pytorch_meanings_match_pytorch(name):
    """Values (and named-tuple fields) as PyTorch's, in float64; gradients through every float
    result as PyTorch's (through the values of (values, indices): a gather by the indices)."""
    torch = torch_or_skip()
    call = MEANINGS[name]
    mine_x, theirs_x = tg.tensor(S, requires_grad=True), torch.tensor(S, requires_grad=True)
    mine, theirs = _leaves(call(tg, mine_x)), _leaves(call(torch, theirs_x))
    assert [f for f, _ in mine] == [f for f, _ in theirs]
    loss_mine, loss_theirs = 0.0, 0.0
    for (_, a), (_, b) in zip(mine, theirs, strict=True):
        if isinstance(b, bool):
            assert a is b
            continue
        assert a.shape == tuple(b.shape), name
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
        if b.dtype == torch.float64 and b.requires_grad:
            c = R.standard_normal(a.shape)
            loss_mine, loss_theirs = (
                loss_mine + (a * c).sum(),
                loss_theirs + (b * torch.tensor(c)).sum(),
            )
    if isinstance(loss_theirs, float):
        return
    loss_mine.backward()
    loss_theirs.backward()
    np.testing.assert_allclose(mine_x.grad.numpy(), theirs_x.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_max_with_a_dim_gives_values_and_indices():
    """Without PyTorch: x.max(dim) is the named tuple (values, indices), indexable and
    unpackable; the gradient goes to the first maximum only; max() is the maximum and
    max(a, b) the elementwise maximum."""
    x = tg.tensor(np.array([[1.0, 7.0, 7.0], [4.0, 2.0, 0.5]]), requires_grad=True)
    result = x.max(dim=1)
    values, indices = result
    assert values is result.values is result[0] and indices is result.indices is result[1]
    assert values.tolist() == [7.0, 4.0] and indices.tolist() == [1, 0]
    (values * tg.tensor([2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [[0.0, 2.0, 0.0], [3.0, 0.0, 0.0]]
    assert x.max().item() == 7.0 and tg.max(x, 2.0 * x).tolist() == [[2, 14, 14], [8, 4, 1]]
    assert x.min(1, keepdim=True).indices.tolist() == [[0], [2]]
    assert tg.median(tg.tensor([4.0, 1.0, 3.0, 2.0])).item() == 2.0  # the lower of the two
    assert tg.sort(x, descending=True).values[0].tolist() == [7.0, 7.0, 1.0]
    assert tg.sort(x, descending=True).indices[0].tolist() == [1, 2, 0]  # stable
    assert tg.topk(x, 1).indices.tolist() == [[1], [0]]
    assert tg.kthvalue(x, 2, 1).values.tolist() == [7.0, 2.0]
    check_grad(lambda t: tg.sort(t, 0).values * tg.topk(t, 2, 0).values[:1], S)
    check_grad(lambda t: tg.median(t, 1).values + tg.kthvalue(t, 1, 1).values, S)


def test_split_is_by_chunk_size_and_chunk_by_count():
    """Without PyTorch: split(x, 2) gives chunks of 2 (NumPy's split(x, 2) gives 2 sections:
    tracegrad.numpy.split); a list gives sizes; chunk's pieces are ceil(n / chunks) long."""
    x = tg.arange(6)
    assert [p.tolist() for p in tg.split(x, 2)] == [[0, 1], [2, 3], [4, 5]]
    assert [p.tolist() for p in x.split(4)] == [[0, 1, 2, 3], [4, 5]]
    assert [p.tolist() for p in tg.split(x, [1, 5])] == [[0], [1, 2, 3, 4, 5]]
    assert [p.tolist() for p in tg.chunk(x, 4)] == [[0, 1], [2, 3], [4, 5]]  # 3, not 4
    assert [p.tolist() for p in tg.chunk(tg.arange(5), 4)] == [[0, 1], [2, 3], [4]]
    assert [p.tolist() for p in tg.unbind(x.reshape(2, 3), 1)] == [[0, 3], [1, 4], [2, 5]]
    with pytest.raises(tg.ShapeError, match="sum to 5"):
        tg.split(x, [1, 4])
    check_grad(lambda t: tg.cat([p * (i + 1) for i, p in enumerate(t.split(2, 1))], 1), S)


def test_std_and_var_are_unbiased_by_default():
    """Without PyTorch: 1..6 has std 1.8708 (NumPy's ddof=0 gives 1.7078: tracegrad.numpy)."""
    x = tg.tensor(np.arange(1.0, 7.0))
    assert math.isclose(x.std().item(), 1.8708286933869707, rel_tol=1e-12)
    assert math.isclose(tg.var(x, correction=0).item(), 35 / 12, rel_tol=1e-12)
    assert math.isclose(x.var(unbiased=False).item(), 35 / 12, rel_tol=1e-12)
    assert math.isclose(x.var(False).item(), 35 / 12, rel_tol=1e-12)
    np.testing.assert_allclose(tg.std(S, 1, keepdim=True).numpy(), S.std(1, ddof=1, keepdims=True))
    check_grad(lambda t: t.var(0) + t.std(0, correction=2), S)


def test_repeat_tiles_and_repeat_interleave_repeats_elements():
    """Without PyTorch: x.repeat(2, 1) tiles (np.tile); NumPy's repeat is repeat_interleave."""
    x = tg.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(x.repeat(2, 1).numpy(), np.tile(x.numpy(), (2, 1)))
    np.testing.assert_array_equal(x.repeat(1, 2, 1).numpy(), np.tile(x.numpy(), (1, 2, 1)))
    np.testing.assert_array_equal(x.repeat_interleave(2, dim=0).numpy(), np.repeat(x.numpy(), 2, 0))
    np.testing.assert_array_equal(tg.repeat_interleave(x, 2).numpy(), np.repeat(x.numpy(), 2))
    with pytest.raises(tg.ShapeError, match="repeat_interleave"):
        x.repeat(2)
    check_grad(lambda t: t.repeat(2, 3) * 1.5 + t.repeat_interleave(3, 1).repeat(2, 1), S)


def test_tracegrad_trace_is_only_the_compiler():
    """Given an array, tracegrad.trace says where the diagonal sum is; x.trace() is it."""
    for a in (np.eye(3), tg.tensor(np.eye(3))):
        with pytest.raises(TypeError, match=r"x.trace\(\).*tracegrad.numpy.trace\(a\)"):
            tg.trace(a)
    assert tg.tensor(S).trace().item() == 3.0 + 9.0 + 8.0
    assert tg.trace(lambda x: x * 2)(tg.ones(2)).tolist() == [2.0, 2.0]
    assert callable(tg.trace(backend="numpy"))


def test_more_pytorch_meanings_without_pytorch():
    """cumsum needs its dim, flip its dims; where(cond) is nonzero's tuple; squeeze leaves a
    dim that is not 1; dot and outer take vectors; equal is one bool."""
    x = tg.tensor(S)
    with pytest.raises(TypeError):
        tg.cumsum(x)
    with pytest.raises(TypeError):
        tg.flip(x)
    assert [i.tolist() for i in tg.where(x > 8.5)] == [[1, 2], [1, 3]]
    assert tg.nonzero(x > 8.5).tolist() == [[1, 1], [2, 3]]
    assert tg.squeeze(x, 0).shape == (3, 4) and x[:1].squeeze(0).shape == (4,)
    with pytest.raises(tg.ShapeError, match="1-D"):
        tg.dot(x, x.T)
    with pytest.raises(tg.ShapeError, match="1-D"):
        tg.outer(x, x)
    assert tg.equal(x, x * 1.0) is True and tg.equal(x, x[:2]) is False
    assert tg.argsort(x, 1, descending=True)[0].tolist() == [2, 0, 3, 1]
    assert tg.select(x, 1, 0).tolist() == S[:, 0].tolist()
    assert [g.shape for g in tg.gradient(x)] == [(3, 4), (3, 4)]
    upper = tg.linalg.eigh(S[:, :3], "U").eigenvalues.numpy()  # reads the upper triangle
    np.testing.assert_allclose(upper, np.linalg.eigh(S[:, :3], "U")[0], rtol=1e-12)


UNTRACEABLE = {"where one argument", "nonzero", "equal"}  # data-dependent shapes, a bool


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_pytorch_meanings_traced_match_eager(backend, monkeypatch):
    """One traced step computes every case (values, indices and the gradient of their sum of
    squares); it matches the eager step. Data-dependent shapes refuse with a clear error."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    names = [n for n in MEANINGS if n not in UNTRACEABLE]
    x = tg.tensor(S, requires_grad=True)
    gm = tg.GradManager().attach([x])

    def step():
        with gm:
            outs = [v for n in names for _, v in _leaves(MEANINGS[n](tg, x))]
            floats = [(o * o).sum() for o in outs if o.dtype == np.float64]
            gm.backward(tg.stack(floats).sum())
        return outs

    eager = [o.numpy().copy() for o in step()]
    eager_grad, x.grad = x.grad.numpy().copy(), None
    traced = tg.trace(step, backend=backend)
    for _ in range(2):  # the second call runs the compiled plan
        x.grad = None
        got = traced()
    assert len(got) == len(eager)
    for i, (a, b) in enumerate(zip(got, eager, strict=True)):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-12, atol=1e-12, err_msg=f"result {i}")
    np.testing.assert_allclose(x.grad.numpy(), eager_grad, rtol=1e-12, atol=1e-12)
    with pytest.raises(tg.TraceError, match="data-dependent"):
        tg.trace(lambda t: tg.where(t > 4.0), backend=backend)(S)


def test_augmented_assignments_write_the_tensor_in_place():
    """`x //= 2`, `x &= m`, `x <<= 1`: in place, as PyTorch's (Python rebound the name to a new
    tensor, or raised for `<<=`), so another reference sees the change."""
    x = tg.tensor(np.array([5, 6, 7]))
    alias = x
    x //= 2
    x %= 3
    x &= 1
    x |= 2
    x ^= 1
    x <<= 2
    x >>= 1
    assert x is alias and x.numpy().tolist() == [6, 6, 6]
    mask = tg.tensor(np.array([True, True, False]))
    same = mask
    mask &= tg.tensor(np.array([True, False, True]))
    assert mask is same and mask.numpy().tolist() == [True, False, False]


def test_a_numpy_scalar_on_either_side_is_a_python_number():
    """`np.float64(2) * x` (NumPy's operator, then the tensor's `__array_ufunc__`) keeps a
    float32 tensor float32, as `x * np.float64(2)` and PyTorch do; it made float64 (DiT's
    diffusion loss, `np.sqrt(2.0 / np.pi) * (...)`)."""
    x = tg.ones(3)
    for y in (np.float64(2) * x, x * np.float64(2), np.int64(2) * x, np.float64(2) - x,
              np.float64(2) / x, np.float32(2) + x):  # fmt: skip
        assert y.dtype == np.float32, y.dtype
    np.testing.assert_array_equal((np.float64(2) - x).numpy(), [1.0, 1.0, 1.0])


class _Pair(tuple):
    """A tuple of tensors with arithmetic of its own, as zuko's `NestedTensor`."""

    def __rmul__(self, k):
        return _Pair(k * x for x in self)

    def __radd__(self, k):
        return _Pair(k + x for x in self)


def test_operators_step_aside_for_an_operand_they_cannot_take():
    """PyTorch's operators answer NotImplemented for such an operand: Python then asks its
    type, or raises its own "unsupported operand" error."""
    k, pair = tg.tensor(2.0), _Pair((tg.ones(2), tg.zeros(3)))
    doubled = k * pair
    assert type(doubled) is _Pair and [d.tolist() for d in doubled] == [[2.0, 2.0], [0.0] * 3]
    assert type(k + pair) is _Pair
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \*: 'Tensor' and 'obj"):
        tg.ones(2) * object()
    with pytest.raises(
        TypeError, match=r"unsupported operand type\(s\) for @: 'NoneType' and 'Ten"
    ):
        None @ tg.ones(2)
    with pytest.raises(tg.ShapeError):  # an operand it takes: its own error, as before
        tg.ones(2) * tg.ones(3)

"""The optimizers and options PyTorch code uses (Adadelta, Adamax, NAdam, RAdam, Adafactor;
amsgrad, maximize, dampening; foreach/fused accepted), each against PyTorch in float64 over
several steps of a step written the PyTorch way (zero_grad, loss.backward(), step), eagerly and
traced on both backends; and against NumPy references where PyTorch is absent."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import optim
from tracegrad.compiler import lowering

STEPS = 8  # RAdam rectifies from step 6 on (betas 0.9, 0.99): both of its regimes are run

CASES = {
    "adadelta": ("Adadelta", dict(lr=0.5)),
    "adadelta decay": ("Adadelta", dict(lr=1.0, rho=0.8, eps=1e-5, weight_decay=0.1)),
    "adamax": ("Adamax", dict(lr=0.02)),
    "adamax decay": ("Adamax", dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)),
    "nadam": ("NAdam", dict(lr=0.02)),
    "nadam decoupled": ("NAdam", dict(lr=0.02, weight_decay=0.1, decoupled_weight_decay=True,
                                      momentum_decay=0.01)),
    "radam": ("RAdam", dict(lr=0.02, betas=(0.9, 0.99))),
    "radam decoupled": ("RAdam", dict(lr=0.02, betas=(0.9, 0.99), weight_decay=0.1,
                                      decoupled_weight_decay=True)),
    "adam amsgrad": ("Adam", dict(lr=0.05, amsgrad=True, weight_decay=0.1)),
    "adamw amsgrad maximize": ("AdamW", dict(lr=0.05, amsgrad=True, maximize=True)),
    "sgd dampening": ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3)),
    "sgd maximize": ("SGD", dict(lr=0.1, momentum=0.5, nesterov=True, maximize=True)),
    "rmsprop maximize": ("RMSprop", dict(lr=0.01, maximize=True, foreach=False)),
    "adagrad maximize": ("Adagrad", dict(lr=0.1, maximize=True, fused=None)),
    "adafactor": ("Adafactor", dict()),
    "adafactor options": ("Adafactor", dict(lr=0.2, beta2_decay=-0.5, eps=(1e-20, 1e-2), d=1.5,
                                            weight_decay=0.1, maximize=True)),
}  # fmt: skip

R = np.random.default_rng(3)
START = [R.standard_normal((3, 4)), R.standard_normal(4), R.standard_normal((4, 2))]
X, Y = R.standard_normal((5, 3)), R.standard_normal((5, 2))


def train(lib, name, kwargs, backend=None, state_keys=()):
    """STEPS steps of a small tanh network, the PyTorch way; the parameters after each, and the
    optimizer's state tensors named in `state_keys` (ASGD's average "ax")."""
    if lib == "torch":
        import torch
    else:
        torch = tg
    ps = [torch.tensor(a, requires_grad=True) for a in START]
    opt = getattr(torch.optim, name)(ps, **kwargs)
    x, y = torch.tensor(X), torch.tensor(Y)

    def step(x, y):
        opt.zero_grad()
        loss = ((torch.tanh(x @ ps[0] + ps[1]) @ ps[2] - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = tg.trace(step, backend=backend) if backend else step
    history = []
    for _ in range(STEPS):
        run(x, y)
        states = [opt.state[p] if lib == "torch" else opt.state[i] for i, p in enumerate(ps)]
        extra = [np.asarray(s[k].detach().numpy()).copy() for s in states for k in sorted(s)
                 if k in state_keys]  # fmt: skip
        history.append([p.detach().numpy().copy() for p in ps] + extra)
    if backend:  # once with .grad None, once with it set (zero_grad comes first)
        assert sum(len(plans) for plans in run.plans.values()) <= 2
    return history


@pytest.mark.parametrize("case", CASES)
def test_optimizers_match_pytorch_in_float64(case):
    pytest.importorskip("torch")
    name, kwargs = CASES[case]
    got, want = train("tg", name, kwargs), train("torch", name, kwargs)
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        for p, q in zip(a, b, strict=True):
            np.testing.assert_allclose(p, q, rtol=1e-11, atol=1e-13, err_msg=f"step {step}")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", CASES)
def test_a_traced_step_matches_the_eager_one(case, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)  # kernels even for these small arrays
    name, kwargs = CASES[case]
    got, want = train("tg", name, kwargs, backend), train("tg", name, kwargs)
    for a, b in zip(got, want, strict=True):
        for p, q in zip(a, b, strict=True):
            np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-14)


# --- NumPy references: the update rules as PyTorch's documentation writes them ----------------


def np_adadelta(p, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
    v, u = np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = g + weight_decay * p
        v = rho * v + (1 - rho) * g * g
        delta = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta
        p = p - lr * delta
    return p


def np_adamax(p, grads, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    (b1, b2), m, u = betas, np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g) + eps)
        p = p - lr / (1 - b1**t) * m / u
    return p


def np_nadam(p, grads, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, momentum_decay=4e-3):
    (b1, b2), m, v, product = betas, np.zeros_like(p), np.zeros_like(p), 1.0
    for t, g in enumerate(grads, 1):
        mu = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
        product *= mu
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = np.sqrt(v / (1 - b2**t)) + eps
        p = p - lr * (1 - mu) / (1 - product) * g / denom
        p = p - lr * mu_next / (1 - product * mu_next) * m / denom
    return p


def np_radam(p, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    (b1, b2), m, v = betas, np.zeros_like(p), np.zeros_like(p)
    rho_inf = 2 / (1 - b2) - 1
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        rho_t = rho_inf - 2 * t * b2**t / (1 - b2**t)
        if rho_t > 5:
            rect = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                           / ((rho_inf - 4) * (rho_inf - 2) * rho_t))  # fmt: skip
            p = p - lr * m_hat * rect * np.sqrt(1 - b2**t) / (np.sqrt(v) + eps)
        else:
            p = p - lr * m_hat
    return p


def np_adafactor(p, grads, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
                 weight_decay=0.0):  # fmt: skip
    """A vector's Adafactor (its second moment unfactored), as PyTorch documents it."""
    eps1 = np.finfo(p.dtype).eps if eps[0] is None else eps[0]
    v, rms = np.zeros_like(p), lambda a: np.sqrt(np.mean(a * a))
    for t, g in enumerate(grads, 1):
        alpha = max(eps[1], rms(p)) * min(lr, t**-0.5)
        p = p * (1 - lr * weight_decay)
        v = v + (g * g - v) * t**beta2_decay
        u = g / np.sqrt(np.maximum(v, eps1 * eps1))
        p = p - alpha / max(1.0, rms(u) / d) * u
    return p


REFERENCES = {
    "Adadelta": (np_adadelta, dict(lr=0.5, rho=0.8, weight_decay=0.1)),
    "Adamax": (np_adamax, dict(lr=0.02, betas=(0.8, 0.9), weight_decay=0.1)),
    "NAdam": (np_nadam, dict(lr=0.02, momentum_decay=0.01)),
    "RAdam": (np_radam, dict(lr=0.02, betas=(0.9, 0.99))),
    "Adafactor": (np_adafactor, dict(lr=0.05, beta2_decay=-0.6, d=1.2, weight_decay=0.1)),
}


@pytest.fixture
def float64_default():
    tg.set_default_dtype(np.float64)
    yield
    tg.set_default_dtype(np.float32)


@pytest.mark.parametrize("name", REFERENCES)
def test_new_optimizers_match_their_definitions(name, float64_default):
    """With the default dtype float64, NAdam's momentum product is float64 too (else it is
    float32, as PyTorch's, and the reference's float64 product differs by 1e-10)."""
    reference, kwargs = REFERENCES[name]
    start = np.linspace(-1.0, 1.0, 6)
    grads = [np.cos(3 * k + start) for k in range(STEPS)]
    p = tg.tensor(start.copy(), requires_grad=True)
    opt = getattr(optim, name)([p], **kwargs)
    for g in grads:
        p.grad = tg.tensor(g)
        opt.step()
    np.testing.assert_allclose(p.numpy(), reference(start, grads, **kwargs), rtol=1e-12)


def test_maximize_ascends_and_pytorch_options_are_accepted():
    p = tg.tensor(np.zeros(2), requires_grad=True)
    opt = optim.SGD([p], lr=0.5, maximize=True, foreach=True, fused=False)
    p.grad = tg.tensor(np.array([1.0, -2.0]))
    opt.step()
    assert p.numpy().tolist() == [0.5, -1.0]
    for cls in (optim.SGD, optim.Adam, optim.AdamW, optim.RMSprop, optim.Adagrad,
                optim.Adadelta, optim.Adamax, optim.NAdam, optim.RAdam):  # fmt: skip
        assert {"maximize", "foreach"} <= set(inspect.signature(cls).parameters), cls
    assert "fused" in inspect.signature(optim.AdamW).parameters  # nanoGPT looks for it
    with pytest.raises(ValueError, match=r"Adam\(differentiable=True\) is not provided"):
        optim.Adam([p], differentiable=True)
    with pytest.raises(ValueError, match="zero dampening"):
        optim.SGD([p], momentum=0.9, dampening=0.1, nesterov=True)


def test_amsgrad_state_and_state_dict():
    p = tg.tensor(np.ones(3), requires_grad=True)
    opt = optim.Adam([p], amsgrad=True)
    assert set(opt.state[0]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    for g in (np.array([3.0, 1.0, 2.0]), np.array([0.1, 0.1, 0.1])):
        p.grad = tg.tensor(g)
        opt.step()
    v_max = opt.state[0]["max_exp_avg_sq"].numpy()
    assert np.all(v_max >= opt.state[0]["exp_avg_sq"].numpy()) and v_max[0] > v_max[1]
    again = optim.Adam([tg.tensor(np.ones(3), requires_grad=True)], amsgrad=True)
    again.load_state_dict(opt.state_dict())
    np.testing.assert_array_equal(again.state[0]["max_exp_avg_sq"].numpy(), v_max)


def test_scalar_state_follows_the_default_dtype(float64_default):
    """PyTorch keeps step counts and NAdam's momentum product in float64 when the default
    dtype is float64 (float32 otherwise): the product's rounding shows in float64 training."""
    p = tg.tensor(np.ones(2), requires_grad=True)
    assert optim.NAdam([p]).state[0]["mu_product"].dtype == np.float64
    tg.set_default_dtype(np.float32)
    assert optim.NAdam([p]).state[0]["mu_product"].dtype == np.float32


def _hook_log(lib):
    """What PyTorch's optimizer hooks see, in order: step pre/post hooks (the global ones
    first), state-dict hooks that add and drop a key, a subclass's step calling super()."""
    import importlib

    log = []
    p = lib.nn.Parameter(lib.ones(2))
    p.grad = lib.ones(2)
    opt = lib.optim.SGD([p], lr=0.1)
    first = opt.register_step_pre_hook(lambda o, a, k: log.append(("pre", len(a), a[0] is o)))
    opt.register_step_post_hook(lambda o, a, k: log.append(("post",)))
    optimizer = importlib.import_module(lib.__name__ + ".optim.optimizer")
    every = optimizer.register_optimizer_step_pre_hook(lambda o, a, k: log.append(("every",)))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    opt.register_load_state_dict_pre_hook(lambda o, sd: {k: v for k, v in sd.items()
                                                         if k != "extra"})  # fmt: skip
    opt.register_load_state_dict_post_hook(lambda o: log.append(("loaded",)))
    opt.step()
    first.remove()
    opt.step()
    every.remove()
    opt.step()
    saved = opt.state_dict()
    opt.load_state_dict(saved)

    class Sub(lib.optim.SGD):
        def step(self, closure=None):
            log.append(("sub",))
            return super().step(closure)

    sub = Sub([p], lr=0.1)
    sub.register_step_post_hook(lambda o, a, k: log.append(("sub post",)))
    sub.step()
    return log, sorted(saved), p.detach().numpy().tolist()


def test_optimizer_hooks_run_as_pytorchs():
    torch = pytest.importorskip("torch")
    import tracegrad.torch as tt

    ours = _hook_log(tt)
    assert ours == _hook_log(torch)
    assert ours[0][:3] == [("every",), ("pre", 1, True), ("post",)]
    assert ours[1] == ["extra", "param_groups", "state"]


def test_optimizer_hooks_by_their_log():
    import tracegrad.torch as tt

    log, keys, _ = _hook_log(tt)
    assert log == [("every",), ("pre", 1, True), ("post",), ("every",), ("post",), ("post",),
                   ("loaded",), ("sub",), ("sub post",), ("sub post",)]  # fmt: skip
    assert keys == ["extra", "param_groups", "state"]

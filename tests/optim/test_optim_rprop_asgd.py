"""Rprop and ASGD against PyTorch in float64 over several steps of a step written the PyTorch
way, eagerly and traced on both backends, and against NumPy references of their update rules
where PyTorch is absent; SparseAdam refuses (tracegrad has no sparse gradients)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.optim.test_optim_pytorch import train
from tracegrad import optim
from tracegrad.compiler import lowering

STEPS = 8

CASES = {
    "rprop": ("Rprop", dict(lr=0.01)),
    "rprop narrow": ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.08))),
    "rprop maximize": ("Rprop", dict(lr=0.02, maximize=True, foreach=False)),
    "asgd": ("ASGD", dict(lr=0.05)),
    "asgd averaging": ("ASGD", dict(lr=0.1, lambd=0.01, alpha=0.5, t0=3, weight_decay=0.1)),
    "asgd maximize": ("ASGD", dict(lr=0.05, t0=2, maximize=True, foreach=False)),
}

STATE = ("ax", "step_size", "eta", "mu")  # compared with the parameters after each step


@pytest.mark.parametrize("case", CASES)
def test_rprop_and_asgd_match_pytorch_in_float64(case):
    pytest.importorskip("torch")
    name, kwargs = CASES[case]
    got, want = (
        train("tg", name, kwargs, state_keys=STATE),
        train("torch", name, kwargs, state_keys=STATE),
    )
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert len(a) == len(b)
        for p, q in zip(a, b, strict=True):
            np.testing.assert_allclose(p, q, rtol=1e-11, atol=1e-13, err_msg=f"step {step}")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", CASES)
def test_a_traced_step_matches_the_eager_one(case, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    name, kwargs = CASES[case]
    got, want = (
        train("tg", name, kwargs, backend, STATE),
        train("tg", name, kwargs, state_keys=STATE),
    )
    for a, b in zip(got, want, strict=True):
        for p, q in zip(a, b, strict=True):
            np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-14)


# --- NumPy references: the update rules as PyTorch's documentation writes them ----------------


def np_rprop(p, grads, lr=0.01, etas=(0.5, 1.2), step_sizes=(1e-6, 50)):
    prev, size = np.zeros_like(p), np.full_like(p, lr)
    for g in grads:
        g = g.copy()
        for i in range(p.size):
            if g[i] * prev[i] > 0:
                size[i] = min(size[i] * etas[1], step_sizes[1])
            elif g[i] * prev[i] < 0:
                size[i] = max(size[i] * etas[0], step_sizes[0])
                g[i] = 0.0  # the sign flipped: skip this element this time
        p = p - np.sign(g) * size
        prev = g
    return p


def np_asgd(p, grads, lr=0.01, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0):
    eta, mu, ax = lr, 1.0, np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * p
        p = p * (1 - lambd * eta) - eta * g
        ax = p.copy() if mu == 1 else ax + mu * (p - ax)
        eta = lr / (1 + lambd * lr * t) ** alpha
        mu = 1 / max(1, t - t0)
    return p, ax


@pytest.fixture
def float64_default():
    tg.set_default_dtype(np.float64)
    yield
    tg.set_default_dtype(np.float32)


def _grads():
    start = np.linspace(-1.0, 1.0, 6)
    # signs that flip for some elements and hold for others
    return start, [np.cos(1.7 * k + 3 * start) + 0.3 for k in range(STEPS)]


def _run(name, kwargs, start, grads):
    p = tg.tensor(start.copy(), requires_grad=True)
    opt = getattr(optim, name)([p], **kwargs)
    for g in grads:
        p.grad = tg.tensor(g)
        opt.step()
    return p, opt


@pytest.mark.parametrize("kwargs", [{}, dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.08))])
def test_rprop_matches_its_definition(kwargs):
    start, grads = _grads()
    p, opt = _run("Rprop", kwargs, start, grads)
    want = np_rprop(start, grads, **kwargs)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-13)
    assert not np.allclose(want, start - np.sign(grads[-1]) * 0.01)  # the sizes did change
    assert opt.state[0]["step"].item() == STEPS


@pytest.mark.parametrize("kwargs", [{}, dict(lr=0.1, lambd=0.01, alpha=0.5, t0=3,
                                             weight_decay=0.1)])  # fmt: skip
def test_asgd_matches_its_definition(kwargs, float64_default):
    start, grads = _grads()
    p, opt = _run("ASGD", kwargs, start, grads)
    want_p, want_ax = np_asgd(start, grads, **kwargs)
    np.testing.assert_allclose(p.numpy(), want_p, rtol=1e-13)
    np.testing.assert_allclose(opt.state[0]["ax"].numpy(), want_ax, rtol=1e-13)
    if kwargs:  # averaging from step t0 on: ax is not p
        assert not np.allclose(want_ax, want_p)


@pytest.mark.parametrize("name, kwargs", [("Rprop", dict(lr=0.05)), ("ASGD", dict(t0=2))])
def test_state_dict_round_trip_resumes_identically(name, kwargs):
    start, grads = _grads()
    p, opt = _run(name, kwargs, start, grads[:4])
    q = tg.tensor(p.numpy().copy(), requires_grad=True)
    again = getattr(optim, name)([q], **kwargs)
    again.load_state_dict(opt.state_dict())
    for g in grads[4:]:
        for t, o in ((p, opt), (q, again)):
            t.grad = tg.tensor(g)
            o.step()
    np.testing.assert_array_equal(q.numpy(), p.numpy())
    for k, v in opt.state[0].items():
        np.testing.assert_array_equal(again.state[0][k].numpy(), v.numpy())


def test_rprop_rejects_bad_etas_and_sparse_adam_refuses():
    p = tg.tensor(np.ones(2), requires_grad=True)
    with pytest.raises(ValueError, match="Rprop: invalid etas"):
        optim.Rprop([p], etas=(1.2, 0.5))
    with pytest.raises(NotImplementedError, match="SparseAdam.*sparse gradients.*Adam"):
        optim.SparseAdam([p])
    import tracegrad.torch as torch

    assert torch.optim.SparseAdam is optim.SparseAdam  # the name exists, and says why it refuses


def _warmed_up(lib, name, backend=None):
    """A LinearLR warm-up made after the optimizer sets the lr before the first step: PyTorch's
    Rprop and ASGD take their first step sizes (eta) from the lr at that step."""
    torch = pytest.importorskip("torch") if lib == "torch" else tg
    start, grads = _grads()
    p = torch.tensor(start.copy(), requires_grad=True)
    opt = getattr(torch.optim, name)([p], lr=0.1)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=3)

    def step(g):
        p.grad = g
        opt.step()
        sched.step()

    run = tg.trace(step, backend=backend) if backend else step
    seen = []
    for g in grads:
        run(torch.tensor(g))
        seen.append(p.detach().numpy().copy())
    return seen


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
def test_the_first_step_takes_the_lr_a_warm_up_set(name):
    start, grads = _grads()
    got = _warmed_up("tg", name)
    if name == "Rprop":
        first = start - np.sign(grads[0]) * 0.025
    else:  # the decay term with lambd 1e-4, then the step
        first = start * (1 - 1e-4 * 0.025) - 0.025 * grads[0]
    np.testing.assert_allclose(got[0], first, rtol=1e-8)  # eta: the float32 lr, as PyTorch's
    for backend in ("numpy", "numba"):
        np.testing.assert_allclose(_warmed_up("tg", name, backend), got, rtol=1e-12)


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
def test_the_first_step_takes_the_lr_a_warm_up_set_as_pytorch(name):
    pytest.importorskip("torch")
    np.testing.assert_allclose(_warmed_up("tg", name), _warmed_up("torch", name), rtol=1e-11,
                               atol=1e-13)  # fmt: skip

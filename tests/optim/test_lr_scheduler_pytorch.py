"""ConstantLR, PolynomialLR, MultiplicativeLR, CosineAnnealingWarmRestarts, CyclicLR and
ChainedScheduler: the lrs (and cycled momenta) of several steps against PyTorch's, the same
stepped inside a traced step (both backends) as eagerly, and against their definitions without
PyTorch; state_dict round trips; what refuses inside a traced step."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler import lowering

STEPS = 11


def _chain_constant_exponential(torch, opt):
    S = torch.optim.lr_scheduler  # noqa: N806
    return S.ChainedScheduler([S.ConstantLR(opt, factor=0.1, total_iters=2),
                               S.ExponentialLR(opt, gamma=0.9)])  # fmt: skip


def _chain_linear_cosine(torch, opt):
    S = torch.optim.lr_scheduler  # noqa: N806
    return S.ChainedScheduler([S.LinearLR(opt, start_factor=0.5, total_iters=3),
                               S.CosineAnnealingLR(opt, T_max=4, eta_min=0.01),
                               S.PolynomialLR(opt, total_iters=9, power=2.0)])  # fmt: skip


def _chain_step_multiplicative(torch, opt):
    S = torch.optim.lr_scheduler  # noqa: N806
    return S.ChainedScheduler([S.StepLR(opt, step_size=3, gamma=0.5),
                               S.MultiplicativeLR(opt, lambda e: 0.9)])  # fmt: skip


# name: (optimizer, its keywords, the scheduler made from (torch, optimizer))
SCHEDULES = {
    "ConstantLR": ("SGD", {}, lambda t, o: t.optim.lr_scheduler.ConstantLR(o, 0.25, 4)),
    "PolynomialLR": ("SGD", {}, lambda t, o: t.optim.lr_scheduler.PolynomialLR(o, 6, 1.5)),
    "MultiplicativeLR": (
        "SGD", {}, lambda t, o: t.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.8)),
    "WarmRestarts": (
        "SGD", {}, lambda t, o: t.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3, 1, 0.01)),
    "WarmRestarts T_mult": (
        "SGD", {}, lambda t, o: t.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 2, 2)),
    "CyclicLR triangular": ("SGD", {"momentum": 0.9}, lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, 0.01, 0.1, step_size_up=3, step_size_down=2)),
    "CyclicLR triangular2 Adam": ("Adam", {}, lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, 0.01, 0.1, step_size_up=2, mode="triangular2")),
    "CyclicLR exp_range": ("SGD", {}, lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, [0.01], [0.2], step_size_up=2, mode="exp_range", gamma=0.9,
        base_momentum=0.7, max_momentum=0.95)),
    "CyclicLR scale_fn": ("SGD", {"momentum": 0.5}, lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, 0.01, 0.1, step_size_up=2, scale_fn=lambda x: 1 / (1 + 0.3 * x),
        scale_mode="iterations")),
    "CyclicLR no momentum": ("Adagrad", {}, lambda t, o: t.optim.lr_scheduler.CyclicLR(
        o, 0.01, 0.1, step_size_up=2, cycle_momentum=False)),
    "Chained Constant Exponential": ("SGD", {}, _chain_constant_exponential),
    "Chained Linear Cosine Polynomial": ("SGD", {}, _chain_linear_cosine),
    "Chained Step Multiplicative": ("SGD", {}, _chain_step_multiplicative),
}  # fmt: skip


@pytest.fixture(params=["numpy", "numba"])
def backend(request, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    return request.param


def run(lib, name, backend=None, steps=STEPS):
    """`steps` training steps with the scheduler stepped after the optimizer: for each, the
    scheduler's last lr, the group's lr and momentum (or beta1), and the weights."""
    if lib == "torch":
        import torch
    else:
        torch = tg
    opt_name, kwargs, make = SCHEDULES[name]
    w = torch.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    opt = getattr(torch.optim, opt_name)([w], lr=0.1, **kwargs)
    sched = make(torch, opt)

    def step():
        opt.zero_grad()
        ((w - 3.0) ** 2).sum().backward()
        opt.step()
        sched.step()

    f = step if backend is None else tg.trace(step, backend=backend)
    group = opt.param_groups[0]
    seen = [(sched.get_last_lr(), group["lr"], _momentum(group), w.detach().numpy().copy())]
    for _ in range(steps):
        f()
        seen.append((sched.get_last_lr(), group["lr"], _momentum(group),
                     w.detach().numpy().copy()))  # fmt: skip
    if backend is not None:
        assert sum(len(p) for p in f.plans.values()) <= 2  # once per .grad None-ness
    return seen, sched


def _momentum(group):
    return group.get("momentum", group.get("betas", (None,))[0])


def _same(got, want, rtol=1e-12):
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a[0], b[0], rtol=rtol, err_msg=f"last lr, step {k}")
        np.testing.assert_allclose(a[1], b[1], rtol=rtol, err_msg=f"lr, step {k}")
        if b[2] is None:
            assert a[2] is None or a[2] == 0
        else:
            np.testing.assert_allclose(a[2], b[2], rtol=rtol, err_msg=f"momentum, step {k}")
        np.testing.assert_allclose(a[3], b[3], rtol=1e-10, err_msg=f"weights, step {k}")


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedules_match_pytorch(name):
    pytest.importorskip("torch")
    got, _ = run("tg", name)
    want, _ = run("torch", name)
    _same(got, want)
    assert len({round(s[1], 12) for s in want}) > 1  # the schedule moved


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_a_schedule_stepped_inside_a_traced_step_advances_at_every_call(name, backend):
    want, sched = run("tg", name)
    got, traced = run("tg", name, backend)
    _same(got, want)
    assert traced.state_dict().keys() == sched.state_dict().keys()
    assert len({round(s[1], 12) for s in want}) > 1


# --- definitions, without PyTorch --------------------------------------------------------------


def lrs(name, steps=STEPS):
    return [s[1] for s in run("tg", name, steps=steps)[0]]


def test_constant_polynomial_multiplicative_by_their_definitions():
    np.testing.assert_allclose(lrs("ConstantLR"), [0.025] * 4 + [0.1] * 8, rtol=1e-15)
    poly = [0.1 * (1 - min(e, 6) / 6) ** 1.5 for e in range(STEPS + 1)]
    np.testing.assert_allclose(lrs("PolynomialLR"), poly, rtol=1e-14)
    np.testing.assert_allclose(lrs("MultiplicativeLR"), [0.1 * 0.8**e for e in range(12)],
                               rtol=1e-14)  # fmt: skip


def test_warm_restarts_by_their_definition():
    def sgdr(e, t0, t_mult, eta_min):
        t_i = t0
        while e >= t_i:
            e, t_i = e - t_i, t_i * t_mult
        return eta_min + (0.1 - eta_min) * (1 + math.cos(math.pi * e / t_i)) / 2

    np.testing.assert_allclose(lrs("WarmRestarts"), [sgdr(e, 3, 1, 0.01) for e in range(12)],
                               rtol=1e-13)  # fmt: skip
    got = lrs("WarmRestarts T_mult")
    np.testing.assert_allclose(got, [sgdr(e, 2, 2, 0.0) for e in range(12)], rtol=1e-13)
    assert got[0] == got[2] == got[6] == 0.1  # restarts after 2, then 4 steps


def test_cyclic_triangular_by_its_definition():
    seen, _ = run("tg", "CyclicLR triangular")
    up = [0.01 + 0.09 * k / 3 for k in range(3)]
    down = [0.1 - 0.09 * k / 2 for k in range(2)]
    want = (up + down) * 3
    np.testing.assert_allclose([s[1] for s in seen], want[:12], rtol=1e-13)
    # momentum the other way: 0.9 at the lr's bottom, 0.8 at its top
    np.testing.assert_allclose([s[2] for s in seen], [0.9 - (lr - 0.01) / 0.09 * 0.1
                                                      for lr in want[:12]], rtol=1e-12)  # fmt: skip


def test_cyclic_modes_scale_the_amplitude():
    tri2 = lrs("CyclicLR triangular2 Adam", steps=12)
    assert max(tri2[:4]) == pytest.approx(0.1) and max(tri2[4:8]) == pytest.approx(0.055)
    exp = lrs("CyclicLR exp_range")
    np.testing.assert_allclose(exp[2], 0.01 + 0.19 * 0.9**2, rtol=1e-13)
    np.testing.assert_allclose(exp[6], 0.01 + 0.19 * 0.9**6, rtol=1e-13)


def test_chained_schedules_multiply():
    const_exp = lrs("Chained Constant Exponential")
    np.testing.assert_allclose(
        const_exp, [0.1 * 0.9**e * (0.1 if e < 2 else 1.0) for e in range(12)], rtol=1e-13
    )
    step_mult = lrs("Chained Step Multiplicative")
    np.testing.assert_allclose(step_mult, [0.1 * 0.5 ** (e // 3) * 0.9**e for e in range(12)],
                               rtol=1e-13)  # fmt: skip


# --- fractional epochs, state, refusals --------------------------------------------------------


def _warm_restarts(lib, t0=3, t_mult=2):
    torch = pytest.importorskip("torch") if lib == "torch" else tg
    w = torch.tensor(np.ones(2), requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    return torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, t0, t_mult, 0.001), opt


EPOCHS = [0.25, 0.5, 2.75, 3.0, 3.5, 8.9, 9.0, 9.2, 21.0, 1.0, 30.5]


def test_warm_restarts_take_fractional_epochs_as_pytorch():
    pytest.importorskip("torch")
    ours, theirs = _warm_restarts("tg")[0], _warm_restarts("torch")[0]
    for epoch in EPOCHS:
        ours.step(epoch)
        theirs.step(epoch)
        np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-13)
        assert (ours.T_cur, ours.T_i, ours.last_epoch) == pytest.approx(
            (theirs.T_cur, theirs.T_i, theirs.last_epoch), rel=1e-13
        )
        ours.step()  # and one step on from there
        theirs.step()
        np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-13)


def test_warm_restarts_at_fractional_epochs_by_their_definition():
    sched, opt = _warm_restarts("tg")
    for epoch, t_cur, t_i in [(2.5, 2.5, 3), (3.5, 0.5, 6), (10.0, 1.0, 12), (1.0, 1.0, 3)]:
        sched.step(epoch)
        assert (sched.T_cur, sched.T_i) == (pytest.approx(t_cur), t_i)
        want = 0.001 + (0.1 - 0.001) * (1 + math.cos(math.pi * t_cur / t_i)) / 2
        assert opt.param_groups[0]["lr"] == pytest.approx(want, rel=1e-13)
        assert sched.last_epoch == math.floor(epoch)


@pytest.mark.parametrize("name", ["WarmRestarts T_mult", "CyclicLR triangular",
                                  "Chained Constant Exponential"])  # fmt: skip
def test_state_dict_round_trip_resumes_the_schedule(name):
    seen, sched = run("tg", name, steps=5)
    saved = sched.state_dict()
    tail = run("tg", name, steps=9)[0][6:]
    fresh_w = tg.tensor(np.array(seen[-1][3]), requires_grad=True)
    opt_name, kwargs, make = SCHEDULES[name]
    opt = getattr(tg.optim, opt_name)([fresh_w], lr=0.1, **kwargs)
    again = make(tg, opt)
    again.load_state_dict(saved)
    for group in opt.param_groups:
        group["lr"] = seen[-1][1]
    got = []
    for _ in range(4):
        again.step()
        got.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(got, [s[1] for s in tail], rtol=1e-12)


def test_warm_restarts_refuse_an_epoch_inside_a_traced_step():
    sched, opt = _warm_restarts("tg")

    @tg.trace(backend="numpy")
    def step(epoch):
        sched.step(epoch)

    with pytest.raises(tg.TraceError, match=r"CosineAnnealingWarmRestarts.step\(epoch\).*Python "
                       "number.*outside the traced step"):  # fmt: skip
        step(1.5)


def test_chained_scheduler_rejects_plateau_and_other_optimizers():
    S = tg.optim.lr_scheduler  # noqa: N806
    w = tg.tensor(np.ones(2), requires_grad=True)
    a, b = tg.optim.SGD([w], lr=0.1), tg.optim.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        S.ChainedScheduler([S.ExponentialLR(a, 0.9), S.ReduceLROnPlateau(a)])
    with pytest.raises(ValueError, match="same optimizer"):
        S.ChainedScheduler([S.ExponentialLR(a, 0.9), S.ExponentialLR(b, 0.9)])


def test_torch_namespace_has_the_schedulers_and_says_what_it_lacks():
    import tracegrad.torch as torch

    S = torch.optim.lr_scheduler  # noqa: N806
    for name in ("ConstantLR", "PolynomialLR", "MultiplicativeLR", "CyclicLR",
                 "CosineAnnealingWarmRestarts", "ChainedScheduler"):  # fmt: skip
        assert getattr(S, name) is getattr(tg.optim.lr_scheduler, name)
    with pytest.raises(AttributeError, match="lr_scheduler.NoSuchLR is not provided"):
        S.NoSuchLR  # noqa: B018


def test_a_cyclic_scale_fn_that_needs_a_python_number_refuses_inside_a_traced_step():
    w = tg.tensor(np.ones(2), requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.1, momentum=0.9)
    sched = tg.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=2,
                                           scale_fn=lambda x: min(1.0, 2.0 / x))  # fmt: skip

    @tg.trace(backend="numpy")
    def step():
        sched.step()

    with pytest.raises(tg.TraceError, match="CyclicLR.step.*Python number.*outside the traced"):
        step()


def _warmup(lib):
    """A scheduler written as custom PyTorch code writes one: a subclass with get_lr()."""

    class Warmup(lib.optim.lr_scheduler._LRScheduler):
        def __init__(self, optimizer, warmup, last_epoch=-1):
            self.warmup = warmup
            super().__init__(optimizer, last_epoch)

        def get_lr(self):
            scale = min(1.0, (self.last_epoch + 1) / self.warmup)
            return [base * scale for base in self.base_lrs]

    return Warmup


def _warmup_lrs(lib):
    params = [lib.nn.Parameter(lib.ones(2))]
    opt = lib.optim.SGD(params, lr=0.3)
    sched = _warmup(lib)(opt, warmup=4)
    lrs = []
    for _ in range(6):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


def test_a_subclass_with_its_own_get_lr_schedules_as_written():
    import tracegrad.torch as torch

    want = [0.3 * min(1.0, (e + 1) / 4) for e in range(1, 7)]
    np.testing.assert_allclose(_warmup_lrs(torch), want)
    if importlib.util.find_spec("torch") is not None:
        import torch as real

        np.testing.assert_allclose(_warmup_lrs(torch), _warmup_lrs(real))
    params = [torch.nn.Parameter(torch.ones(2))]
    opt = torch.optim.SGD(params, lr=0.3)
    sched = _warmup(torch)(opt, warmup=4)

    def step():
        opt.zero_grad()
        (params[0] ** 2).sum().backward()
        opt.step()
        sched.step()

    with pytest.raises(tg.TraceError, match="Warmup.step.*get_lr"):
        torch.compile(step, fullgraph=True)()
    with pytest.warns(UserWarning, match=r"runs eagerly.*Warmup.step.*get_lr"):
        torch.compile(step)()  # PyTorch breaks the graph there: the step runs as written
    np.testing.assert_allclose(sched.get_last_lr(), [want[0]])
    np.testing.assert_allclose(params[0].detach().numpy(), [1 - 2 * 0.3 * 0.25] * 2)

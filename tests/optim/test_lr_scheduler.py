"""Schedulers stepped inside a traced step advance at every call, as eagerly; the ones that
cannot be computed per call refuse."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import optim
from tracegrad.compiler import lowering
from tracegrad.optim import lr_scheduler as S

SCHEDULES = {
    "StepLR": (optim.SGD, lambda o: S.StepLR(o, step_size=2, gamma=0.5)),
    "MultiStepLR": (optim.SGD, lambda o: S.MultiStepLR(o, milestones=[2, 4], gamma=0.3)),
    "ExponentialLR": (optim.SGD, lambda o: S.ExponentialLR(o, gamma=0.8)),
    "CosineAnnealingLR": (optim.SGD, lambda o: S.CosineAnnealingLR(o, T_max=4, eta_min=0.01)),
    "LinearLR": (optim.SGD, lambda o: S.LinearLR(o, start_factor=0.25, total_iters=3)),
    "LambdaLR": (optim.SGD, lambda o: S.LambdaLR(o, lambda e: 0.9**e + e // 3)),
    "OneCycleLR SGD": (optim.SGD, lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=8)),
    "OneCycleLR Adam": (
        optim.Adam,
        lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=8, three_phase=True),
    ),  # fmt: skip
}


@pytest.fixture(params=["numpy", "numba"])
def backend(request, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    return request.param


def _run(name: str, backend: str | None, steps: int = 7):
    opt_cls, make = SCHEDULES[name]
    w = tg.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    kwargs = {"momentum": 0.9} if opt_cls is optim.SGD else {}
    opt = opt_cls([w], lr=0.1, **kwargs)
    sched = make(opt)

    def step():
        opt.zero_grad()
        ((w - 3.0) ** 2).sum().backward()
        opt.step()
        sched.step()

    f = step if backend is None else tg.trace(step, backend=backend)
    seen = []
    for _ in range(steps):
        f()
        group = opt.param_groups[0]
        seen.append((sched.last_epoch, sched.get_last_lr(), group["lr"],
                     group.get("momentum", group.get("betas")), w.numpy().copy()))  # fmt: skip
    return seen, sched, f


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_a_scheduler_stepped_inside_a_traced_step_advances_at_every_call(backend, name):
    want, sched, _ = _run(name, None)
    got, traced_sched, f = _run(name, backend)
    for (e0, l0, g0, m0, w0), (e1, l1, g1, m1, w1) in zip(want, got, strict=True):
        assert e1 == e0
        np.testing.assert_allclose(l1, l0, rtol=1e-12)
        np.testing.assert_allclose(g1, g0, rtol=1e-12)
        np.testing.assert_allclose(m1, m0, rtol=1e-12)
        np.testing.assert_allclose(w1, w0, rtol=1e-9)
    assert len({w[1][0] for w in want}) > 2  # the schedule moved
    assert sum(len(p) for p in f.plans.values()) <= 2  # once per .grad None-ness, not per lr
    assert traced_sched.state_dict()["last_epoch"] == sched.state_dict()["last_epoch"]


def test_a_lambda_that_needs_a_python_number_refuses_inside_a_traced_step():
    w = tg.tensor(np.ones(2), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    sched = S.LambdaLR(opt, lambda e: min(1.0, (e + 1) / 4))

    @tg.trace(backend="numpy")
    def step():
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        sched.step()

    with pytest.raises(tg.TraceError, match="LambdaLR.*lr_lambda.*outside the traced step"):
        step()
    assert sched.last_epoch == 0 and opt.param_groups[0]["lr"] == 0.1 * 0.25


@pytest.mark.parametrize("kind", ["SequentialLR", "ReduceLROnPlateau"])
def test_schedulers_that_cannot_advance_per_call_refuse_inside_a_traced_step(kind):
    w = tg.tensor(np.ones(2), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    if kind == "SequentialLR":
        parts = [S.LinearLR(opt, total_iters=2), S.ExponentialLR(opt, gamma=0.9)]
        sched = S.SequentialLR(opt, parts, milestones=[2])
    else:
        sched = S.ReduceLROnPlateau(opt)

    @tg.trace(backend="numpy")
    def step():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        opt.step()
        sched.step(loss) if kind == "ReduceLROnPlateau" else sched.step()

    with pytest.raises(tg.TraceError, match=f"{kind}.step.*outside the traced step"):
        step()


def test_one_cycle_stepped_past_its_end_inside_a_traced_step_raises_and_changes_nothing():
    w = tg.tensor(np.ones(2), requires_grad=True)
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=0.5, total_steps=3)

    @tg.trace(backend="numpy")
    def step():
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        sched.step()

    for _ in range(3):
        step()
    before = (w.numpy().copy(), sched.last_epoch, opt.param_groups[0]["lr"])
    with pytest.raises(ValueError, match="OneCycleLR: the step count"):
        step()
    np.testing.assert_array_equal(w.numpy(), before[0])
    assert (sched.last_epoch, opt.param_groups[0]["lr"]) == before[1:]

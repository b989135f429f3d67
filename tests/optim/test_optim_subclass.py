"""Optimizers written against PyTorch's API (lion-pytorch, torch-optimizer, SAM): a subclass
with its own `step` over `self.param_groups`, its state made at the first step in
`self.state[p]`, Python numbers in it. Each is checked against a NumPy reference eagerly, and a
traced step against the eager one: the plan must not keep the first step's state-making branch
or its step count."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import optim

STEPS = 4
R = np.random.default_rng(7)
START, X, Y = R.standard_normal((3, 2)), R.standard_normal((5, 3)), R.standard_normal((5, 2))


class BiasCorrectedMomentum(optim.Optimizer):
    """An average of the gradients, bias-corrected by a Python step count."""

    def __init__(self, params, lr=0.1, beta=0.9):
        super().__init__(params, dict(lr=lr, beta=beta))

    @tg.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["avg"] = tg.zeros_like(p)
                state["step"] += 1
                avg, beta = state["avg"], group["beta"]
                avg.mul_(beta).add_(p.grad, alpha=1 - beta)
                p.add_(avg, alpha=-group["lr"] / (1 - beta ** state["step"]))


class HeavyBall(optim.Optimizer):
    """Momentum; its state is one tensor."""

    def __init__(self, params, lr=0.1, beta=0.9):
        super().__init__(params, dict(lr=lr, beta=beta))

    @tg.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in filter(lambda p: p.grad is not None, group["params"]):
                state = self.state[p]
                if "avg" not in state:
                    state["avg"] = tg.zeros_like(p)
                state["avg"].mul_(group["beta"]).add_(p.grad)
                p.add_(state["avg"], alpha=-group["lr"])


def np_reference(kind, lr=0.1, beta=0.9, steps=STEPS):
    w, avg = START.copy(), np.zeros_like(START)
    for t in range(1, steps + 1):
        g = 2 * X.T @ (X @ w - Y) / Y.size
        if kind is BiasCorrectedMomentum:
            avg = beta * avg + (1 - beta) * g
            w = w - lr / (1 - beta**t) * avg
        else:
            avg = beta * avg + g
            w = w - lr * avg
    return w


def run(kind, traced, steps=STEPS):
    w = tg.tensor(START.copy(), requires_grad=True)
    w.grad = tg.zeros_like(w)  # every call finds a grad: only the optimizer's state changes
    opt = kind([w])
    traces = []

    def step(x, y):
        traces.append(1)
        loss = ((x @ w - y) ** 2).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss

    step = tg.trace(step, backend="numpy") if traced else step
    for _ in range(steps):
        step(tg.tensor(X), tg.tensor(Y))
    return w.numpy(), opt, len(traces)


@pytest.mark.parametrize("kind", [BiasCorrectedMomentum, HeavyBall])
def test_eager_steps_match_numpy(kind):
    w, opt, _ = run(kind, traced=False)
    np.testing.assert_allclose(w, np_reference(kind), rtol=1e-12)
    assert opt.state[opt.params[0]] is opt.state[0]


def test_a_traced_step_traces_again_while_the_python_state_changes():
    """The step count is a Python number: each value is another plan (as PyTorch's compiler
    guards it), and every step computes what the eager one does."""
    with pytest.warns(UserWarning, match="an optimizer's step count kept as a Python number"):
        w, _, traces = run(BiasCorrectedMomentum, traced=True, steps=10)
    np.testing.assert_allclose(w, np_reference(BiasCorrectedMomentum, steps=10), rtol=1e-12)
    assert traces == 10


def test_a_traced_step_with_tensor_state_traces_twice():
    """Once with the branch that makes the state, once reading it; then that plan holds."""
    w, _, traces = run(HeavyBall, traced=True)
    np.testing.assert_allclose(w, np_reference(HeavyBall), rtol=1e-12)
    assert traces == 2


def test_state_is_found_by_parameter_and_saved_with_its_numbers():
    w, opt, _ = run(BiasCorrectedMomentum, traced=False)
    p = opt.params[0]
    assert p in opt.state and list(opt.state.keys()) == [p]
    assert [s["step"] for s in opt.state.values()] == [STEPS]
    assert opt.state_dict()["state"][0]["step"] == STEPS
    unused = tg.zeros(2, requires_grad=True)
    assert unused not in opt.state
    with pytest.raises(
        KeyError, match=r"shape torch.Size\(\[2\]\) that this optimizer does not update"
    ):
        opt.state[unused]


def test_groups_keep_keys_the_optimizer_does_not_read():
    """A wrapper (SAM) builds the inner optimizer from its own groups, which hold its keys."""
    p = tg.zeros(2, requires_grad=True)
    sgd = optim.SGD([{"params": [p], "rho": 0.05, "lr": 0.2}], lr=0.1)
    assert sgd.param_groups[0]["rho"] == 0.05 and sgd.param_groups[0]["lr"] == 0.2

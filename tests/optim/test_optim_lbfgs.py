"""LBFGS: against PyTorch in float64 (the iterates, losses and history of several steps, with a
fixed step and with the strong-Wolfe line search), to the known minimum of a quadratic and of
Rosenbrock's function without PyTorch, its state_dict round trip, and its refusal inside a
traced step."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import optim

SEARCHES = [None, "strong_wolfe"]


def rosenbrock(torch, xy):
    x, y = xy[0], xy[1]
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


def fit(lib, line_search_fn, steps=3, **kwargs):
    """`steps` LBFGS steps on a least-squares fit with a tanh layer (nonlinear, so the
    curvature history matters): the losses step() returned, the parameters after each and the
    optimizer's counters."""
    if lib == "torch":
        import torch
    else:
        torch = tg
    r = np.random.default_rng(0)
    x, y = torch.tensor(r.standard_normal((12, 3))), torch.tensor(r.standard_normal((12, 2)))
    w = torch.tensor(0.5 * r.standard_normal((3, 2)), requires_grad=True)
    b = torch.tensor(np.zeros(2), requires_grad=True)
    opt = torch.optim.LBFGS([w, b], line_search_fn=line_search_fn, **kwargs)

    def closure():
        opt.zero_grad()
        loss = ((torch.tanh(x @ w + b) - y) ** 2).mean()
        loss.backward()
        return loss

    out = []
    for _ in range(steps):
        loss = opt.step(closure)
        state = opt.state[w] if lib == "torch" else opt.state[0]
        out.append((float(loss.detach()), w.detach().numpy().copy(), b.detach().numpy().copy(),
                    state["func_evals"], state["n_iter"], len(state["old_dirs"])))  # fmt: skip
    return out


@pytest.mark.parametrize("kwargs", [{}, dict(lr=0.5, max_iter=7, history_size=3)])
@pytest.mark.parametrize("line_search_fn", SEARCHES)
def test_lbfgs_matches_pytorch_in_float64(line_search_fn, kwargs):
    pytest.importorskip("torch")
    got, want = fit("tg", line_search_fn, **kwargs), fit("torch", line_search_fn, **kwargs)
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-10, err_msg=f"loss, step {step}")
        np.testing.assert_allclose(a[1], b[1], rtol=1e-9, atol=1e-12, err_msg=f"w, step {step}")
        np.testing.assert_allclose(a[2], b[2], rtol=1e-9, atol=1e-12, err_msg=f"b, step {step}")
        assert a[3:] == b[3:], f"evaluations, iterations, history at step {step}"
    assert not np.allclose(got[-1][1], got[0][1])  # the steps moved the parameters


def test_lbfgs_minimizes_a_quadratic_to_its_known_minimum():
    """On a convex quadratic, L-BFGS (either line search) reaches the minimum A^-1 c, stopping on
    its gradient tolerance (tolerance_change 0: the loss's change never stops it)."""
    r = np.random.default_rng(1)
    m = r.standard_normal((5, 5))
    a, c = m @ m.T + 5 * np.eye(5), r.standard_normal(5)
    want = np.linalg.solve(a, c)
    for line_search_fn in SEARCHES:
        x = tg.tensor(np.zeros(5), requires_grad=True)
        opt = optim.LBFGS([x], max_iter=50, line_search_fn=line_search_fn,
                          tolerance_grad=1e-10, tolerance_change=0.0)  # fmt: skip
        A, C = tg.tensor(a), tg.tensor(c)  # noqa: N806

        def closure():
            opt.zero_grad()
            loss = 0.5 * (x * (A @ x)).sum() - (C * x).sum()
            loss.backward()
            return loss

        first = opt.step(closure)
        assert float(first) == 0.0  # the loss at the start, as PyTorch's step returns
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-8, atol=1e-10,
                                   err_msg=str(line_search_fn))  # fmt: skip
        assert opt.state[0]["n_iter"] < 50  # it stopped on its tolerance
        assert float(opt.step(closure)) == pytest.approx(-0.5 * c @ want, rel=1e-12)


@pytest.mark.parametrize("line_search_fn", SEARCHES)
def test_lbfgs_finds_the_minimum_of_rosenbrock(line_search_fn):
    xy = tg.tensor(np.array([-1.5, 2.0]), requires_grad=True)
    opt = optim.LBFGS([xy], lr=1.0 if line_search_fn else 0.1, max_iter=500, history_size=10,
                      line_search_fn=line_search_fn, tolerance_grad=1e-10,
                      tolerance_change=1e-15)  # fmt: skip

    def closure():
        opt.zero_grad()
        loss = rosenbrock(tg, xy)
        loss.backward()
        return loss

    for _ in range(20 if line_search_fn else 60):
        opt.step(closure)
    np.testing.assert_allclose(xy.numpy(), [1.0, 1.0], atol=1e-6)
    evals = opt.state[0]["func_evals"]
    if line_search_fn:
        assert evals < 300  # the line search takes long steps down the valley


def test_the_closure_runs_with_grad_enabled_and_the_first_loss_is_returned():
    w = tg.tensor(np.array([3.0]), requires_grad=True)
    opt = optim.LBFGS([w], max_iter=4)
    seen = []

    def closure():
        seen.append(tg.is_grad_enabled())
        opt.zero_grad()
        loss = ((w - 1.0) ** 2).sum()
        loss.backward()
        return loss

    with tg.no_grad():
        loss = opt.step(closure)
    # the first step's length min(1, 1 / |g|_1) lr reaches 2; the secant step then reaches the
    # minimum exactly, where the gradient is 0 and it stops: 3 evaluations, 2 iterations
    assert float(loss) == 4.0 and all(seen) and len(seen) == 3
    assert opt.state[0]["func_evals"] == 3 and opt.state[0]["n_iter"] == 2
    assert w.numpy().tolist() == [1.0]


def test_state_dict_round_trip_resumes_identically():
    def make():
        xy = tg.tensor(np.array([-1.2, 1.0]), requires_grad=True)
        opt = optim.LBFGS([xy], max_iter=5, history_size=4, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = rosenbrock(tg, xy)
            loss.backward()
            return loss

        return xy, opt, closure

    xy, opt, closure = make()
    opt.step(closure)
    saved = opt.state_dict()
    n_iter, dirs = saved["state"][0]["n_iter"], list(saved["state"][0]["old_dirs"])
    first_dir = dirs[0].numpy().copy()
    assert set(saved["state"][0]) >= {"d", "t", "old_dirs", "old_stps", "ro", "H_diag",
                                        "prev_flat_grad", "prev_loss", "n_iter"}  # fmt: skip
    xy2, opt2, closure2 = make()
    xy2.numpy()[:] = xy.numpy()
    opt2.load_state_dict(saved)
    for _ in range(2):
        opt.step(closure)
        opt2.step(closure2)
    np.testing.assert_array_equal(xy2.numpy(), xy.numpy())
    assert opt2.state[0]["n_iter"] == opt.state[0]["n_iter"] > 5
    # the saved history is not the live one: stepping on (past history_size) left it as it was
    assert len(opt.state[0]["old_dirs"]) == 4 and opt.state[0]["old_dirs"][0] is not dirs[0]
    assert saved["state"][0]["old_dirs"] == dirs and saved["state"][0]["n_iter"] == n_iter
    np.testing.assert_array_equal(dirs[0].numpy(), first_dir)
    with pytest.raises(ValueError, match="unknown state"):
        opt2.load_state_dict({**saved, "state": {0: {**saved["state"][0], "typo": 1}}})
    opt2.load_state_dict({**saved, "state": {0: {**saved["state"][0], "al": [None]}}})
    assert "al" not in opt2.state[0]  # PyTorch's scratch buffer is not state here


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_lbfgs_refuses_inside_a_traced_step(backend):
    w = tg.tensor(np.ones(3), requires_grad=True)
    opt = optim.LBFGS([w])

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    step = tg.trace(lambda: opt.step(closure), backend=backend)
    with pytest.raises(tg.TraceError, match="LBFGS.*inside a traced step.*closure.*eagerly"):
        step()
    np.testing.assert_array_equal(w.numpy(), np.ones(3))  # nothing moved
    opt.step(closure)  # eagerly it works
    np.testing.assert_allclose(w.numpy(), 0.0, atol=1e-12)


def test_lbfgs_rejects_groups_and_unknown_line_searches():
    a, b = (tg.tensor(np.ones(2), requires_grad=True) for _ in range(2))
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [a]}, {"params": [b]}])
    with pytest.raises(ValueError, match="strong_wolfe"):
        optim.LBFGS([a], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="closure"):
        optim.LBFGS([a]).step()


def time_sequence_prediction(torch, traced_closure=False, line_search_fn=None):
    """pytorch/examples' time_sequence_prediction, smaller: two LSTMCells and a Linear in
    float64 learn sine waves with LBFGS(lr=0.8), the closure as the example writes it (run as a
    traced function too: it is only LBFGS.step that must stay eager). The loss of every closure
    call."""
    nn = torch.nn

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, 8)
            self.lstm2 = nn.LSTMCell(8, 8)
            self.linear = nn.Linear(8, 1)

        def forward(self, input):
            outputs = []
            h_t = torch.zeros(input.size(0), 8, dtype=torch.double)
            c_t = torch.zeros(input.size(0), 8, dtype=torch.double)
            h_t2 = torch.zeros(input.size(0), 8, dtype=torch.double)
            c_t2 = torch.zeros(input.size(0), 8, dtype=torch.double)
            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                outputs += [self.linear(h_t2)]
            return torch.cat(outputs, dim=1)

    seq = Sequence().double()
    r = np.random.default_rng(0)
    seq.load_state_dict({k: torch.tensor(0.3 * r.standard_normal(tuple(v.shape)))
                         for k, v in seq.state_dict().items()})  # fmt: skip
    waves = np.sin(np.arange(4)[:, None] * 0.7 + np.arange(13)[None] / 3.0)
    input, target = torch.tensor(waves[:, :-1]), torch.tensor(waves[:, 1:])
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, line_search_fn=line_search_fn)

    def closure():
        optimizer.zero_grad()
        loss = criterion(seq(input), target)
        loss.backward()
        return loss

    run = tg.trace(closure) if traced_closure else closure
    losses = []

    def logged():
        loss = run()
        losses.append(float(loss.detach()))
        return loss

    for _ in range(2):
        optimizer.step(logged)
    return losses


def test_time_sequence_prediction_learns_with_a_traced_closure():
    import tracegrad.torch as ttorch

    got = time_sequence_prediction(ttorch)
    assert len(got) > 20 and got[-1] < got[0] / 10  # it learns
    traced = time_sequence_prediction(ttorch, traced_closure=True)
    np.testing.assert_allclose(traced, got, rtol=1e-11)


@pytest.mark.parametrize("line_search_fn", SEARCHES)
def test_time_sequence_prediction_matches_pytorch(line_search_fn):
    torch = pytest.importorskip("torch")
    import tracegrad.torch as ttorch

    got = time_sequence_prediction(ttorch, line_search_fn=line_search_fn)
    want = time_sequence_prediction(torch, line_search_fn=line_search_fn)
    assert len(got) == len(want) > 20
    np.testing.assert_allclose(got, want, rtol=1e-9)

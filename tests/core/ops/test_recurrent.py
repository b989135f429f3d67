"""The LSTM and GRU scan ops: their NumPy forward and backward against their parts (the ops a
trace records), against finite differences, a second derivative through the parts, traced =
eager, and their refusals."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, numeric_grad, traced_matches_eager
from tracegrad.core import primitives as P
from tracegrad.core.ops.recurrent import GRU_WORKSPACE, LSTM_WORKSPACE, workspace

STEPS, BATCH, HIDDEN = 4, 3, 2
SCANS = {  # the op, its gates, whether its inputs end with c0 (else a b_hh before h0)
    "lstm": (P.lstm_scan, 4, True),
    "gru": (P.gru_scan, 3, False),
}
WORKSPACES = {"lstm": LSTM_WORKSPACE, "gru": GRU_WORKSPACE}


def result_shape(scan, steps=STEPS):
    """The h's, the final state, then the workspace's rows: (1 + sum(workspace)) T + 1."""
    return ((1 + sum(WORKSPACES[scan])) * steps + 1, BATCH, HIDDEN)


def inputs(rng, scan, dtype=np.float64, steps=STEPS):
    """x_parts (T, B, G H), W_hh^T (H, G H), then h0 and c0 (B, H), or b_hh (G H) and h0."""
    _, gates, lstm = SCANS[scan]
    shapes = [(steps, BATCH, gates * HIDDEN), (HIDDEN, gates * HIDDEN)]
    shapes += [(BATCH, HIDDEN)] * 2 if lstm else [(gates * HIDDEN,), (BATCH, HIDDEN)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_matches_its_parts_forward_and_backward(rng, scan, reverse):
    """The one op's values and every input's gradient are its parts', to rounding (float32):
    the workspace's too, and the gradients through it (each row weighted)."""
    op, arrays = SCANS[scan][0], inputs(rng, scan, np.float32)
    c = rng.standard_normal(result_shape(scan)).astype(np.float32)
    results = []
    for run in (op, op.decompose):
        xs = [tg.tensor(a, requires_grad=True) for a in arrays]
        out = run(*xs, reverse=reverse)
        (out * tg.tensor(c)).sum().backward()
        results.append([out.numpy()] + [x.grad.numpy() for x in xs])
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("reverse", [False, True])
def test_gradients_match_finite_differences(rng, scan, reverse):
    check_grad(lambda *xs: SCANS[scan][0](*xs, reverse=reverse), *inputs(rng, scan))


@pytest.mark.parametrize("scan", SCANS)
def test_states_in_time_order_then_the_final_state(rng, scan):
    """Reversed, step t still lands at row t, and so do its workspace's rows; row T is the
    final state, which reversed is the one after step 0."""
    op, (x, *rest) = SCANS[scan][0], inputs(rng, scan)
    forward, backward = (op(x, *rest, reverse=r).numpy() for r in (False, True))
    flipped = op(x[::-1].copy(), *rest, reverse=False).numpy()
    np.testing.assert_allclose(backward[:STEPS], flipped[:STEPS][::-1], atol=1e-15)
    np.testing.assert_allclose(backward[STEPS], flipped[STEPS], atol=1e-15)
    for a, b in zip(*(workspace(r, STEPS, WORKSPACES[scan]) for r in (backward, flipped)),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b[::-1], atol=1e-15)
    assert not np.allclose(forward[STEPS], backward[STEPS])
    if not SCANS[scan][2]:  # a GRU's final state is its last step's h
        np.testing.assert_array_equal(forward[STEPS], forward[STEPS - 1])
        np.testing.assert_array_equal(backward[STEPS], backward[0])


@pytest.mark.parametrize("scan", SCANS)
def test_second_derivative_takes_the_parts(rng, scan):
    """d/dx_parts of |dL/dW|^2, against finite differences."""
    op, (x, w, *rest) = SCANS[scan][0], inputs(rng, scan)
    c = rng.standard_normal(result_shape(scan))

    def grad_norm(xt: tg.Tensor, create_graph: bool = False) -> tg.Tensor:
        wt = tg.tensor(w, requires_grad=True)
        out = op(xt, wt, *(tg.tensor(a) for a in rest), reverse=False)
        (gw,) = tg.autograd.grad((out * tg.tensor(c)).sum(), [wt], create_graph=create_graph)
        return (gw * gw).sum()

    xt = tg.tensor(x, requires_grad=True)
    grad_norm(xt, create_graph=True).backward()
    expected = numeric_grad(lambda a: float(grad_norm(tg.tensor(a, requires_grad=True))), x)
    np.testing.assert_allclose(xt.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(rng, scan, backend):
    op = SCANS[scan][0]
    traced_matches_eager(lambda *xs: op(*xs, reverse=True), *inputs(rng, scan), backend=backend)


@pytest.mark.parametrize("scan", SCANS)
def test_no_steps_give_the_initial_state(rng, scan):
    op = SCANS[scan][0]
    xs = [tg.tensor(a, requires_grad=True) for a in inputs(rng, scan, steps=0)]
    out = op(*xs, reverse=False)
    assert out.shape == (1, BATCH, HIDDEN)
    np.testing.assert_array_equal(out.numpy()[0], xs[-1].numpy())  # c0, or h0
    out.sum().backward()
    np.testing.assert_array_equal(xs[-1].grad.numpy(), np.ones((BATCH, HIDDEN)))
    for x in xs[:-1]:
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(x.shape))


@pytest.mark.parametrize("scan", SCANS)
def test_refusals_name_the_op_and_the_shapes(rng, scan):
    op, (x, w, *rest) = SCANS[scan][0], (tg.tensor(a) for a in inputs(rng, scan))
    with pytest.raises(tg.ShapeError, match=rf"{op.name}: .*\(3, 8\).*expected \(T, B, "):
        op(x, tg.tensor(np.zeros((3, 8))), *rest, reverse=False)
    last = tg.tensor(rest[-1].numpy().astype(np.float32))
    with pytest.raises(tg.ShapeError, match=f"{op.name}: .*one floating dtype.*float32"):
        op(x, w, *rest[:-1], last, reverse=False)

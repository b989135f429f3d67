"""Elementwise functions with PyTorch's meaning where a plain formula differs (frontend/
elementwise.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, eager_or_traced


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_float_floor_division_is_pythons(backend):
    """`-0.9 // 0.3` is -4 in Python and PyTorch (the quotient of fmod's remainder); floor of
    the rounded quotient gave -3. Zeros keep x / y's sign; by zero it is x / y's inf or nan."""
    rng = np.random.default_rng(0)
    a = [*(rng.standard_normal(300) * 10), -0.9, 0.9, 0.0, -0.0, 0.0, 3.0, 1.0, -7.5, 7.5, 1e300]
    b = [*rng.standard_normal(300), 0.3, 0.3, -2.0, 0.3, 0.0, 0.0, -0.0, 2.5, -2.5, 1e-300]
    want = []
    for x, y in zip(a, b, strict=True):
        try:
            want.append(x // y)
        except ZeroDivisionError:
            want.append(np.float64(x) / np.float64(y))
    div = tg.floor_divide if backend is None else tg.trace(tg.floor_divide, backend=backend)
    with np.errstate(divide="ignore", invalid="ignore"):
        got = div(tg.tensor(a, dtype=np.float64), tg.tensor(b, dtype=np.float64)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert (tg.tensor([-0.9], dtype=np.float64) // 0.3).item() == -4.0


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_a_ties_gradient_is_shared_by_maximum_and_minimum(backend):
    """PyTorch's `maximum`, `minimum`, `max(a, b)` give each side half a tie's gradient (all
    went to the first); relu and clamp keep theirs (0 and 1 at the corner)."""

    def grads(a, b, x):
        a, b, x = (tg.tensor(v, dtype=np.float64, requires_grad=True) for v in (a, b, x))

        def loss(a, b, x):
            out = tg.maximum(a, b) + 2 * tg.max(a, b) + 4 * a.minimum(b)
            return out.sum() + tg.relu(x).sum() + 8 * tg.clamp(x, min=0.0).sum()

        run = loss if backend is None else tg.trace(loss, backend=backend)
        run(a, b, x).backward()
        return a.grad.numpy(), b.grad.numpy(), x.grad.numpy()

    ga, gb, gx = grads([1.0, 2.0, 3.0], [1.0, 3.0, 2.0], [0.0, -1.0, 2.0])
    np.testing.assert_array_equal(ga, [3.5, 4.0, 3.0])
    np.testing.assert_array_equal(gb, [3.5, 3.0, 4.0])
    np.testing.assert_array_equal(gx, [8.0, 0.0, 9.0])
    assert tg.maximum(tg.tensor([3, 1]), tg.tensor([2, 2])).tolist() == [3, 2]  # integers stay
    check_grad(lambda a, b: tg.maximum(a, b) * tg.minimum(a, b), [1.0, 4.0], [2.0, 3.0])


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_bitwise_ops_and_shifts_of_integers(backend, monkeypatch):
    """`&`, `|`, `^`, `~`, `<<` and `>>` on integers (hash encodings, bit packing) are their
    bits', as PyTorch's (they raised); on bool masks they stay logical."""

    def step(a, b, m):
        return (a & b, a | 6, a ^ b, ~a, a << 2, a >> 1, 1 << (b & 7), m & (a > 0), ~m,
                tg.bitwise_left_shift(a, b & 3), a.bitwise_xor(3))  # fmt: skip

    fn = eager_or_traced(step, backend, monkeypatch)
    a, b = np.array([-7, -5, -1, 0, 3, 8]), np.array([2, -3, 4, -2, -5, 3])
    m = np.array([True, False, True, True, False, True])
    for _ in range(2):
        out = [t.numpy() for t in fn(tg.tensor(a), tg.tensor(b), tg.tensor(m))]
        want = [a & b, a | 6, a ^ b, ~a, a << 2, a >> 1, 1 << (b & 7), m & (a > 0), ~m,
                a << (b & 3), a ^ 3]  # fmt: skip
        for got, expected in zip(out, want, strict=True):
            assert got.dtype == expected.dtype and got.tolist() == expected.tolist()
    small = tg.tensor(np.array([1, 2], np.int32))
    assert (small & 3).dtype == np.int32 and (small << 1).numpy().tolist() == [2, 4]
    with pytest.raises(tg.ShapeError, match="bitwise_and.*integer or bool.*float64"):
        tg.tensor(np.ones(2)) & 1


@pytest.mark.parametrize("backend", [None, "numpy"])
def test_gcd_and_lcm_of_integers(backend, monkeypatch):
    """PyTorch's gcd and lcm (they were missing): non-negative, 0 for (0, 0); floats refused."""
    fn = eager_or_traced(lambda a, b: (tg.gcd(a, b), a.lcm(b)), backend, monkeypatch)
    a, b = np.array([4, -6, 0, 9, 0]), np.array([6, 4, 0, -3, 5])
    for _ in range(2):
        g, m = fn(tg.tensor(a), tg.tensor(b))
        assert g.tolist() == [2, 2, 0, 3, 5] and m.tolist() == [12, 12, 0, 9, 0]
    x = tg.tensor(a)
    x.gcd_(tg.tensor(b))
    assert x.tolist() == [2, 2, 0, 3, 5]
    with pytest.raises(tg.ShapeError, match="gcd: expects integer tensors"):
        tg.gcd(tg.tensor([1.5]), tg.tensor([2.0]))

"""Elementwise functions with PyTorch's meaning where a plain formula differs (frontend/
elementwise.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg


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

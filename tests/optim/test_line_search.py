"""The strong-Wolfe line search LBFGS uses: cubic interpolation finds a cubic's minimizer, and
the step it returns meets the Wolfe conditions."""

from __future__ import annotations

import numpy as np
import pytest

from tracegrad.optim.line_search import cubic_interpolate, strong_wolfe


def test_cubic_interpolation_finds_the_minimizer_of_a_cubic():
    def f(x):
        return x**3 - 2 * x**2 + 0.5 * x

    def df(x):
        return 3 * x**2 - 4 * x + 0.5

    want = (4 + np.sqrt(16 - 6)) / 6  # the root of f' where f'' > 0
    for x1, x2 in [(0.0, 2.0), (2.0, 0.0), (0.5, 1.5)]:
        got = cubic_interpolate(x1, f(x1), df(x1), x2, f(x2), df(x2))
        assert got == pytest.approx(want, rel=1e-12)
    # clamped to the bounds given; the middle of them where the cubic has no minimum
    assert cubic_interpolate(0.0, f(0.0), df(0.0), 2.0, f(2.0), df(2.0), bounds=(0.0, 1.0)) == 1.0
    assert cubic_interpolate(0.0, 0.0, 3.0, 1.0, 2.0, 3.0, bounds=(0.2, 0.6)) == 0.4


def test_the_step_meets_the_strong_wolfe_conditions():
    a = np.diag([1.0, 10.0, 100.0])

    def obj(x, t, d):
        y = x + t * d
        return 0.5 * y @ a @ y, a @ y

    x = np.array([1.0, 1.0, 1.0])
    f, g = obj(x, 0.0, np.zeros(3))
    d = -g
    gtd = g @ d
    for t0 in (1e-3, 1.0, 30.0):  # too short: bracketing extends it; too long: zoom shrinks it
        f_new, g_new, t, evals = strong_wolfe(obj, x, t0, d, f, g, gtd)
        assert f_new <= f + 1e-4 * t * gtd  # sufficient decrease
        assert abs(g_new @ d) <= 0.9 * abs(gtd)  # curvature
        assert f_new == pytest.approx(obj(x, t, d)[0]) and 1 <= evals <= 25
        np.testing.assert_allclose(g_new, obj(x, t, d)[1])
        assert t != t0

"""The elementwise ops' NumPy implementations where NumPy has no function: float64 erf (Cody's
rational approximations) against math.erf, and GELU's float64 values built on it; `positive`
on bool arrays."""

from __future__ import annotations

import math

import numpy as np

from tracegrad.core.ops.elementwise import erf_f64, gelu, positive


def test_float64_erf_is_within_four_ulp_of_math_erf_everywhere():
    """Across each region's boundary (0.46875, 4), far out (27, where erfc underflows), tiny
    and subnormal arguments, signed zeros, infinities and nan."""
    rng = np.random.default_rng(0)
    x = np.concatenate([
        np.linspace(-8, 8, 100001), rng.standard_normal(10000) * 3,
        np.geomspace(1e-310, 1e-2, 500), -np.geomspace(1e-310, 1e-2, 500),
        np.nextafter(0.46875, [-1, 1]), np.nextafter(4.0, [0, 8]), [27.0, 30.0, -40.0, 0.0, -0.0],
    ])  # fmt: skip
    want = np.array([math.erf(v) for v in x])
    got = erf_f64(x)
    ulp = np.abs(got - want) / np.spacing(np.maximum(np.abs(want), np.finfo(float).tiny))
    assert ulp.max() <= 4, x[ulp.argmax()]
    assert np.array_equal(np.signbit(erf_f64(np.array([0.0, -0.0]))), [False, True])
    assert erf_f64(np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]
    assert np.isnan(erf_f64(np.array([np.nan]))).all()


def test_float64_gelu_is_x_times_the_normal_cdf():
    """Against x erfc(-x / sqrt 2) / 2, which has no cancellation: for negative x, 1 + erf
    cancels (as in PyTorch's formula), leaving erf's few ulp of 1 as an absolute error."""
    x = np.linspace(-6, 6, 1001)
    want = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    np.testing.assert_allclose(gelu.impl(x), want, rtol=1e-14, atol=4 * 2.0**-52)


def test_positive_copies_bool_arrays_which_np_positive_refuses():
    mask = np.array([True, False])
    out = positive.impl(mask)
    assert out.dtype == np.bool_ and out.tolist() == [True, False] and out is not mask
    into = np.zeros(2, np.bool_)
    assert positive.impl(mask, out=into) is into and into.tolist() == [True, False]

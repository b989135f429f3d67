"""The float32 approximations in compiler.kernels.fastmath against float64 NumPy, over the whole
float32 range: a dense sweep of bit patterns (every sign, exponent and subnormal) plus the
special points. The bounds asserted here are the ones docs/kernels.md states."""

from __future__ import annotations

import functools
import math
import re

import numba
import numpy as np
import pytest

from tracegrad.compiler.kernels import fastmath
from tracegrad.core import primitives as P

# Maximum error in units in the last place of the float32 result, for results >= 2**-126,
# and in units of 2**-149 for subnormal results. docs/kernels.md quotes these.
BOUNDS = {"exp": 1.5, "log": 1.0, "tanh": 5.0, "sigmoid": 3.0, "erf": 7.5}
SUBNORMAL_BOUND = 1.0
SMALLEST_NORMAL = np.finfo(np.float32).smallest_normal
SUBNORMAL_ULP = 2.0**-149


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


REFERENCES = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": _sigmoid64,
              "erf": np.vectorize(math.erf, otypes=[np.float64])}  # fmt: skip

_loops: dict[str, object] = {}


def run(name: str, x: np.ndarray) -> np.ndarray:
    """`name`_f32 over x in a jitted loop with the kernels' flags, as fused kernels call it."""
    if name not in _loops:
        f = getattr(fastmath, f"{name}_f32")

        @numba.njit(fastmath=set(fastmath.FLAGS | {"reassoc"}), error_model="numpy")
        def loop(x, out):
            for i in range(x.size):
                out[i] = f(x[i])

        _loops[name] = loop
    out = np.empty_like(x)
    _loops[name](x, out)
    return out


def special_points() -> np.ndarray:
    f32 = np.finfo(np.float32)
    points = [0.0, f32.smallest_subnormal, f32.smallest_normal, 1.0, 2.0, 0.5, f32.max, np.inf,
              88.72283, 88.7229, 88.8, 87.33654, 103.97, 104.0, 105.0, 176.0, 176.4, 177.0,
              7.90738964, 7.9074, 9.0, 0.0004, 0.00039999, 1e-30, math.log(2) / 2, 1.41421356,
              0.70710678]  # fmt: skip
    points = np.array(points, np.float32)
    return np.concatenate(
        [points, -points, np.nextafter(points, np.float32(0)), [np.float32(np.nan)]]
    )


def dense_sweep(step: int = 4099) -> np.ndarray:
    """Every `step`-th float32 bit pattern: about a million values from -nan to +nan."""
    bits = np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), special_points()])


def errors(name: str, x: np.ndarray, reference=None, compute=None) -> tuple[np.ndarray, ...]:
    """(ulps on normal results, units of 2**-149 on subnormal results, x of wrong specials)."""
    with np.errstate(all="ignore"):  # the sweep holds signalling nans
        got = (compute or functools.partial(run, name))(x).astype(np.float64)
        want = (reference or REFERENCES[name])(x.astype(np.float64))
        want32 = want.astype(np.float32).astype(np.float64)
    special = np.isnan(want) | np.isinf(want32)
    wrong = special & ~((np.isnan(got) & np.isnan(want)) | (got == want32))
    wrong |= ~special & ~np.isfinite(got)
    ok = ~special & np.isfinite(got)
    normal = ok & (np.abs(want) >= SMALLEST_NORMAL)
    ulp = np.ldexp(1.0, np.frexp(want[normal])[1] - 24)
    subnormal = ok & ~normal
    return (
        np.abs(got[normal] - want[normal]) / ulp,
        np.abs(got[subnormal] - want[subnormal]) / SUBNORMAL_ULP,
        x[wrong],
    )


@pytest.fixture(scope="module")
def sweep() -> np.ndarray:
    return dense_sweep()


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_error_bound_over_float32_range(name, sweep):
    ulps, subnormal_units, wrong = errors(name, sweep)
    assert wrong.size == 0, f"{name}: wrong inf/nan/overflow at {wrong[:10]}"
    assert ulps.size > 500_000
    assert ulps.max() <= BOUNDS[name], f"{name}: {ulps.max():.3f} ulp"
    if subnormal_units.size:
        assert subnormal_units.max() <= SUBNORMAL_BOUND


def test_numpys_float32_erf_keeps_the_kernels_bound(sweep):
    """Eager steps (and a first call's NumPy plan) compute the kernels' function by blocks."""
    ulps, subnormal_units, wrong = errors("erf", sweep, compute=P.erf.impl)
    assert wrong.size == 0 and ulps.size > 500_000
    assert ulps.max() <= BOUNDS["erf"] and subnormal_units.max() <= SUBNORMAL_BOUND
    x = sweep[:150_000].reshape(300, 500).T  # strided, over more than two blocks
    np.testing.assert_array_equal(P.erf.impl(x), P.erf.impl(np.ascontiguousarray(x)))


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_bound_is_tight_enough_to_catch_a_wrong_formula(name, sweep):
    """The error measure itself must notice a real mistake: a relative bias of 2**-21."""
    biased = lambda x: REFERENCES[name](x) * (1 + 2.0**-21)
    ulps, _, _ = errors(name, sweep[::50], reference=biased)
    assert ulps.max() > BOUNDS[name]


def test_special_values():
    inf, nan = np.inf, np.nan
    x = np.array([-inf, -1.0, -0.0, 0.0, 1.0, inf, nan], np.float32)
    close = lambda name, want: np.testing.assert_allclose(run(name, x), want, rtol=1e-6)
    close("exp", [0, 1 / np.e, 1, 1, np.e, inf, nan])
    close("log", [nan, nan, -inf, -inf, 0, inf, nan])
    close("tanh", [-1, np.tanh(-1.0), 0, 0, np.tanh(1.0), 1, nan])
    close("sigmoid", [0, 1 / (1 + np.e), 0.5, 0.5, 1 / (1 + 1 / np.e), 1, nan])
    close("erf", [-1, math.erf(-1.0), 0, 0, math.erf(1.0), 1, nan])
    assert np.signbit(run("tanh", x)[2])  # tanh(-0) = -0
    assert np.signbit(run("erf", x)[2])


def test_exp_overflow_and_underflow_edges():
    x = np.array([88.72283, 88.7229, -103.0, -104.0, -200.0], np.float32)
    got = run("exp", x)
    largest = np.float32(np.exp(np.float64(x[0])))
    assert np.isfinite(largest) and got[0] == pytest.approx(largest, rel=2e-7)
    assert got[1] == np.inf
    assert got[2] == np.float32(np.exp(-103.0)) > 0 and got[3] == got[4] == 0


def test_log_of_subnormals_is_accurate():
    x = np.array([1.4e-45, 1e-40, 1e-39], np.float32)
    np.testing.assert_allclose(run("log", x), np.log(x.astype(np.float64)), rtol=1e-7)


def test_shape_of_the_functions():
    x = np.linspace(-10, 10, 200_001, dtype=np.float32)
    for name in ("exp", "sigmoid"):
        assert np.all(np.diff(run(name, x)) >= 0), name
    y = run("tanh", x)  # a rational function: odd, bounded, but wobbling by ulps near +-1
    assert np.all(np.abs(y) <= 1) and np.array_equal(y, -y[::-1])
    assert run("tanh", np.array([9.1, 1e30, -1e30], np.float32)).tolist() == [1.0, 1.0, -1.0]
    y = run("erf", x)
    assert np.all(np.abs(y) <= 1) and np.array_equal(y, -y[::-1])
    assert run("erf", np.array([4.0, 1e30, -1e30], np.float32)).tolist() == [1.0, 1.0, -1.0]


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_loops_over_them_vectorize(name):
    """Why fastmath.py exists: a loop calling math.tanh calls libm per element; one calling
    these is SIMD code, with no call left."""
    f = getattr(fastmath, f"{name}_f32")

    @numba.njit(fastmath=set(fastmath.FLAGS), error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = f(x[i])

    x = np.ones(64, np.float32)
    loop(x, np.empty_like(x))
    llvm = loop.inspect_llvm(loop.signatures[0])
    assert re.search(r"<\d+ x float>", llvm)
    assert not re.search(r"@(llvm\.)?(tanh|exp|log|erf)f?\b", llvm)

"""The orthogonal polynomials of core/ops/special.py (Chebyshev's four kinds and their shifted
forms, Hermite's two, Laguerre's, Legendre's) of a tensor degree: against NumPy's
numpy.polynomial (T, H, He, L, P), small degrees' explicit forms and the identities between the
kinds (V = U_n - U_n-1, W = U_n + U_n-1, shifted(x) = unshifted(2x - 1)); PyTorch's degree rules
(truncated; negative, nan or inf: 0), limits and values where installed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.polynomial import chebyshev, hermite, hermite_e, laguerre, legendre

import tracegrad as tg
from tracegrad.core import primitives as P

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
R = np.random.default_rng(9)
KINDS = "tuvw"
NAMES = [f"{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in KINDS] + [
    "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
    "legendre_polynomial_p"]  # fmt: skip


def values(name, x, n, dtype=np.float64) -> np.ndarray:
    x, n = np.asarray(x, dtype), np.asarray(n, dtype)
    return getattr(P, name)(tg.tensor(x), tg.tensor(n)).numpy()


def unit(n: int) -> list[float]:
    return [0.0] * n + [1.0]


NUMPYS = {"chebyshev_polynomial_t": chebyshev.chebval, "hermite_polynomial_h": hermite.hermval,
          "hermite_polynomial_he": hermite_e.hermeval, "laguerre_polynomial_l": laguerre.lagval,
          "legendre_polynomial_p": legendre.legval}  # fmt: skip


@pytest.mark.parametrize("name", NUMPYS)
def test_against_numpys_series(name):
    x = np.concatenate([R.uniform(-1, 1, 40), R.uniform(-3, 3, 20), [0.0, 1.0, -1.0]])
    for n in (0, 1, 2, 3, 5, 7, 8, 9, 12, 20):
        want = NUMPYS[name](x, unit(n))
        scale = np.maximum(1.0, np.abs(want).max())
        np.testing.assert_allclose(values(name, x, n), want, rtol=1e-12, atol=1e-12 * scale,
                                   err_msg=f"{name} n={n}")  # fmt: skip


def test_explicit_small_degrees_and_identities():
    x = np.concatenate([R.uniform(-1, 1, 30), R.uniform(-2.5, 2.5, 10)])
    np.testing.assert_allclose(values("chebyshev_polynomial_u", x, 3), 8 * x**3 - 4 * x, atol=1e-13)
    np.testing.assert_allclose(values("chebyshev_polynomial_v", x, 2), 4 * x**2 - 2 * x - 1,
                               atol=1e-13)  # fmt: skip
    np.testing.assert_allclose(values("chebyshev_polynomial_w", x, 2), 4 * x**2 + 2 * x - 1,
                               atol=1e-13)  # fmt: skip
    np.testing.assert_allclose(values("hermite_polynomial_h", x, 3), 8 * x**3 - 12 * x, atol=1e-13)
    np.testing.assert_allclose(values("legendre_polynomial_p", x, 3), (5 * x**3 - 3 * x) / 2,
                               atol=1e-13)  # fmt: skip
    for n in (1, 4, 9, 10, 15, 25):  # the recurrence and the trigonometric forms alike
        u = values("chebyshev_polynomial_u", x, n)
        before = values("chebyshev_polynomial_u", x, n - 1)
        scale = 1e-12 * max(1.0, np.abs(u).max())
        np.testing.assert_allclose(values("chebyshev_polynomial_v", x, n), u - before, atol=scale)
        np.testing.assert_allclose(values("chebyshev_polynomial_w", x, n), u + before, atol=scale)
        for k in KINDS:  # shifted(y) = unshifted(2y - 1)
            y = (x + 1) / 2
            np.testing.assert_allclose(values(f"shifted_chebyshev_polynomial_{k}", y, n),
                                       values(f"chebyshev_polynomial_{k}", 2 * y - 1, n),
                                       atol=10 * scale)  # fmt: skip


def test_degrees_and_limits_are_pytorchs():
    for name in NAMES:  # the degree truncated; negative, nan and inf degrees give 0
        np.testing.assert_array_equal(values(name, [0.3, 0.3], [2.7, 2.0])[0],
                                      values(name, 0.3, 2.0))  # fmt: skip
        out = values(name, 0.3, [-1.0, -5.0, math.nan, math.inf, -math.inf, 1e30])
        assert out.tolist() == [0.0] * 6, name
    ends = {"chebyshev_polynomial_t": (1, -1), "chebyshev_polynomial_u": (6, -6),
            "chebyshev_polynomial_v": (1, -11), "chebyshev_polynomial_w": (11, -1),
            "legendre_polynomial_p": (1, -1)}  # fmt: skip
    for name, (at_one, at_minus_one) in ends.items():  # degree 5
        assert values(name, [1.0, -1.0], 5).tolist() == [at_one, at_minus_one], name
        if "chebyshev" in name:
            got = values(f"shifted_{name}", [1.0, 0.0], 5).tolist()
            assert got == [at_one, at_minus_one], name
    assert values("laguerre_polynomial_l", 0.0, 7).item() == 1.0
    # Hermite's beyond PyTorch's limits: nan (128 in float32, 512 in float64; odd ones are 0 at 0)
    got = values("hermite_polynomial_he", 0.0, [127, 129], np.float32)
    np.testing.assert_array_equal(got, [0.0, math.nan])


def test_dtypes_broadcast_and_promote():
    x = tg.tensor([[0.5], [0.25]])
    out = P.chebyshev_polynomial_t(x, tg.tensor([1, 2, 3]))
    assert out.shape == (2, 3) and out.dtype == np.float32
    assert P.legendre_polynomial_p(x, tg.tensor([2.0], dtype=tg.float64)).dtype == np.float64
    assert P.hermite_polynomial_h(tg.tensor([1, 2]), 3).dtype == np.float32


@needs_torch
@pytest.mark.parametrize("name", NAMES)
def test_values_match_torch(name):
    edges = [0.0, 1.0, -1.0, 0.5, 1 - 2**-53, -1 + 2**-52, math.inf]
    x = np.concatenate([R.uniform(-1, 1, 40), R.uniform(-3, 3, 20), R.uniform(-0.1, 1.1, 20),
                        edges])[:, None]  # fmt: skip
    n = np.array([-2.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 16.0, 33.0, 3.9,
                  math.nan, math.inf, 100.0, 129.0, 600.0])[None, :]  # fmt: skip
    theirs = getattr(torch.special, name)
    want = theirs(torch.tensor(x), torch.tensor(n)).numpy()
    got = values(name, x, n)
    # near 0 the recurrences and cos(n acos x) cancel: an error of their terms' size
    scale = np.maximum(1.0, np.abs(np.where(np.isfinite(want), want, 0.0)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    x32, n32 = x.astype(np.float32), n.astype(np.float32)
    with np.errstate(over="ignore"):
        want32 = theirs(torch.tensor(x32.astype(np.float64)), torch.tensor(n32.astype(np.float64)))
        want32 = want32.numpy().astype(np.float32)
    got32 = values(name, x32, n32, np.float32)
    if name.startswith("hermite"):  # float32's limit, 128: PyTorch's float64 has 512
        want32[:, (n[0] > 128) & np.isfinite(n[0])] = np.nan
    with np.errstate(invalid="ignore"):  # inf - inf
        close = np.abs(got32 - want32) <= 1.2e-7 * np.abs(want32) + 1e-7 * scale
    assert (close | (got32 == want32) | (np.isnan(got32) & np.isnan(want32))).all()

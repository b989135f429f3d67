"""The Hurwitz zeta function and the regularized incomplete gamma functions P = igamma and Q =
igammac of core/ops/special.py: closed forms (zeta(2, 1) = pi^2/6, P(1, x) = 1 - e^-x, P(1/2,
x) = erf(sqrt(x)), Q(n, x) a Poisson sum), recurrences, the edges PyTorch gives, PyTorch's values
in float64 (to 1e-12; 5e-9 where PyTorch's asymptotic expansion uses a float32 pi) and float32
(its float64 values rounded), gradients in q and x against finite differences and PyTorch's, and
the error for the argument PyTorch has no derivative in."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, traced_matches_eager
from tracegrad.compiler import lowering
from tracegrad.core import primitives as P

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
R = np.random.default_rng(11)


def values(op, a, b, dtype=np.float64) -> np.ndarray:
    return op(tg.tensor(np.asarray(a, dtype)), tg.tensor(np.asarray(b, dtype))).numpy()


def test_zeta_known_values_recurrence_and_edges():
    s, q = [2.0, 4.0, 3.0, 1.5, 4.0, 10.0], [1.0, 1.0, 0.5, 2.0, -2.5, 3.0]
    want = [math.pi**2 / 6, math.pi**4 / 90, 8.41439832211716, 1.6123753486854884,
            32.4579793698646, 1.8012627818085337e-05]  # fmt: skip
    np.testing.assert_allclose(values(P.zeta, s, q), want, rtol=1e-14)
    s, q = R.uniform(1.1, 12, 50), R.uniform(-9.5, 30, 50)
    s = np.where(q < 0, np.round(s), s)  # below 0 only integer orders are defined
    np.testing.assert_allclose(values(P.zeta, s, q), values(P.zeta, s, q + 1) + q**-s,
                               rtol=1e-12)  # fmt: skip
    out = values(P.zeta, [1.0, 0.5, 2.0, 3.0, 2.5, math.nan], [2.0, 2.0, 0.0, -2.0, -1.5, 1.0])
    assert out[:4].tolist() == [math.inf, math.nan, math.inf, math.inf] or (
        out[0] == out[2] == out[3] == math.inf and np.isnan(out[1]))  # fmt: skip
    assert np.isnan(out[4]) and np.isnan(out[5])


def poisson(ks: range, x: float) -> float:
    """sum_k e^-x x^k / k! over `ks` (Q(n, x) over k < n, P(n, x) over k >= n), by math.fsum."""
    return math.fsum(math.exp(k * math.log(x) - x - math.lgamma(k + 1)) for k in ks)


def test_incomplete_gamma_closed_forms():
    x = np.concatenate([10 ** R.uniform(-6, 2.8, 200), [1.0, 0.5, 1.1, 700.0]])
    np.testing.assert_allclose(values(P.igamma, 1.0, x), -np.expm1(-x), rtol=1e-14)
    np.testing.assert_allclose(values(P.igammac, 1.0, x), np.exp(-x), rtol=2e-13)
    root = np.sqrt(x[x < 600])
    np.testing.assert_allclose(values(P.igamma, 0.5, root**2), [math.erf(r) for r in root],
                               rtol=1e-14)  # fmt: skip
    np.testing.assert_allclose(values(P.igammac, 0.5, root**2), [math.erfc(r) for r in root],
                               rtol=2e-13)  # fmt: skip
    # integer a, through each method (series, continued fraction, Temme's expansion beyond 200)
    cases = [(3, 2.5), (3, 9.0), (30, 12.0), (30, 41.0), (150, 160.0), (250, 240.0), (250, 275.0),
             (400, 380.0), (1000, 1040.0)]  # fmt: skip
    for n, v in cases:
        q, p = poisson(range(n), v), poisson(range(n, n + 3000), v)
        assert math.isclose(values(P.igammac, n, v).item(), q, rel_tol=1e-12), (n, v)
        assert math.isclose(values(P.igamma, n, v).item(), p, rel_tol=1e-12), (n, v)
    a, x = 10 ** R.uniform(-2, 4, 300), 10 ** R.uniform(-2, 4, 300)
    np.testing.assert_allclose(values(P.igamma, a, x) + values(P.igammac, a, x), 1.0, rtol=1e-14)


def test_incomplete_gamma_edges_are_pytorchs():
    inf, nan = math.inf, math.nan
    a = [-1.0, 1.0, 0.0, 0.0, 2.0, inf, inf, 2.0, nan, nan, 2.0]
    x = [1.0, -1.0, 1.0, 0.0, 0.0, 1.0, inf, inf, 0.0, 1.0, nan]
    lower, upper = values(P.igamma, a, x), values(P.igammac, a, x)
    np.testing.assert_array_equal(lower, [nan, nan, 1.0, nan, 0.0, 0.0, nan, 1.0, 0.0, nan, nan])
    np.testing.assert_array_equal(upper, [nan, nan, 0.0, nan, 1.0, 1.0, nan, 0.0, 1.0, nan, nan])


def pytorchs_asymptotic(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Where PyTorch uses Temme's expansion, with a float32 pi (off by up to 2e-9)."""
    r = np.abs(x - a) / a
    return ((a > 20) & (a < 200) & (r < 0.3)) | ((a > 200) & (r < 4.5 / np.sqrt(a)))


@needs_torch
@pytest.mark.parametrize("name", ["zeta", "igamma", "igammac"])
def test_values_match_torch(name):
    if name == "zeta":
        a = np.concatenate([R.uniform(1, 12, 400), 10 ** R.uniform(0, 2, 100)])
        b = np.concatenate([R.uniform(-20, 40, 400), 10 ** R.uniform(-3, 5, 100)])
        a = np.where(b < 0, np.round(a), a)
        theirs = torch.special.zeta
    else:
        a = np.concatenate([10 ** R.uniform(-3, 4, 1500), R.uniform(0, 60, 500)])
        b = np.concatenate([10 ** R.uniform(-3, 4, 1500), a[1500:] * R.uniform(0.5, 1.5, 500)])
        theirs = torch.special.gammainc if name == "igamma" else torch.special.gammaincc
    op = getattr(P, name)
    got, want = values(op, a, b), theirs(torch.tensor(a), torch.tensor(b)).numpy()
    loose = pytorchs_asymptotic(a, b) if name != "zeta" else np.zeros(a.shape, bool)
    np.testing.assert_allclose(got[loose], want[loose], rtol=5e-9)
    # far tails (below 1e-30, large a): x^a e^-x / Gamma(a) by its logarithm, both ~1e-12 off
    tail = ~loose & (want < 1e-30)
    np.testing.assert_allclose(got[tail], want[tail], rtol=2e-11, atol=1e-300)
    rest = ~loose & ~tail
    np.testing.assert_allclose(got[rest], want[rest], rtol=1e-12)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    want32 = theirs(torch.tensor(a32.astype(np.float64)), torch.tensor(b32.astype(np.float64)))
    with np.errstate(over="ignore"):
        want32 = want32.numpy().astype(np.float32)
    got32 = values(op, a32, b32, np.float32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want32, rtol=1.2e-7, atol=1e-44)


GRADIENT_CASES = {
    "zeta": (P.zeta, np.array([2.0, 3.5, 1.5, 6.0]), np.array([0.7, 2.0, 5.0, -1.5])),
    "igamma": (P.igamma, np.array([0.5, 2.0, 7.5, 30.0]), np.array([0.3, 2.5, 6.0, 28.0])),
    "igammac": (P.igammac, np.array([0.5, 2.0, 7.5, 30.0]), np.array([0.3, 2.5, 6.0, 28.0])),
}


@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradient_in_the_second_argument_matches_finite_differences(name):
    op, a, x = GRADIENT_CASES[name]
    check_grad(lambda t: op(tg.tensor(a), t), x, tol=1e-6)
    check_grad(lambda t: op(tg.tensor(a[:, None]), t), x[None, :2], tol=1e-6)  # broadcast


@needs_torch
@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradient_matches_torch(name):
    op, a, x = GRADIENT_CASES[name]
    theirs = {"zeta": torch.special.zeta, "igamma": torch.igamma, "igammac": torch.igammac}[name]
    ours, t = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    op(tg.tensor(a), ours).sum().backward()
    theirs(torch.tensor(a), t).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name, what", [("zeta", "zeta"), ("igamma", "igamma: input"),
                                        ("igammac", "igammac: input")])  # fmt: skip
def test_no_derivative_in_the_first_argument(name, what):
    """PyTorch has none: backward raises, naming the op (when it reaches that argument)."""
    op, a, x = GRADIENT_CASES[name]
    t = tg.tensor(a, requires_grad=True)
    y = op(t, tg.tensor(x))
    with pytest.raises(NotImplementedError, match=f"derivative for '{what}' is not implemented"):
        y.sum().backward()


def test_dtypes_broadcast_and_promote():
    a32, x64 = tg.tensor([[1.0], [2.0]]), tg.tensor([0.5, 1.0, 3.0], dtype=tg.float64)
    out = P.igamma(a32, x64)
    assert out.shape == (2, 3) and out.dtype == np.float64
    assert P.zeta(tg.tensor([2, 3]), tg.tensor([1])).dtype == np.float32  # integers: the default
    assert P.igammac(a32, 2.0).dtype == np.float32


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(x):
        a = tg.tensor([0.5, 2.0, 3.0, 25.0, 300.0])
        return P.igamma(a, x) + P.igammac(a * 2.0, x) * P.zeta(a + 1.5, x)

    traced_matches_eager(f, np.array([0.4, 1.3, 2.2, 27.5, 290.0]), backend=backend)

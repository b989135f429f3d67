"""Special functions NumPy lacks (and scipy, not a dependency, would give): the log-gamma
function and its derivatives (digamma, polygamma), erfc, and the inverse error function, each
an elementwise op whose gradient is the next function of its family. The values are NumPy
(recurrence plus asymptotic series, a rational start refined by Newton steps) or Python's
`math`, element by element, where it is exact and NumPy has nothing. They are opaque ops
(`special`), run as they are between a compiled step's fused kernels."""

from __future__ import annotations

import math

import numpy as np

from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, Primitive


def _as_float(x) -> tuple[np.ndarray, np.dtype]:
    """x as float64 (the work's precision) and the dtype of the result (x's float dtype, or
    float64 for integers, as `shapes.floating` says)."""
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    return x.astype(np.float64), dtype


def _lgamma_scalar(v: float) -> float:
    """math.lgamma, with +inf at the poles (0, -1, -2, ...) where Python raises."""
    try:
        return math.lgamma(v)
    except ValueError:
        return math.inf


_lgamma_object = np.frompyfunc(_lgamma_scalar, 1, 1)
_erfc_object = np.frompyfunc(math.erfc, 1, 1)
_erf_object = np.frompyfunc(math.erf, 1, 1)


def _lgamma(x):
    """log|Gamma(x)| by math.lgamma per element (exact; NumPy has no lgamma)."""
    a, dtype = _as_float(x)
    return np.asarray(_lgamma_object(a), np.float64).astype(dtype, copy=False)


def _erfc(x):
    """1 - erf(x), without the cancellation for large x: math.erfc per element."""
    a, dtype = _as_float(x)
    return np.asarray(_erfc_object(a), np.float64).astype(dtype, copy=False)


SHIFT = 10.0  # the recurrences move x to at least this, where the asymptotic series converge


def _digamma(x):
    """psi(x) = d/dx log Gamma(x): psi(x) = psi(x + 1) - 1/x up to x >= 10, then the asymptotic
    series ln x - 1/(2x) - sum B_2k / (2k x^2k); below 0 the reflection psi(x) = psi(1 - x) -
    pi / tan(pi x). -inf at 0 and nan at the negative integers (PyTorch's)."""
    a, dtype = _as_float(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        neg = a < 0
        y = np.where(neg, 1.0 - a, a)
        total = np.zeros_like(y)
        for _ in range(int(SHIFT)):
            low = y < SHIFT
            total -= np.where(low, 1.0 / y, 0.0)
            y = np.where(low, y + 1.0, y)
        z = 1.0 / (y * y)
        tail = z * (1 / 120 - z * (1 / 252 - z * (1 / 240 - z * (1 / 132 - z * (
            691 / 32760 - z / 12)))))  # fmt: skip
        out = np.log(y) - 0.5 / y - z / 12 + z * tail + total
        frac = a - np.floor(a)  # tan has period pi: its argument stays small and exact
        out = np.where(neg, out - math.pi / np.tan(math.pi * frac), out)
        out = np.where(neg & (frac == 0), np.nan, out)
    return out.astype(dtype, copy=False)


# (2j)! / B_2j for j = 1..12: the Euler-Maclaurin tail of the Hurwitz zeta function (Cephes)
ZETA_TAIL = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
             7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
             -4.5979787224074726105e15, 1.8152105401943546773e17,
             -7.1661652561756670113e18)  # fmt: skip


def _hurwitz_zeta(s: int, q: np.ndarray) -> np.ndarray:
    """zeta(s, q) = sum_k (q + k)^-s for an integer s >= 2 (float64 q, any sign): the terms
    summed until q + k >= 10, then the Euler-Maclaurin tail. The number of passes grows with
    -min(q): large negative q are slow (polygamma there is rare)."""
    a = q.copy()
    total = np.zeros_like(a)
    steps = int(max(0.0, math.ceil(SHIFT - np.nanmin(a)))) if a.size else 0
    for _ in range(steps):
        low = a < SHIFT
        total += np.where(low, a ** float(-s), 0.0)
        a = np.where(low, a + 1.0, a)
    tail = a ** float(1 - s) / (s - 1) + 0.5 * a ** float(-s)
    rising, power = float(s), a ** float(-s - 1)
    inv2 = 1.0 / (a * a)
    for j, c in enumerate(ZETA_TAIL):
        tail += rising * power / c
        rising *= (s + 2 * j + 1) * (s + 2 * j + 2)
        power = power * inv2
    return total + tail


def _polygamma(x, n: int):
    """The n-th derivative of psi (n >= 1): (-1)^(n+1) n! zeta(n + 1, x); for n = 1 below 0 by
    the reflection psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x). +inf at the poles."""
    if n < 1:
        raise ValueError(f"polygamma: the order must be at least 1 here (0 is digamma), got {n}")
    a, dtype = _as_float(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if n == 1:
            neg = a < 0
            y = _hurwitz_zeta(2, np.where(neg, 1.0 - a, a))
            frac = a - np.floor(a)
            out = np.where(neg, (math.pi / np.sin(math.pi * frac)) ** 2 - y, y)
            out = np.where(neg & (frac == 0), np.inf, out)
        else:
            poles = (a <= 0) & (a == np.floor(a))
            out = (-1.0) ** (n + 1) * math.factorial(n) * _hurwitz_zeta(n + 1, a)
            out = np.where(poles, np.inf if n % 2 else -np.inf, out)
    return out.astype(dtype, copy=False)


# Giles's single-precision erfinv ("Approximating the erfinv function", GPU Gems 4):
# a polynomial in w = -log(1 - x^2) - 2.5 for w < 5, else in sqrt(w) - 3; the Newton steps
# below make it exact in float64.
ERFINV_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
               0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)  # fmt: skip
TWO_OVER_SQRT_PI = 1.1283791670955126


def _polynomial(w: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    out = np.full_like(w, coefficients[0])
    for c in coefficients[1:]:
        out = out * w + c
    return out


def _newton_step(y: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The Newton step for erf(y) = a: on erf itself for |a| <= 1/2; beyond, on log erfc(|y|)
    = log(1 - |a|), where 1 - |a| is exact (Sterbenz), erf would cancel, and the logarithm
    makes the tail nearly linear, so that Newton converges from afar. One Python call per
    element (math.erf or math.erfc)."""
    slope = TWO_OVER_SQRT_PI * np.exp(-y * y)
    step = np.empty_like(y)
    big = np.abs(a) > 0.5
    near = ~big
    step[near] = (np.asarray(_erf_object(y[near]), np.float64) - a[near]) / slope[near]
    upper = np.asarray(_erfc_object(np.abs(y[big])), np.float64)
    far = (np.log(upper) - np.log(1.0 - np.abs(a[big]))) * upper / slope[big]
    step[big] = -np.sign(a[big]) * far
    return step


def _erfinv(x):
    """The y with erf(y) = x: Giles's approximation, then Newton steps (`_newton_step`) on the
    elements whose last step was not yet small enough to have made them exact (two in float64
    for most, one in float32). +-inf at +-1, nan outside [-1, 1]."""
    a, dtype = _as_float(x)
    shape, a = np.shape(a), np.ravel(a)  # `active` holds flat indices
    tol = 1e-15 if dtype == np.float64 else 1e-9
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = -np.log((1.0 - a) * (1.0 + a))
        central = _polynomial(w - 2.5, ERFINV_CENTRAL)
        tail = _polynomial(np.sqrt(w) - 3.0, ERFINV_TAIL)
        y = np.where(w < 5.0, central, tail) * a
        inside = np.abs(a) < 1.0
        y = np.where(inside, y, 0.0)
        active = np.flatnonzero(inside)
        for _ in range(8):
            if not active.size:
                break
            step = _newton_step(y[active], a[active])
            moved = (TWO_OVER_SQRT_PI * np.exp(-(y[active] ** 2)) > 0) & np.isfinite(step)
            y[active[moved]] -= step[moved]
            # Newton squares the error: a step below sqrt(tol) leaves an error below tol
            active = active[moved & (np.abs(step) > 0.1 * math.sqrt(tol))]
        sign = np.sign(a)
        y = np.where(np.abs(a) == 1.0, sign * np.inf, y)
        y = np.where(np.abs(a) > 1.0, np.nan, y)
    return y.reshape(shape).astype(dtype, copy=False)


def _i0(x):
    """The modified Bessel function of the first kind of order 0: NumPy's np.i0 (Cephes's
    Chebyshev expansions)."""
    a, dtype = _as_float(x)
    return np.i0(a).astype(dtype, copy=False)


def _i1(x):
    """Order 1 by its power series sum_k (x/2)^(2k+1) / (k! (k+1)!), whose terms are all of one
    sign (no cancellation), summed until they no longer change the sum (about |x| + 40 terms;
    NumPy has no i1)."""
    a, dtype = _as_float(x)
    with np.errstate(over="ignore", invalid="ignore"):
        quarter = a * a / 4.0
        term = a / 2.0
        total = term.copy()
        steps = int(np.nanmax(np.abs(a), initial=0.0)) + 40 if a.size else 0
        for k in range(1, min(steps, 2000)):
            term = term * quarter / (k * (k + 1))
            total = total + term
    return total.astype(dtype, copy=False)


def _i1_slope(x):
    """d/dx I1(x) = I0(x) - I1(x) / x, 1/2 at 0 (composed of ops, so it differentiates again)."""
    zero = x == 0.0
    return where(zero, 0.5, i0(x) - i1(x) / where(zero, 1.0, x))


def special(name, impl, vjp, saves, shape=shapes.real_floating):
    """An elementwise function, recorded as opaque: its value is many passes (or a Python call
    per element), not the one pass an elementwise op is taken to cost, so remat must not
    recompute it in backward to save memory; being pure, the memory budget may rebuild it.
    Of real values only, as PyTorch's (complex ones lost their imaginary parts)."""
    return Primitive(name, impl, shape, (vjp,), saves, kind=Kind.OPAQUE, raises=False,
                     rerun=True, promotion="float")  # fmt: skip


lgamma = special("lgamma", _lgamma, lambda g, out, x: g * digamma(x), "in")
digamma = special("digamma", _digamma, lambda g, out, x: g * polygamma(x, n=1), "in")
polygamma = special("polygamma", _polygamma, lambda g, out, x, n: g * polygamma(x, n=n + 1),
                    "in", shape=lambda x, n: shapes.real_floating(x))  # fmt: skip
erfc = special("erfc", _erfc, lambda g, out, x: g * (-TWO_OVER_SQRT_PI * exp(-(x * x))), "in")
i0 = special("i0", _i0, lambda g, out, x: g * i1(x), "in")
i1 = special("i1", _i1, lambda g, out, x: g * _i1_slope(x), "in")
erfinv = special("erfinv", _erfinv, lambda g, out, x: g * (0.8862269254527579 * exp(out * out)),
                 "out")  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import exp, where  # noqa: E402

"""Special functions NumPy lacks (and scipy, not a dependency, would give): the log-gamma
function and its derivatives (digamma, polygamma), erfc, erfcx, the inverse error function, the
Bessel functions (I0, I1 and their scaled forms, J0, J1, Y0, Y1, K0, K1, Ai, j0), the Hurwitz
zeta function, the regularized incomplete gamma functions and the classical orthogonal
polynomials, each an elementwise op whose gradient is the next function of its family, where
PyTorch has one (elsewhere the rule raises, naming the op). The values are NumPy (recurrences,
series and continued fractions, each element stopping where its own loop would; Cephes's
approximations as PyTorch computes them, their coefficients in `cephes`; a rational start
refined by Newton steps) or Python's `math`, element by element, where it is exact and NumPy
has nothing. They are opaque ops (`special`), run as they are between a compiled step's fused
kernels."""

from __future__ import annotations

import functools
import math

import numpy as np

from tracegrad.core.ops import cephes as C
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


def _polygamma(x, n: int):
    """The n-th derivative of psi (n >= 1): (-1)^(n+1) n! zeta(n + 1, x); for n = 1 below 0 by
    the reflection psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x). +inf at the poles."""
    if n < 1:
        raise ValueError(f"polygamma: the order must be at least 1 here (0 is digamma), got {n}")
    a, dtype = _as_float(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if n == 1:
            neg = a < 0
            y = _zeta(2.0, np.where(neg, 1.0 - a, a))
            frac = a - np.floor(a)
            out = np.where(neg, (math.pi / np.sin(math.pi * frac)) ** 2 - y, y)
            out = np.where(neg & (frac == 0), np.inf, out)
        else:
            poles = (a <= 0) & (a == np.floor(a))
            out = (-1.0) ** (n + 1) * math.factorial(n) * _zeta(n + 1.0, a)
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


def _chbevl(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Clenshaw's sum of a Chebyshev series in x (Cephes's chbevl), elementwise."""
    b0, b1, b2 = np.full_like(x, coefficients[0]), np.zeros_like(x), np.zeros_like(x)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _scaled_bessel_i(x, order: int):
    """exp(-|x|) I0(x) or exp(-|x|) I1(x) by Cephes's Chebyshev series on [0, 8] and beyond
    (PyTorch's i0e and i1e): finite where I0 and I1 overflow (from |x| = 713)."""
    a, dtype = _as_float(x)
    ax = np.abs(a)
    near, far = (C.I0E_A, C.I0E_B) if order == 0 else (C.I1E_A, C.I1E_B)
    with np.errstate(all="ignore"):
        out = np.where(ax <= 8.0, _chbevl(ax / 2.0 - 2.0, near) * (ax if order else 1.0),
                       _chbevl(32.0 / ax - 2.0, far) / np.sqrt(ax))  # fmt: skip
    return (np.where(a < 0, -out, out) if order else out).astype(dtype, copy=False)


def _i1(x):
    """I1(x) = exp(|x|) i1e(x), as Cephes and PyTorch compute it (inf where exp overflows)."""
    a, dtype = _as_float(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.exp(np.abs(a)) * _scaled_bessel_i(a, 1)).astype(dtype, copy=False)


def _i1_slope(x):
    """d/dx I1(x) = I0(x) - I1(x) / x, 1/2 at 0 (composed of ops, so it differentiates again)."""
    zero = x == 0.0
    return where(zero, 0.5, i0(x) - i1(x) / where(zero, 1.0, x))


def _floats(*xs) -> tuple[list[np.ndarray], np.dtype]:
    """The operands broadcast, as flat float64 copies, and the result's dtype (`_as_float`'s)."""
    arrays = np.broadcast_arrays(*map(np.asarray, xs))
    dtype = np.result_type(*arrays)
    dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    return [a.astype(np.float64).ravel() for a in arrays], dtype


def _elementwise(f, typed: bool = False):
    """`f` of flat float64 arrays (and of the result's dtype, if `typed`), as an op's impl:
    operands broadcast, the result in their dtype, IEEE's warnings silenced (the infinities and
    nans are the values meant)."""

    @functools.wraps(f)
    def impl(*xs):
        arrays, dtype = _floats(*xs)
        shape = np.broadcast_shapes(*(np.shape(x) for x in xs))
        with np.errstate(all="ignore"):
            out = f(*arrays, dtype=dtype) if typed else f(*arrays)
            return np.asarray(out, np.float64).reshape(shape).astype(dtype, copy=False)

    return impl


def _exp_square(x: np.ndarray) -> np.ndarray:
    """exp(x^2) to its last bits: x = hi + lo with hi of 26 bits (Veltkamp's split), so hi^2 is
    exact and x^2 - hi^2 = lo (x + hi); a rounded x^2 would be off by x^2 ulps in the exponent."""
    hi = x * 134217729.0
    hi = hi - (hi - x)
    return np.exp(hi * hi) * np.exp((x - hi) * (x + hi))


@_elementwise
def _erfcx(x):
    """exp(x^2) erfc(x): `_exp_square` times math.erfc up to 26; beyond, where erfc underflows,
    Laplace's continued fraction 1 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / ...))), twelve
    levels (its error there is below 1e-25); below 0, 2 exp(x^2) - erfcx(-x) (inf below -26.7,
    PyTorch's)."""
    ax = np.abs(x)
    fraction = ax
    for k in range(12, 0, -1):
        fraction = ax + 0.5 * k / fraction
    near = np.minimum(ax, 26.0)
    out = np.where(ax > 26.0, 0.5641895835477563 / fraction,
                   _exp_square(near) * np.asarray(_erfc_object(near), np.float64))  # fmt: skip
    out = np.where(x < 0, 2.0 * _exp_square(np.maximum(x, -26.7)) - out, out)
    return np.where(x < -26.7, math.inf, out)


MACHEP = 1.11022302462515654042e-16  # 2^-53, Cephes's
ITERATIONS = 2000  # Cephes's bound on the series and continued fractions below


@_elementwise
def _zeta(x, q):
    """The Hurwitz zeta function sum_k (k + q)^-x, by Cephes's (PyTorch's) method: terms summed
    until one is below MACHEP of the sum, or at least nine and up to q + k > 9, then the
    Euler-Maclaurin tail (`ZETA_TAIL`). inf at x = 1 and at the poles q = 0, -1, ...; nan for
    x < 1, and for q < 0 unless x is an integer. Large negative q take -q passes."""
    poles = (q <= 0) & (q == np.floor(q))
    out = np.select([x == 1, x < 1, poles, (q <= 0) & (x != np.floor(x))],
                    [math.inf, math.nan, math.inf, math.nan], 0.0)  # fmt: skip
    rows = np.flatnonzero(~((x <= 1) | poles | ((q <= 0) & (x != np.floor(x)))))
    x, q = x[rows], q[rows]
    s, a, b = q**-x, q.copy(), np.zeros_like(q)
    live, i = np.arange(rows.size), 0
    while live.size:  # the direct sum
        a[live] += 1.0
        b[live] = a[live] ** -x[live]
        s[live] += b[live]
        i += 1
        small = (-MACHEP * s[live] < b[live]) & (b[live] < MACHEP * s[live])
        b[live[small]] = 0.0  # summed: the tail adds nothing
        live = live[~small & ((i < 9) | (a[live] <= 9.0))]
    w, factor, k = a.copy(), np.ones_like(a), 0.0
    s += b * w / (x - 1.0) - 0.5 * b
    live = np.flatnonzero(b != 0.0)
    for c in ZETA_TAIL:
        factor[live] *= x[live] + k
        b[live] /= w[live]
        t = factor[live] * b[live] / c
        s[live] += t
        factor[live] *= x[live] + k + 1.0
        b[live] /= w[live]
        k += 2.0
        live = live[~(np.abs(t / s[live]) < MACHEP)]
    out[rows] = s
    return out


LANCZOS_G = 6.024680040776729583740234375


def _gamma_factor(a, x):
    """x^a e^-x / Gamma(a), the series' and the fraction's factor: by lgamma where x is far from
    a, else by the Lanczos sum (Boost's, as SciPy and PyTorch), which keeps its digits where
    x^a and e^-x nearly cancel."""
    direct = np.exp(a * np.log(x) - x - _lgamma(a))
    y = np.where(a > 1.0, 1.0 / a, a)  # the rational function in 1/a above 1
    num, den = C.LANCZOS_NUM, C.LANCZOS_DENOM
    lanczos = np.where(a > 1.0, _polynomial(y, num[::-1]) / _polynomial(y, den[::-1]),
                       _polynomial(y, num) / _polynomial(y, den))  # fmt: skip
    fac = a + LANCZOS_G - 0.5
    scale = np.sqrt(fac / math.e) / lanczos
    ratio = (x - a - LANCZOS_G + 0.5) / fac
    big = np.exp(a * (np.log1p(ratio) - ratio) + x * (0.5 - LANCZOS_G) / fac)
    near = np.where((a < 200) & (x < 200), np.exp(a - x) * (x / fac) ** a, big)
    return np.where(np.abs(a - x) > 0.4 * np.abs(a), direct, scale * near)


def _lower_series(a, x):
    """P(a, x) by its power series x^a e^-x / Gamma(a + 1) sum_k x^k / ((a + 1) ... (a + k))
    (DLMF 8.11.4): for x below a, or small."""
    factor = _gamma_factor(a, x)
    r, c, total = a.copy(), np.ones_like(a), np.ones_like(a)
    live = np.flatnonzero(factor != 0.0)
    for _ in range(ITERATIONS):
        if not live.size:
            break
        r[live] += 1.0
        c[live] *= x[live] / r[live]
        total[live] += c[live]
        live = live[c[live] > MACHEP * total[live]]
    return total * factor / a


@functools.cache
def _lgamma1p_series() -> tuple[float, ...]:
    """(-1)^n zeta(n) / n for n = 60 down to 2, then -Euler's constant: the Taylor series of
    log Gamma(1 + b) at 0, highest power first."""
    n = np.arange(60.0, 1.0, -1.0)
    return (*((-1.0) ** n * _zeta(n, 1.0) / n), -0.5772156649015329)


def _lgamma1p(a):
    """log Gamma(1 + a) for a in (0, 1.5) to its last bits (SciPy's lgam1p): math.lgamma is
    1e-16 off near its zeros 1 and 2, a large relative error there. The Taylor series at 0 up
    to 1/2, above log(a) + log Gamma(1 + (a - 1)) (a^60 / 60 is below 1e-19 of the sum)."""
    shifted = a > 0.5
    b = np.where(shifted, a - 1.0, a)
    series = b * _polynomial(b, _lgamma1p_series())
    return np.where(shifted, np.log(a) + series, series)


def _upper_series(a, x):
    """Q(a, x) for x up to 1.1 (so a up to 1.21) by DLMF 8.7.3, which keeps the digits 1 - P
    would lose."""
    factor, total = np.ones_like(a), np.zeros_like(a)
    live = np.arange(a.size)
    for n in range(1, ITERATIONS):
        if not live.size:
            break
        factor[live] *= -x[live] / n
        term = factor[live] / (a[live] + n)
        total[live] += term
        live = live[~(np.abs(term) <= MACHEP * np.abs(total[live]))]
    power = a * np.log(x)
    return -np.expm1(power - _lgamma1p(a)) - np.exp(power - _lgamma(a)) * total


def _upper_fraction(a, x):
    """Q(a, x) for x above 1.1 and a by Legendre's continued fraction (DLMF 8.9.2), its
    convergents' numerators and denominators rescaled as they grow (Cephes's igamc)."""
    factor = _gamma_factor(a, x)
    p2, q2, p1, q1 = np.ones_like(a), x.copy(), x + 1.0, (x + 2.0 - a) * x
    out = p1 / q1
    live = np.flatnonzero(factor != 0.0)
    for c in range(1, ITERATIONS + 1):
        if not live.size:
            break
        yc, z = (1.0 - a[live] + c) * c, x[live] + 2.0 - a[live] + 2 * c
        p = p1[live] * z - p2[live] * yc
        q = q1[live] * z - q2[live] * yc
        r = p / np.where(q != 0, q, 1.0)
        t = np.where(q != 0, np.abs((out[live] - r) / r), 1.0)
        out[live] = np.where(q != 0, r, out[live])
        scale = np.where(np.abs(p) > 4.503599627370496e15, 2.22044604925031308085e-16, 1.0)
        p2[live], q2[live] = p1[live] * scale, q1[live] * scale
        p1[live], q1[live] = p * scale, q * scale
        live = live[~(t <= MACHEP)]
    return out * factor


def _temme(a, x, upper: bool):
    """P or Q for large a near x by Temme's uniform expansion (DLMF 8.12.3-4): erfc of
    eta sqrt(a / 2) (eta^2 / 2 = x/a - 1 - log(x/a)), corrected by a series in 1/a (`TEMME`)."""
    sigma = (x - a) / a
    eta = np.sign(sigma) * np.sqrt(-2.0 * (np.log1p(sigma) - sigma))
    sign = 1.0 if upper else -1.0
    total = sum(_polynomial(eta, row[::-1]) / a**k for k, row in enumerate(C.TEMME))
    tail = np.exp(-0.5 * a * eta * eta) * total / np.sqrt(2.0 * math.pi * a)
    return 0.5 * np.asarray(_erfc_object(sign * eta * np.sqrt(a / 2.0)), np.float64) + sign * tail


def _upper(a, x):
    """Q(a, x) = 1 - P(a, x) away from Temme's range, by Cephes's (PyTorch's) choice of method:
    1 - P's series where P is the smaller, else Q's series (small x) or continued fraction."""
    out = np.empty_like(a)
    lower = np.where(x > 1.1, x < a, np.where(x <= 0.5, -0.4 / np.log(x) < a, x * 1.1 < a))
    fraction = ~lower & (x > 1.1)
    series = ~lower & ~fraction
    out[lower] = 1.0 - _lower_series(a[lower], x[lower])
    out[fraction] = _upper_fraction(a[fraction], x[fraction])
    out[series] = _upper_series(a[series], x[series])
    return out


def _incomplete_gamma(upper: bool):
    """P(a, x) = gamma(a, x) / Gamma(a), the regularized lower incomplete gamma function, or Q
    = 1 - P (`upper`): SciPy's and PyTorch's values at the edges (nan for a or x below 0, P(0, x)
    = 1 for x > 0, P(a, 0) = 0, P(inf, x) = 0, P(a, inf) = 1), Temme's expansion for a above 200
    within 4.5 sqrt(a) of x (PyTorch's also from a = 20 within 0.3 a, which the series and the
    fraction cover to as many digits), else `_upper`'s methods."""

    def impl(a, x):
        edges = [(x < 0) | (a < 0), a == 0, x == 0, np.isinf(a), np.isinf(x)]
        at_edges = [math.nan, np.where(x > 0, float(not upper), math.nan), float(upper),
                    np.where(np.isinf(x), math.nan, float(upper)), float(not upper)]  # fmt: skip
        out = np.select(edges, at_edges, math.nan)
        rows = np.flatnonzero(~np.logical_or.reduce(edges) & ~np.isnan(a) & ~np.isnan(x))
        a, x = a[rows], x[rows]
        temme = (a > 200) & (np.abs(x - a) / a < 4.5 / np.sqrt(a))
        value = np.empty_like(a)
        value[temme] = _temme(a[temme], x[temme], upper)
        if upper:
            value[~temme] = _upper(a[~temme], x[~temme])
        else:  # above both 1 and a, P = 1 - Q
            complement = ~temme & (x > 1.0) & (x > a)
            value[complement] = 1.0 - _upper(a[complement], x[complement])
            series = ~temme & ~complement
            value[series] = _lower_series(a[series], x[series])
        out[rows] = value
        return out

    impl.__name__ = impl.__qualname__ = "_igammac" if upper else "_igamma"
    return _elementwise(impl)


def _gamma_draw_slope(x, a):
    """dx/da of a draw x of Gamma(a, 1) at a fixed quantile (implicit reparameterization):
    -(dP(a, x)/da) / the density. dP/da by central differences, of P or of Q = 1 - P,
    whichever is smaller there (so it keeps its relative accuracy), at a step of 1e-5 a; in
    logarithms, so a draw far in a tail, where both factors underflow, gets a finite slope."""
    h = 1e-5 * a
    lower, upper = _LOWER(a, x), _UPPER(a, x)
    dp = np.where(lower < 0.5, _LOWER(a + h, x) - _LOWER(a - h, x),
                  _UPPER(a - h, x) - _UPPER(a + h, x)) / (2.0 * h)  # fmt: skip
    log_density = (a - 1.0) * np.log(x) - x - _lgamma(a)
    slope = -np.sign(dp) * np.exp(np.log(np.abs(dp)) - log_density)
    return np.where((x > 0) & np.isfinite(upper), slope, 0.0)


TWO_OVER_PI, SQRT_TWO_OVER_PI = 0.6366197723675814, 0.7978845608028654


def _bessel_far(x, order: int, second: bool):
    """J or Y (`second`) of order 0 or 1 beyond 5, by Hankel's form sqrt(2 / (pi x)) (P cos(x -
    phase) - (5 / x) Q sin(x - phase)) (Y: sin and cos swapped, Q's sign changed) with Cephes's
    rational P and Q in 25 / x^2."""
    pp, pq, qp, qq = (C.J0_PP, C.J0_PQ, C.J0_QP, C.J0_QQ) if order == 0 else (
        C.J1_PP, C.J1_PQ, C.J1_QP, C.J1_QQ)  # fmt: skip
    w = 25.0 / (x * x) if order == 0 else 5.0 / x * (5.0 / x)
    p = _polynomial(w, pp) / _polynomial(w, pq)
    q = 5.0 / x * (_polynomial(w, qp) / _polynomial(w, qq))
    angle = x - (0.7853981633974483 if order == 0 else 2.356194490192345)
    c, s = np.cos(angle), np.sin(angle)
    return (p * s + q * c if second else p * c - q * s) * SQRT_TWO_OVER_PI / np.sqrt(x)


@_elementwise
def _bessel_j0(x):
    """J0 (Cephes's, as PyTorch's): 1 - x^2/4 below 1e-5, a rational function times its first two
    zeros' factors up to 5, Hankel's form beyond (`_bessel_far`)."""
    x = np.abs(x)
    z = x * x
    near = (z - 5.783185962946784) * (z - 30.471262343662087) * _polynomial(z, C.J0_RP) / (
        _polynomial(z, C.J0_RQ))  # fmt: skip
    return np.where(x > 5.0, _bessel_far(x, 0, False), np.where(x < 1e-5, 1.0 - z / 4.0, near))


@_elementwise
def _bessel_j1(x):
    """J1 (odd): a rational function times x and its first two zeros' factors up to 5, Hankel's
    form beyond."""
    ax = np.abs(x)
    z = ax * ax
    near = _polynomial(z, C.J1_RP) / _polynomial(z, C.J1_RQ) * ax * (z - 14.681970642123893) * (
        z - 49.2184563216946)  # fmt: skip
    out = np.where(ax > 5.0, _bessel_far(ax, 1, False), near)
    return np.where(x < 0, -out, out)


@_elementwise
def _bessel_y0(x):
    """Y0: a rational function plus (2/pi) log(x) J0(x) up to 5, Hankel's form beyond; -inf at
    0, nan below."""
    near = _polynomial(x * x, C.Y0_YP) / _polynomial(x * x, C.Y0_YQ) + (
        TWO_OVER_PI * np.log(x) * _bessel_j0(x))  # fmt: skip
    near = np.where(x == 0, -math.inf, np.where(x < 0, math.nan, near))
    return np.where(x > 5.0, _bessel_far(x, 0, True), near)


@_elementwise
def _bessel_y1(x):
    """Y1: x times a rational function plus (2/pi) (J1(x) log(x) - 1/x) up to 5, Hankel's form
    beyond; -inf at 0, nan below."""
    near = x * (_polynomial(x * x, C.Y1_YP) / _polynomial(x * x, C.Y1_YQ)) + TWO_OVER_PI * (
        _bessel_j1(x) * np.log(x) - 1.0 / x)  # fmt: skip
    near = np.where(x == 0, -math.inf, np.where(x < 0, math.nan, near))
    return np.where(x > 5.0, _bessel_far(x, 1, True), near)


def _bessel_k(order: int, scaled: bool):
    """K0 or K1 (times exp(x) if `scaled`), Cephes's: up to 2, a Chebyshev series in x^2 - 2 plus
    -log(x/2) I0(x) (K1: log(x/2) I1(x) plus the series over x); beyond, exp(-x) / sqrt(x) times
    one in 8/x - 2. inf at 0, nan below."""
    near, far = (C.K0_A, C.K0_B) if order == 0 else (C.K1_A, C.K1_B)

    def impl(x):
        series = _chbevl(x * x - 2.0, near)
        if order == 0:
            small = series - np.log(0.5 * x) * np.i0(x)
        else:
            small = np.log(0.5 * x) * _i1(x) + series / x
        big = _chbevl(8.0 / x - 2.0, far) / np.sqrt(x)
        out = np.where(x <= 2.0, small * np.exp(x), big) if scaled else np.where(
            x <= 2.0, small, np.exp(-x) * big)  # fmt: skip
        return np.where(x == 0, math.inf, np.where(x < 0, math.nan, out))

    impl.__name__ = impl.__qualname__ = f"_{'scaled_' if scaled else ''}bessel_k{order}"
    return _elementwise(impl)


@_elementwise
def _airy_ai(x):
    """The Airy function Ai, Cephes's (PyTorch's): its power series between -2.09 and 2.09, an
    exponentially falling asymptotic form above (0 beyond 103.892), an oscillating one below;
    nan at +-inf. PyTorch's oscillating form drops its denominators' leading 1 (Cephes's
    p1evl), off by up to 2e-5 just below -2.09 (1e-13 at -5): this one keeps it."""
    root = np.sqrt(np.abs(x))
    zeta = 2.0 * np.abs(x) * root / 3.0
    above = 0.5641895835477563 * (_polynomial(1.0 / zeta, C.AIRY_AN) / _polynomial(
        1.0 / zeta, C.AIRY_AD)) / (2.0 * np.sqrt(root) * np.exp(zeta))  # fmt: skip
    z = 1.0 / zeta
    zz = z * z
    phase = zeta + 0.25 * math.pi
    f = 1.0 + zz * _polynomial(zz, C.AIRY_AFN) / _polynomial(zz, C.AIRY_AFD)
    g = z * _polynomial(zz, C.AIRY_AGN) / _polynomial(zz, C.AIRY_AGD)
    below = 0.5641895835477563 / np.sqrt(root) * (np.sin(phase) * f - np.cos(phase) * g)
    middle = (np.abs(x) < 2.09) | (x == -2.09)
    f, g, m, n = np.ones_like(x), x.copy(), np.ones_like(x), x.copy()
    cube, k = x * x * x, 1.0
    live = np.flatnonzero(middle)
    while live.size:  # Ai = c1 f(x) - c2 g(x), the two series in x^3
        m[live] *= cube[live] / (k + 1.0) / (k + 2.0)
        n[live] *= cube[live] / (k + 2.0) / (k + 3.0)
        f[live] += m[live]
        g[live] += n[live]
        k += 3.0
        live = live[np.abs(m[live] / f[live]) > 2.220446049250313e-16]
    series = 0.3550280538878172 * f - 0.2588194037928068 * g
    out = np.where(x < -2.09, below, np.where(x >= 2.09, above, series))
    return np.where(np.isinf(x), math.nan, np.where(x > 103.892, 0.0, out))


@_elementwise
def _spherical_bessel_j0(x):
    """sin(x) / x, by its Taylor series below 1/2 (PyTorch's); 0 at +-inf."""
    z = x * x
    series = _polynomial(z, (1 / 6227020800, -1 / 39916800, 1 / 362880, -1 / 5040, 1 / 120,
                             -1 / 6, 1.0))  # fmt: skip
    out = np.where(np.abs(x) < 0.5, series, np.sin(x) / x)
    return np.where(np.isinf(x), 0.0, out)


def _degrees(n: np.ndarray) -> np.ndarray:
    """PyTorch's int64 cast of the degree: truncated; nan, +-inf and those beyond int64 become
    its "integer indefinite", a negative degree (whose polynomial is 0)."""
    return np.where(np.isfinite(n) & (np.abs(n) < 2.0**63), np.trunc(n), -1.0).astype(np.int64)


def _recurrence(n: np.ndarray, first: np.ndarray, step) -> np.ndarray:
    """The degree-n term of p_0 = 1, p_1 = `first`, p_k+1 = step(k, rows, p_k-1, p_k), each
    element run to its own degree (PyTorch's loops; an element whose value became nan stops, as
    it stays nan); 0 for n < 0."""
    p, q = np.ones_like(first), first.copy()
    live, k = np.flatnonzero(n >= 2), 1
    while live.size:
        r = step(k, live, p[live], q[live])
        p[live], q[live] = q[live], r
        k += 1
        live = live[(n[live] > k) & ~np.isnan(r)]
    return np.where(n < 0, 0.0, np.where(n == 0, 1.0, q))


def _polynomials(f, typed: bool = False):
    """A family's impl, `f(x, n)` of flat float64 x and int64 degrees (`_degrees`)."""

    def impl(x, n, **dtype):
        return f(x, _degrees(n), **dtype)

    impl.__name__ = impl.__qualname__ = f.__name__
    return _elementwise(impl, typed)


def _chebyshev(kind: str, shifted: bool):
    """T, U, V or W (the Chebyshev polynomials of the four kinds), of y = x or, `shifted`, of
    2x - 1, as PyTorch computes them: their closed values at y = +-1, the trigonometric forms
    inside (-1, 1) above degree 6 or 8 (shifted: 6, W 4), the recurrence p_k+1 = 2y p_k - p_k-1
    from p_1 = y, 2y, 2y - 1, 2y + 1 otherwise."""
    above = (4 if kind == "w" else 6) if shifted else (6 if kind == "t" else 8)

    def f(x, n):
        y = x + x - 1.0 if shifted else x
        first = {"t": y, "u": y + y, "v": y + y - 1.0, "w": y + y + 1.0}[kind]
        out = _recurrence(n, first, lambda k, rows, p, q: (y[rows] + y[rows]) * q - p)
        m, theta = n.astype(np.float64), np.arccos(y)
        sign = np.where(n % 2 == 1, -1.0, 1.0)
        if kind == "t":
            trig = np.cos(m * theta)
        elif kind == "u":
            trig = np.sin((m + 1.0) * theta) / np.sin(theta)
        elif kind == "v":  # at y = -1 to rounding: the value there
            half = np.sin(theta / 2.0)
            trig = np.where(half != 1.0, np.cos((m + 0.5) * theta) / np.cos(theta / 2.0),
                            sign * (m + m + 1.0))  # fmt: skip
        else:  # at y = 1 to rounding: the value there (shifted: PyTorch's +-1)
            half = np.cos(theta / 2.0)
            trig = np.where(half != 1.0, np.sin((m + 0.5) * theta) / np.sin(theta / 2.0),
                            sign if shifted else m + m + 1.0)  # fmt: skip
        out = np.where((n > above) & (np.abs(y) < 1.0), trig, out)
        at_one = {"t": 1.0, "u": m + 1.0, "v": 1.0, "w": m + m + 1.0}[kind]
        at_minus_one = sign * {"t": 1.0, "u": m + 1.0, "v": m + m + 1.0, "w": 1.0}[kind]
        one, minus_one = (x == 1.0, x == 0.0) if shifted else (x == 1.0, x == -1.0)
        out = np.where(one, at_one, np.where(minus_one, at_minus_one, out))
        return np.where(n < 0, 0.0, out)

    f.__name__ = f"_{'shifted_' if shifted else ''}chebyshev_{kind}"
    return _polynomials(f)


def _hermite(probabilists: bool):
    """H_n (physicists': H_k+1 = 2x H_k - 2k H_k-1) or He_n (probabilists': He_k+1 = x He_k - k
    He_k-1); nan above degree 128 in float32 and 512 in float64 (PyTorch's limits)."""

    def f(x, n, dtype):
        limit = 512 if dtype == np.float64 else 128
        degrees = np.where(n > limit, 1, n)
        if probabilists:
            out = _recurrence(degrees, x, lambda k, rows, p, q: x[rows] * q - k * p)
        else:
            two_x = x + x
            out = _recurrence(degrees, two_x, lambda k, rows, p, q: two_x[rows] * q - 2 * k * p)
        return np.where(n > limit, math.nan, out)

    f.__name__ = "_hermite_he" if probabilists else "_hermite_h"
    return _polynomials(f, typed=True)


@_polynomials
def _laguerre(x, n):
    """L_n: (k + 1) L_k+1 = (2k + 1 - x) L_k - k L_k-1; 1 at x = 0."""
    out = _recurrence(n, 1.0 - x, lambda k, rows, p, q: ((2 * k + (1.0 - x[rows])) * q - k * p)
                      / (k + 1))  # fmt: skip
    return np.where((x == 0) & (n >= 0), 1.0, out)


@_polynomials
def _legendre(x, n):
    """P_n: (k + 1) P_k+1 = (2k + 1) x P_k - k P_k-1; 1 and (-1)^n at x = 1 and -1."""
    out = _recurrence(n, x.copy(), lambda k, rows, p, q: ((2 * k + 1) * x[rows] * q - k * p)
                      / (k + 1))  # fmt: skip
    ends = np.where((x == 1.0) | (n % 2 == 0), 1.0, -1.0)
    return np.where((np.abs(x) == 1.0) & (n >= 0), ends, out)


def special(name, impl, *vjp, saves="in", shape=shapes.real_floating):
    """An elementwise function, recorded as opaque: its value is many passes (or a Python call
    per element), not the one pass an elementwise op is taken to cost, so remat must not
    recompute it in backward to save memory; being pure, the memory budget may rebuild it.
    Of real values only, as PyTorch's (complex ones lost their imaginary parts). Without a rule
    (`vjp` empty), differentiating it raises (`no_derivative`)."""
    rules = vjp or (no_derivative(name),) * (2 if shape is shapes.real_floating_pair else 1)
    return Primitive(name, impl, shape, rules, saves if vjp else "", kind=Kind.OPAQUE,
                     raises=False, rerun=True, promotion="float")  # fmt: skip


def no_derivative(name: str):
    """The rule of an input PyTorch has no derivative in: it raises, naming the op, rather than
    give no gradient silently."""

    def rule(*args, **params):
        raise NotImplementedError(f"the derivative for '{name}' is not implemented (nor is it in "
                                  "PyTorch)")  # fmt: skip

    return rule


def pair(name, impl, *vjp):
    """A special function of two arguments, broadcast (zeta, the incomplete gamma functions, the
    orthogonal polynomials of a degree)."""
    return special(name, impl, *vjp, shape=shapes.real_floating_pair)


def _i0e_slope(x, out):
    """d/dx i0e(x) = i1e(x) - sign(x) i0e(x)."""
    return i1e(x) - sign(x) * out


def _i1e_slope(x, out):
    """d/dx i1e(x) = i0e(x) - i1e(x) (sign(x) + 1/x), 1/2 at 0 (PyTorch's)."""
    zero = x == 0.0
    return where(zero, 0.5, i0e(x) - out * (sign(x) + 1.0 / where(zero, 1.0, x)))


def _gamma_density(a, x):
    """x^(a-1) e^-x / Gamma(a): d/dx of P(a, x)."""
    return exp((a - 1.0) * log(x) - x - lgamma(a))


lgamma = special("lgamma", _lgamma, lambda g, out, x: g * digamma(x))
digamma = special("digamma", _digamma, lambda g, out, x: g * polygamma(x, n=1))
polygamma = special("polygamma", _polygamma, lambda g, out, x, n: g * polygamma(x, n=n + 1),
                    shape=lambda x, n: shapes.real_floating(x))  # fmt: skip
erfc = special("erfc", _erfc, lambda g, out, x: g * (-TWO_OVER_SQRT_PI * exp(-(x * x))))
i0 = special("i0", _i0, lambda g, out, x: g * i1(x))
i1 = special("i1", _i1, lambda g, out, x: g * _i1_slope(x))
erfinv = special("erfinv", _erfinv, lambda g, out, x: g * (0.8862269254527579 * exp(out * out)),
                 saves="out")  # fmt: skip
i0e = special("i0e", lambda x: _scaled_bessel_i(x, 0), lambda g, out, x: g * _i0e_slope(x, out),
              saves="in+out")  # fmt: skip
i1e = special("i1e", lambda x: _scaled_bessel_i(x, 1), lambda g, out, x: g * _i1e_slope(x, out),
              saves="in+out")  # fmt: skip
erfcx = special("erfcx", _erfcx, lambda g, out, x: g * (2.0 * x * out - TWO_OVER_SQRT_PI),
                saves="in+out")  # fmt: skip
zeta = pair("zeta", _zeta, no_derivative("zeta"),
            lambda g, out, x, q: sum_to(g * -x * zeta(x + 1.0, q), q.shape))  # fmt: skip
_LOWER, _UPPER = _incomplete_gamma(upper=False), _incomplete_gamma(upper=True)
igamma = pair("igamma", _LOWER, no_derivative("igamma: input"),
              lambda g, out, a, x: sum_to(g * _gamma_density(a, x), x.shape))  # fmt: skip
igammac = pair("igammac", _UPPER, no_derivative("igammac: input"),
               lambda g, out, a, x: sum_to(g * -_gamma_density(a, x), x.shape))  # fmt: skip
# the gradient of gamma draws in their concentration (PyTorch's `_standard_gamma_grad`)
gamma_draw_slope = pair("gamma_draw_slope", _elementwise(_gamma_draw_slope))
# PyTorch's functions without derivatives (their results do not require grad: frontend.special)
bessel_j0 = special("bessel_j0", _bessel_j0)
bessel_j1 = special("bessel_j1", _bessel_j1)
bessel_y0 = special("bessel_y0", _bessel_y0)
bessel_y1 = special("bessel_y1", _bessel_y1)
modified_bessel_k0 = special("modified_bessel_k0", _bessel_k(0, scaled=False))
modified_bessel_k1 = special("modified_bessel_k1", _bessel_k(1, scaled=False))
scaled_modified_bessel_k0 = special("scaled_modified_bessel_k0", _bessel_k(0, scaled=True))
scaled_modified_bessel_k1 = special("scaled_modified_bessel_k1", _bessel_k(1, scaled=True))
airy_ai = special("airy_ai", _airy_ai)
spherical_bessel_j0 = special("spherical_bessel_j0", _spherical_bessel_j0)
chebyshev_polynomial_t = pair("chebyshev_polynomial_t", _chebyshev("t", shifted=False))
chebyshev_polynomial_u = pair("chebyshev_polynomial_u", _chebyshev("u", shifted=False))
chebyshev_polynomial_v = pair("chebyshev_polynomial_v", _chebyshev("v", shifted=False))
chebyshev_polynomial_w = pair("chebyshev_polynomial_w", _chebyshev("w", shifted=False))
shifted_chebyshev_polynomial_t = pair("shifted_chebyshev_polynomial_t", _chebyshev("t", True))
shifted_chebyshev_polynomial_u = pair("shifted_chebyshev_polynomial_u", _chebyshev("u", True))
shifted_chebyshev_polynomial_v = pair("shifted_chebyshev_polynomial_v", _chebyshev("v", True))
shifted_chebyshev_polynomial_w = pair("shifted_chebyshev_polynomial_w", _chebyshev("w", True))
hermite_polynomial_h = pair("hermite_polynomial_h", _hermite(probabilists=False))
hermite_polynomial_he = pair("hermite_polynomial_he", _hermite(probabilists=True))
laguerre_polynomial_l = pair("laguerre_polynomial_l", _laguerre)
legendre_polynomial_p = pair("legendre_polynomial_p", _legendre)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import exp, log, sign, where  # noqa: E402
from tracegrad.core.ops.views import sum_to  # noqa: E402

"""Special functions with PyTorch's signatures (`torch.special` and the top-level ones), composed
of the op table's: lgamma, digamma, polygamma, erfc, erfinv, the Bessel functions, zeta, the
incomplete gamma functions and the orthogonal polynomials are records there (core/ops/
special.py), with their gradients; these add the arguments and the limits PyTorch gives
(`polygamma(n, x)` takes the order first, `xlogy(0, y)` is 0, `logit(x, eps)` clamps), and
PyTorch's lack of a derivative (`bessel_j0`'s result does not require grad)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.ops import shapes
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import clamp, pytorch_keywords
from tracegrad.frontend.promotion import result_type
from tracegrad.frontend.tensor import Tensor, as_tensor, get_default_dtype

SQRT_HALF = 0.7071067811865476

# the op table's, under PyTorch's top-level names (opaque ops: not exported with the
# elementwise ones)
lgamma, digamma, erfc, erfinv, i0 = P.lgamma, P.digamma, P.erfc, P.erfinv, P.i0
igamma, igammac = P.igamma, P.igammac  # P(a, x) and Q(a, x): `torch.special.gammainc(c)`


def _floating(x: Any, op: str) -> Tensor:
    """x as floats (integers in the default float dtype, as PyTorch's); complex values refused
    (as PyTorch's), whose imaginary parts were dropped."""
    x = as_tensor(x)
    if x.dtype.kind == "c":
        raise NotImplementedError(f"{op} is not implemented for complex tensors ({x.dtype})")
    return x if x.dtype.kind == "f" else x.astype(get_default_dtype())


def _same_float(input: Any, other: Any) -> tuple[Tensor, Tensor]:
    """Both operands in their promoted float dtype (the default float for integers), so that
    a float16 x with an integer y stays float16, as PyTorch's."""
    x, y = as_tensor(input), as_tensor(other)
    dtype = result_type(x, y)
    dtype = dtype if dtype.kind in "fc" else get_default_dtype()
    return tuple(t if t.dtype == dtype else t.astype(dtype) for t in (x, y))


@pytorch_keywords
def polygamma(n: int, input: Any) -> Tensor:
    """The n-th derivative of digamma (n = 0 is digamma itself), PyTorch's argument order."""
    if int(n) != n or n < 0:
        raise ValueError(f"polygamma: n must be a non-negative integer, got {n!r}")
    return P.digamma(input) if n == 0 else P.polygamma(input, n=int(n))


@pytorch_keywords
def mvlgamma(input: Any, p: int) -> Tensor:
    """The multivariate log-gamma function of dimension p: p(p-1)/4 log(pi) + sum_j lgamma(x -
    j/2), j < p (PyTorch requires x > (p - 1) / 2; so does this function's meaning)."""
    x = _floating(input, "mvlgamma")
    out = sum(P.lgamma(x - 0.5 * j) for j in range(int(p)))
    return out + p * (p - 1) / 4 * math.log(math.pi)


@pytorch_keywords
def xlogy(input: Any, other: Any) -> Tensor:
    """x * log(y), 0 where x is 0 (unless y is nan), as PyTorch's: the entropy's 0 log 0 = 0.
    Where x is 0 and log y is not finite, y is replaced by 1 before the log, so the gradient is
    finite; elsewhere x's gradient is log y, also where x is 0 (PyTorch's)."""
    x, y = _same_float(input, other)
    undefined = (x == 0) & ((y <= 0) | (y == math.inf))
    return x * P.log(P.where(undefined, 1.0, y))


def xlog1py(input: Any, other: Any) -> Tensor:
    """x * log1p(y), 0 where x is 0 (unless y is nan), with `xlogy`'s gradients."""
    x, y = _same_float(input, other)
    undefined = (x == 0) & ((y <= -1) | (y == math.inf))
    return x * P.log1p(P.where(undefined, 0.0, y))


def entr(input: Any) -> Tensor:
    """-x log x for x > 0, 0 at 0, -inf below (the entropy's summand)."""
    x = _floating(input, "entr")
    positive = x > 0
    inner = -(x * P.log(P.where(positive, x, 1.0)))
    return P.where(positive, inner, P.where(x == 0, 0.0, P.where(x < 0, -math.inf, x)))


@pytorch_keywords
def logit(input: Any, eps: float | None = None) -> Tensor:
    """log(p / (1 - p)), with p clamped to [eps, 1 - eps] first if eps is given."""
    x = _floating(input, "logit")
    x = x if eps is None else clamp(x, eps, 1.0 - eps)
    return P.log(x / (1.0 - x))


def ndtr(input: Any) -> Tensor:
    """The standard normal CDF, by erfc, so that the lower tail keeps its relative accuracy."""
    return 0.5 * P.erfc(-SQRT_HALF * _floating(input, "ndtr"))


def ndtri(input: Any) -> Tensor:
    """The standard normal quantile, sqrt(2) erfinv(2p - 1): 2p - 1 rounds away probabilities
    below about 1e-16 (they give -inf)."""
    return math.sqrt(2.0) * P.erfinv(2.0 * _floating(input, "ndtri") - 1.0)


def _log_ndtr_tail(x: Tensor) -> Tensor:
    """log Phi(x) for x << 0 by the asymptotic series -x^2/2 - log(-x) - log(2 pi)/2 +
    log(1 - 1/x^2 + 3/x^4 - ...), ten terms (Phi itself underflows there)."""
    z = 1.0 / (x * x)
    series, term = 1.0, 1.0
    for k in range(1, 11):
        term = term * (-(2 * k - 1)) * z
        series = series + term
    return -0.5 * x * x - P.log(-x) - 0.5 * math.log(2 * math.pi) + P.log(series)


def log_ndtr(input: Any) -> Tensor:
    """log of the standard normal CDF, accurate far into the lower tail: log(ndtr(x)) down to
    -20 (-10 in float32), the asymptotic series below."""
    x = _floating(input, "log_ndtr")
    cut = -20.0 if x.dtype == np.float64 else -10.0
    tail = x < cut
    far = _log_ndtr_tail(P.where(tail, x, cut))
    near = P.log(ndtr(P.where(tail, cut, x)))
    return P.where(tail, far, near)


def _without_derivative(op: Any, name: str = "") -> Any:
    """PyTorch's `op`, which has no derivative: its result does not require grad, so that a
    backward through it alone raises, as PyTorch's does, and other paths' gradients ignore it
    (the op's own rule would raise: `special.no_derivative`)."""

    def unary(input: Any) -> Tensor:
        with no_grad():
            return op(input)

    def polynomial(input: Any, n: Any) -> Tensor:
        with no_grad():
            return op(input, n)

    call = polynomial if op.rule is shapes.real_floating_pair else unary
    call.__name__ = call.__qualname__ = name or op.name
    call.__doc__ = f"`torch.special.{call.__name__}`: the op `{op.name}`, without gradient."
    return pytorch_keywords(call)


(bessel_j0, bessel_j1, bessel_y0, bessel_y1, modified_bessel_k0, modified_bessel_k1,
 scaled_modified_bessel_k0, scaled_modified_bessel_k1, airy_ai, spherical_bessel_j0,
 chebyshev_polynomial_t, chebyshev_polynomial_u, chebyshev_polynomial_v, chebyshev_polynomial_w,
 shifted_chebyshev_polynomial_t, shifted_chebyshev_polynomial_u, shifted_chebyshev_polynomial_v,
 shifted_chebyshev_polynomial_w, hermite_polynomial_h, hermite_polynomial_he,
 laguerre_polynomial_l, legendre_polynomial_p) = map(
    _without_derivative,
    (P.bessel_j0, P.bessel_j1, P.bessel_y0, P.bessel_y1, P.modified_bessel_k0,
     P.modified_bessel_k1, P.scaled_modified_bessel_k0, P.scaled_modified_bessel_k1, P.airy_ai,
     P.spherical_bessel_j0, P.chebyshev_polynomial_t, P.chebyshev_polynomial_u,
     P.chebyshev_polynomial_v, P.chebyshev_polynomial_w, P.shifted_chebyshev_polynomial_t,
     P.shifted_chebyshev_polynomial_u, P.shifted_chebyshev_polynomial_v,
     P.shifted_chebyshev_polynomial_w, P.hermite_polynomial_h, P.hermite_polynomial_he,
     P.laguerre_polynomial_l, P.legendre_polynomial_p))  # fmt: skip
modified_bessel_i0 = _without_derivative(P.i0, "modified_bessel_i0")
modified_bessel_i1 = _without_derivative(P.i1, "modified_bessel_i1")

__all__ = ["digamma", "erfc", "erfinv", "i0", "igamma", "igammac", "lgamma", "logit", "mvlgamma",
           "polygamma", "xlogy"]  # fmt: skip

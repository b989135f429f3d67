"""Elementwise ops: each result element from the same-index elements of the (broadcast) inputs.
Each has a scalar template, so a fused kernel inlines it with its neighbours."""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, Primitive


def _where_rule(c, a, b):
    if c.dtype != np.bool_:
        raise ValueError(f"condition must be bool, not {c.dtype}")
    return shapes.broadcast(c, a, b), np.result_type(a.dtype, b.dtype)


def _where(c, x, y):
    """np.where, as a select of bits where the operands share a 4- or 8-byte dtype: NumPy's
    loop branches on each element, which a mask without a pattern (a ReLU's gradient) sends the
    wrong way half the time (docs/benchmarks.md has the figures). Python numbers stay weak
    (float32 beside 0.0 is float32), as in np.where."""
    dtype = np.result_type(x, y)
    c = np.asarray(c)
    if not _selects_bits(c.dtype, c.size, dtype):
        return np.where(c, x, y)
    bits = np.dtype(f"u{dtype.itemsize}")
    x, y = (np.asarray(a, dtype).view(bits) for a in (x, y))
    mask = c.astype(bits)
    into = mask if mask.shape == np.broadcast_shapes(mask.shape, x.shape, y.shape) else None
    if x.ndim == 0 and x == 0:  # where(c, 0.0, y), a ReLU's gradient: +0.0 is no bits
        mask -= 1  # all ones where c fails
        return np.bitwise_and(y, mask, out=into).view(dtype)
    np.negative(mask, out=mask)  # all ones where c holds
    if y.ndim == 0 and y == 0:
        return np.bitwise_and(x, mask, out=into).view(dtype)
    out = np.bitwise_and(np.bitwise_xor(x, y), mask, out=into)
    out ^= y
    return out.view(dtype)


SELECT_MIN = 1 << 12  # elements: below, NumPy's one call costs less than the select's five


def _selects_bits(condition: np.dtype, size: int, dtype: np.dtype) -> bool:
    return (
        condition == np.bool_
        and size >= SELECT_MIN
        and dtype.kind in "fiu"
        and (dtype.itemsize in (4, 8))
    )


def _where_scratch(ins, attrs) -> int:
    """The select's temporaries, which the memory plan counts: x ^ y, as large as the result,
    and the mask, unless the result takes its buffer."""
    c, x, y = ins
    shape, dtype = _where_rule(c, x, y)
    if not _selects_bits(c.dtype, c.size, dtype):
        return 0
    return (math.prod(shape) + (0 if c.shape == shape else c.size)) * dtype.itemsize


def sigmoid_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow, and small results keep their relative accuracy
    (0.5 * (tanh(x / 2) + 1) is 0 below -17 in float32, so log(sigmoid(-20)) was -inf): the
    same formula as the kernels' float32 sigmoid. e = exp(-|x|), then 1 / (1 + e) where x >= 0,
    e / (1 + e) elsewhere: exp(min(x, 0)) / (1 + e), whose numerator is e or exactly 1 (a
    second exp: a masked `np.copyto` of 1 was slower than all the other passes together,
    docs/kernels.md)."""
    np.abs(x, out=out)
    np.negative(out, out=out)
    np.exp(out, out=out)
    denominator = out + 1
    np.exp(np.minimum(x, 0, out=out), out=out)
    return np.divide(out, denominator, out=out)


# float32 erf as Eigen's `generic_fast_erf_float`: x p(x^2) / q(x^2), p's coefficients of x^1
# to x^13, q's of x^0 to x^8, on x clamped to [-4, 4] (float32 erf is 1 from 3.92). The Numba
# kernels' `fastmath.erf_f32` evaluates the same function; docs/kernels.md has its error bound.
ERF_F32_CLAMP = 4.0
ERF_F32_P = (-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04,
             -5.69250639462346e-05, -2.10102402082508e-06, 2.77068142495902e-08,
             -2.72614225801306e-10)  # fmt: skip
ERF_F32_Q = (-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03,
             -2.13374055278905e-04, -1.45660718464996e-05)  # fmt: skip


def _erf(x):
    """erf: float32 by the rational function above, a few passes of NumPy over the array (as
    the kernels compute it; Python's math.erf per element dominated exact GELU's eager steps);
    other dtypes by `erf_f64` (NumPy has no erf)."""
    x = np.asarray(x)
    if x.dtype == np.float32:
        return _by_blocks(_erf_f32)(x)
    return erf_f64(x).astype(x.dtype if x.dtype.kind == "f" else np.float64, copy=False)


# float64 erf by W. J. Cody's rational approximations (Math. Comp. 23, 1969; his CALERF): erf
# itself below 0.46875, erfc = exp(-x^2) R(x) above, with R in 1/x^2 past 4. Within 4 ulp of
# math.erf (tests/core/ops/test_elementwise.py), and a dozen NumPy passes where math.erf per
# element was nearly all of a float64 GELU's time. (erfinv's Newton steps keep math.erf: they
# invert it to its last bit.)
_CODY_ERF = ((3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
              3.20937758913846947e03, 1.85777706184603153e-1),
             (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
              2.84423683343917062e03))  # fmt: skip
_CODY_ERFC = ((5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
               2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
               2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8),
              (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
               1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
               3.43936767414372164e03, 1.23033935480374942e03))  # fmt: skip
_CODY_TAIL = ((3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
               1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2),
              (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
               6.05183413124413191e-2, 2.33520497626869185e-3))  # fmt: skip


def _cody_ratio(z: np.ndarray, coefficients: tuple) -> np.ndarray:
    """Cody's P(z) / Q(z): P's last coefficient leads, Q is monic."""
    num, den = coefficients
    k = len(den) - 1
    p, q = num[-1] * z, z
    for i in range(k):
        p, q = (p + num[i]) * z, (q + den[i]) * z
    return (p + num[k]) / (q + den[k])


def erf_f64(x: Any) -> np.ndarray:
    """erf in float64 (see `_CODY_ERF`)."""
    x = np.asarray(x, np.float64)
    y, out = np.abs(x), np.empty(x.shape)
    small = y <= 0.46875
    out[small] = x[small] * _cody_ratio(x[small] ** 2, _CODY_ERF)
    y = y[~small]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        z = 1 / (y * y)
        tail = (0.56418958354775628695 - z * _cody_ratio(z, _CODY_TAIL)) / y
        ratio = np.where(y <= 4, _cody_ratio(y, _CODY_ERFC), tail)
        head = np.trunc(y * 16) / 16  # exp(-y^2) as two factors: no cancellation in y^2
        erfc = np.exp(-head * head) * np.exp(-(y - head) * (y + head)) * ratio
    out[~small] = np.copysign(1 - np.where(y > 27, 0.0, erfc), x[~small])
    return out


def _erf_f32(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """float32 erf of a block into out (which may be x)."""
    xc = np.clip(x, -ERF_F32_CLAMP, ERF_F32_CLAMP)
    x2 = xc * xc
    p, q = _horner(x2, ERF_F32_P), _horner(x2, ERF_F32_Q)
    np.divide(p, q, out=p)
    np.multiply(p, xc, out=p)  # x last: tiny x keep their relative accuracy
    return np.clip(p, -1, 1, out=out)


BLOCK = 1 << 16  # elements: a block's four temporaries about fill a 1 MiB L2


def _by_blocks(f: Callable[[np.ndarray, np.ndarray], Any]) -> Callable[[Any], np.ndarray]:
    """`f(x_block, out_block)` made a function of arrays (floating: ints become float64, as the
    shape rule says), run on blocks of BLOCK elements so that its passes stay in the cache."""

    @functools.wraps(f)
    def apply(x):
        x = np.asarray(x)
        x = x if x.dtype.kind == "f" else x.astype(np.float64)
        flat, out = x.ravel(), np.empty(x.size, x.dtype)
        for start in range(0, flat.size, BLOCK):
            f(flat[start : start + BLOCK], out[start : start + BLOCK])
        return out.reshape(x.shape)

    return apply


def _horner(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """The polynomial with these coefficients (lowest power first) at x, in x's dtype."""
    out = np.full_like(x, coefficients[-1])
    for c in coefficients[-2::-1]:
        np.multiply(out, x, out=out)
        np.add(out, x.dtype.type(c), out=out)
    return out


@_by_blocks
def _sigmoid(x, out):
    sigmoid_into(x, out)


def _complex_or(real: Callable, complex: Callable) -> Callable:
    """`real` (by blocks, which take real values only), or `complex`'s formula for complex x."""
    return lambda x: complex(x) if np.iscomplexobj(x) else real(x)


def _complex_silu_slope(x):
    s = 1 / (1 + np.exp(-x))
    return s * (1 + x * (1 - s))


# SiLU (x sigmoid(x)) as an op of its own, as PyTorch's `silu`: composed of ops, its eager
# forward and backward were nine passes over memory; a kernel inlines one helper.
@_by_blocks
def _silu(x, out):
    np.multiply(sigmoid_into(x, out), x, out=out)


@_by_blocks
def _silu_slope(x, out):
    """d/dx x s(x) = s (1 + x (1 - s)), s = sigmoid(x)."""
    s = sigmoid_into(x, out)
    rest = np.subtract(1, s)
    rest *= x
    rest += 1
    np.multiply(s, rest, out=out)


def _silu_curvature(x):
    """d2/dx2 x s(x) = s (1 - s) (2 + x (1 - 2 s)), composed of ops: a second derivative is
    rare."""
    s = sigmoid(x)
    return s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s))


# GELU as ops of its own (PyTorch's `gelu`, `approximate="none"` or `"tanh"`): composed of
# ops, its eager forward and backward were a score of passes over memory each; here each is a
# few passes over blocks that stay in the cache, and a kernel inlines one helper.
SQRT_HALF, INV_SQRT_2PI = 0.7071067811865476, 0.3989422804014327
GELU_TANH_C, GELU_TANH_A = 0.7978845608028654, 0.044715  # sqrt(2/pi) and the cubic's weight


def _normal_cdf(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2 into out."""
    np.multiply(x, x.dtype.type(SQRT_HALF), out=out)
    if x.dtype == np.float32:
        _erf_f32(out, out)
    else:
        out[...] = _erf(out)
    out += 1
    out *= x.dtype.type(0.5)
    return out


@_by_blocks
def _gelu(x, out):
    np.multiply(_normal_cdf(x, out), x, out=out)


@_by_blocks
def _gelu_slope(x, out):
    """d/dx x Phi(x) = Phi(x) + x phi(x)."""
    _normal_cdf(x, out)
    density = np.multiply(x, x)
    density *= x.dtype.type(-0.5)
    np.exp(density, out=density)
    density *= x
    density *= x.dtype.type(INV_SQRT_2PI)
    out += density


def _gate(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """s = sigmoid(2u) = (1 + tanh u) / 2, u = c (x + a x^3), into out: 1 + tanh u cancels in
    float32 where x is very negative, the sigmoid keeps its relative accuracy."""
    np.multiply(x, x, out=out)
    out *= x.dtype.type(-2 * GELU_TANH_A * GELU_TANH_C)
    out -= x.dtype.type(2 * GELU_TANH_C)
    out *= x
    with np.errstate(over="ignore"):  # exp(-2u) = inf: s = 0, as it should
        np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


@_by_blocks
def _gelu_tanh(x, out):
    """x (1 + tanh u) / 2 = x s."""
    np.multiply(_gate(x, out), x, out=out)


@_by_blocks
def _gelu_tanh_slope(x, out):
    """s + x s (1 - s) 2u', 2u' = 2c (1 + 3 a x^2)."""
    s = _gate(x, out)
    rest = np.multiply(x, x)
    rest *= x.dtype.type(6 * GELU_TANH_A * GELU_TANH_C)
    rest += x.dtype.type(2 * GELU_TANH_C)
    rest *= x
    rest *= s
    rest *= 1 - s
    out += rest


def _gelu_curvature(x):
    """d2/dx2 x Phi(x) = phi(x) (2 - x^2), composed of ops: a second derivative is rare."""
    return exp(x * x * -0.5) * INV_SQRT_2PI * (2.0 - x * x)


def _gelu_tanh_curvature(x):
    """(1 - t^2) (u' + x (u'' - 2 t u'^2) / 2), u = c (x + a x^3), composed of ops."""
    t = tanh(GELU_TANH_C * (x + GELU_TANH_A * x * x * x))
    du = GELU_TANH_C * (1.0 + 3.0 * GELU_TANH_A * x * x)
    ddu = (6.0 * GELU_TANH_A * GELU_TANH_C) * x
    return (1.0 - t * t) * (du + 0.5 * x * (ddu - 2.0 * t * du * du))


def _softplus(x):
    """log(1 + exp(x)), without overflow for large x."""
    return np.logaddexp(0, x)


# x ** c for these constant exponents is computed as products (steps multiply two earlier
# values; slot 0 is x): NumPy sends x ** 3.0 to powf per element, far slower than products, and in
# a kernel a runtime exponent keeps the loop scalar. The eager impl and simplify's rewrite of a
# traced `pow` read this one table, so both round alike.
POWER_PRODUCTS: dict[float, tuple[tuple[int, int], ...]] = {
    2.0: ((0, 0),),
    3.0: ((0, 0), (1, 0)),
    4.0: ((0, 0), (1, 1)),
}


def _power(x, y):
    """np.power, with the exponents of POWER_PRODUCTS as products, where the result keeps the
    base's dtype (the exponent may be data: Adam's beta ** step). A Python-number base (as plans
    write constants) first becomes an array of the result's dtype, so eager and traced steps
    take the same branch. Other exponents go straight to np.power: an AdamW step takes this
    path twice per parameter, and NumPy's dtype queries cost microseconds each."""
    steps = POWER_PRODUCTS.get(builtins.complex(y)) if np.ndim(y) == 0 else None  # 2+0j finds 2.0
    if steps is None:
        return np.power(x, y)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x, np.result_type(x, y))
    if np.result_type(x, y) != x.dtype:
        return np.power(x, y)
    values = [x]
    for k, (a, b) in enumerate(steps):
        last = k == len(steps) - 1
        into = values[a] if last and a > 0 and np.ndim(values[a]) else None  # no 2nd temporary
        values.append(np.multiply(values[a], values[b], out=into))
    return values[-1]


def unary(name, impl, vjp=None, saves="", scalar=None, helpers=(), shape=shapes.floating, **kw):
    return Primitive(name, impl, shape, (vjp,) if vjp else None, saves, kind=Kind.ELEMENTWISE,
                     scalar=scalar, helpers=helpers, promotion=_promotion(shape), **kw)  # fmt: skip


def binary(
    name, impl, vjp=None, saves="", scalar=None, helpers=(), shape=shapes.broadcast_binary, **kw
):
    return Primitive(name, impl, shape, vjp, saves, kind=Kind.ELEMENTWISE, scalar=scalar,
                     helpers=helpers, promotion=_promotion(shape) or "operands", **kw)  # fmt: skip


def _promotion(shape) -> str:
    """Float functions (whose rule makes integers floats) take integers as the default float."""
    return "float" if shape in (shapes.floating, shapes.real_floating, shapes.true_divide) else ""


def conjugated(x: Any) -> Any:
    """x's complex conjugate, or x itself when real: a holomorphic op's VJP multiplies the
    cotangent by the conjugate of its derivative (PyTorch's convention for complex values)."""
    return conj(x) if x.dtype.kind == "c" else x


# `complex_grad=True` (vocabulary.Primitive): the rule holds for complex values too
_C = {"complex_grad": True}


def _copy(x, out=None):
    """np.positive, which has no loop for bool: a bool tensor's `clone()` copies."""
    if np.asarray(x).dtype != np.bool_:
        return np.positive(x, out=out)
    if out is None:
        return np.array(x, copy=True)
    np.copyto(out, x)
    return out


positive = unary("positive", _copy, lambda g, out, x: g, shape=shapes.same, scalar="(+{0})",
                 accepts_out=True, numpy=np.positive, **_C)  # fmt: skip
neg = unary("neg", np.negative, lambda g, out, x: -g, shape=shapes.same, scalar="(-{0})", **_C)
exp = unary("exp", np.exp, lambda g, out, x: g * conjugated(out), "out", "exp({0})", ("exp",),
            **_C)  # fmt: skip
log = unary("log", np.log, lambda g, out, x: g / conjugated(x), "in", "log({0})", ("log",), **_C)
log1p = unary("log1p", np.log1p, lambda g, out, x: g / conjugated(x + 1.0), "in",
              "math.log1p({0})", **_C)  # fmt: skip
expm1 = unary("expm1", np.expm1, lambda g, out, x: g * conjugated(out + 1.0), "out",
              "math.expm1({0})", **_C)  # fmt: skip
sqrt = unary("sqrt", np.sqrt, lambda g, out, x: g / (conjugated(out) * 2.0), "out", "sqrt({0})",
             ("sqrt",), **_C)  # fmt: skip


def _tanh_grad(g, out):
    """g (1 - out^2), rounded as its three ops are, in one buffer."""
    slope = np.asarray(np.multiply(out, out))  # a 0-d product is a scalar
    np.subtract(1.0, slope, out=slope)
    return np.multiply(g, slope, out=slope) if g.shape == slope.shape else g * slope


def _sigmoid_grad(g, out):
    """g out (1 - out), rounded as its three ops are, in one buffer."""
    slope = np.asarray(np.subtract(1.0, out))
    np.multiply(out, slope, out=slope)
    return np.multiply(g, slope, out=slope) if g.shape == slope.shape else g * slope


# tanh's and the sigmoid's VJPs from their results: one op each eagerly (a tape node's three
# binds before), fused as their parts in a plan; real values only (complex: the composition)
tanh_grad = binary("tanh_grad", _tanh_grad,
                   (lambda gg, r, g, out: sum_to(tanh_grad(gg, out), g.shape),
                    lambda gg, r, g, out: sum_to(gg * g * out * -2.0, out.shape)),
                   "in", "({0} * (1.0 - {1} * {1}))")  # fmt: skip
sigmoid_grad = binary("sigmoid_grad", _sigmoid_grad,
                      (lambda gg, r, g, out: sum_to(sigmoid_grad(gg, out), g.shape),
                       lambda gg, r, g, out: sum_to(gg * g * (1.0 - 2.0 * out), out.shape)),
                      "in", "({0} * ({1} * (1.0 - {1})))")  # fmt: skip


def _tanh_vjp(g, out, x):
    return g * conj(1.0 - out * out) if out.dtype.kind == "c" else tanh_grad(g, out)


def _sigmoid_vjp(g, out, x):
    return g * conj(out * (1.0 - out)) if out.dtype.kind == "c" else sigmoid_grad(g, out)


tanh = unary("tanh", np.tanh, _tanh_vjp, "out", "tanh({0})", ("tanh",), **_C)
sigmoid = unary("sigmoid", _complex_or(_sigmoid, lambda x: 1 / (1 + np.exp(-x))), _sigmoid_vjp,
                "out", "sigmoid({0})", ("sigmoid",), **_C)  # fmt: skip
softplus = unary("softplus", _softplus, lambda g, out, x: g * sigmoid(x), "in",
                 "(math.log1p(math.exp(-abs({0}))) + maximum({0}, 0.0))", ("maximum",))  # fmt: skip
erf = unary("erf", _erf, lambda g, out, x: g * (1.1283791670955126 * exp(-(x * x))), "in",
            "erf({0})", ("erf",), shape=shapes.real_floating)  # fmt: skip
silu = unary("silu", _complex_or(_silu, lambda x: x / (1 + np.exp(-x))),
             lambda g, out, x: g * conjugated(silu_slope(x)), "in", "silu({0})", ("silu",),
             **_C)  # fmt: skip
silu_slope = unary("silu_slope", _complex_or(_silu_slope, _complex_silu_slope),
                   lambda g, out, x: g * conjugated(_silu_curvature(x)), "in",
                   "silu_slope({0})", ("silu_slope",), **_C)  # fmt: skip
gelu = unary("gelu", _gelu, lambda g, out, x: g * gelu_slope(x), "in", "gelu({0})", ("gelu",),
             shape=shapes.real_floating)  # fmt: skip
gelu_slope = unary("gelu_slope", _gelu_slope, lambda g, out, x: g * _gelu_curvature(x), "in",
                   "gelu_slope({0})", ("gelu_slope",))  # fmt: skip
gelu_tanh = unary("gelu_tanh", _gelu_tanh, lambda g, out, x: g * gelu_tanh_slope(x), "in",
                  "gelu_tanh({0})", ("gelu_tanh",), shape=shapes.real_floating)  # fmt: skip
gelu_tanh_slope = unary("gelu_tanh_slope", _gelu_tanh_slope,
                        lambda g, out, x: g * _gelu_tanh_curvature(x), "in",
                        "gelu_tanh_slope({0})", ("gelu_tanh_slope",))  # fmt: skip
# holomorphic: the cotangent times the conjugate of the derivative (see `conjugated`)
sin = unary("sin", np.sin, lambda g, out, x: g * conjugated(cos(x)), "in", "sin({0})", ("sin",),
            **_C)  # fmt: skip
cos = unary("cos", np.cos, lambda g, out, x: -(g * conjugated(sin(x))), "in", "cos({0})",
            ("cos",), **_C)  # fmt: skip
tan = unary("tan", np.tan, lambda g, out, x: g * conjugated(1.0 + out * out), "out",
            "math.tan({0})", **_C)  # fmt: skip
arcsin = unary("arcsin", np.arcsin, lambda g, out, x: g / conjugated(sqrt(1.0 - x * x)), "in",
               "math.asin({0})", **_C)  # fmt: skip
arccos = unary("arccos", np.arccos, lambda g, out, x: -g / conjugated(sqrt(1.0 - x * x)), "in",
               "math.acos({0})", **_C)  # fmt: skip
arctan = unary("arctan", np.arctan, lambda g, out, x: g / conjugated(1.0 + x * x), "in",
               "math.atan({0})", **_C)  # fmt: skip
sinh = unary("sinh", np.sinh, lambda g, out, x: g * conjugated(cosh(x)), "in", "math.sinh({0})",
             **_C)  # fmt: skip
cosh = unary("cosh", np.cosh, lambda g, out, x: g * conjugated(sinh(x)), "in", "math.cosh({0})",
             **_C)  # fmt: skip
arcsinh = unary("arcsinh", np.arcsinh, lambda g, out, x: g / conjugated(sqrt(x * x + 1.0)),
                "in", "math.asinh({0})", **_C)  # fmt: skip
arccosh = unary("arccosh", np.arccosh, lambda g, out, x: g / conjugated(sqrt(x * x - 1.0)),
                "in", "math.acosh({0})", **_C)  # fmt: skip
arctanh = unary("arctanh", np.arctanh, lambda g, out, x: g / conjugated(1.0 - x * x), "in",
                "math.atanh({0})", **_C)  # fmt: skip
log2 = unary("log2", np.log2, lambda g, out, x: g / conjugated(x * math.log(2.0)), "in",
             "math.log2({0})", **_C)  # fmt: skip
log10 = unary("log10", np.log10, lambda g, out, x: g / conjugated(x * math.log(10.0)), "in",
              "math.log10({0})", **_C)  # fmt: skip
exp2 = unary("exp2", np.exp2, lambda g, out, x: g * conjugated(out * math.log(2.0)), "out",
             "(2.0 ** {0})", **_C)  # fmt: skip
# Piecewise constant: no gradient (None), as in NumPy autograd.
floor = unary("floor", np.floor, shape=shapes.same)
ceil = unary("ceil", np.ceil, shape=shapes.same)
trunc = unary("trunc", np.trunc, shape=shapes.same)
rint = unary("rint", np.rint, shape=shapes.same)
sign = unary("sign", np.sign, shape=shapes.same, scalar="sign({0})", helpers=("sign",))
# a complex number's: real, its gradient g z / |z| (0 at 0, where NumPy's sign is 0)
abs = unary("abs", np.abs, lambda g, out, x: g * sign(x), "in", "abs({0})", shape=shapes.magnitude,
            **_C)  # fmt: skip

add = binary("add", np.add,
             (lambda g, out, x, y: sum_to(g, x.shape), lambda g, out, x, y: sum_to(g, y.shape)),
             scalar="({0} + {1})", **_C)  # fmt: skip
sub = binary("sub", np.subtract,
             (lambda g, out, x, y: sum_to(g, x.shape), lambda g, out, x, y: sum_to(-g, y.shape)),
             scalar="({0} - {1})", **_C)  # fmt: skip
mul = binary("mul", np.multiply,
             (lambda g, out, x, y: sum_to(g * conjugated(y), x.shape),
              lambda g, out, x, y: sum_to(g * conjugated(x), y.shape)),
             "in", "({0} * {1})", **_C)  # fmt: skip
div = binary("div", np.true_divide,
             (lambda g, out, x, y: sum_to(g / conjugated(y), x.shape),
              lambda g, out, x, y:  # x / y: keeps no out
              sum_to(-(g * conjugated(x / y)) / conjugated(y), y.shape)),
             "in", "({0} / {1})", shape=shapes.true_divide, **_C)  # fmt: skip


def _pow_grad_y(g, out, x, y):
    """g x**y log(x); 0 where x == 0 <= y (as PyTorch's), where 0 * log(0) would give nan. The
    base is replaced by 1 there, not the result masked, so higher orders stay finite too."""
    positive = (real(y) if y.dtype.kind == "c" else y) >= 0.0
    safe = where(x == 0.0, where(positive, 1.0, x), x)
    return sum_to(g * conjugated(out * log(safe)), y.shape)


# d/dx x**y = y x**(y-1), with the exponent 1 where y == 0 so that 0**0's gradient is 0, not
# 0 * 0**-1 = nan (as HIPS autograd's): a where of y's shape, usually a scalar's.
pow = binary("pow", _power,
             (lambda g, out, x, y:
              sum_to(g * conjugated(y * x ** where(y == 0.0, 1.0, y - 1.0)), x.shape),
              _pow_grad_y),
             "in+out", "({0} ** {1})", numpy=np.power, **_C)  # fmt: skip
maximum = binary("maximum", np.maximum,
                 (lambda g, out, x, y: sum_to(where(x >= y, g, 0.0), x.shape),
                  lambda g, out, x, y: sum_to(where(x >= y, 0.0, g), y.shape)),
                 "in", "maximum({0}, {1})", ("maximum",))  # fmt: skip
minimum = binary("minimum", np.minimum,
                 (lambda g, out, x, y: sum_to(where(x <= y, g, 0.0), x.shape),
                  lambda g, out, x, y: sum_to(where(x <= y, 0.0, g), y.shape)),
                 "in", "minimum({0}, {1})", ("minimum",))  # fmt: skip
arctan2 = binary("arctan2", np.arctan2,
                 (lambda g, out, y, x: sum_to(g * x / (x * x + y * y), y.shape),
                  lambda g, out, y, x: sum_to(-(g * y) / (x * x + y * y), x.shape)),
                 "in", "math.atan2({0}, {1})", shape=shapes.true_divide)  # fmt: skip
hypot = binary("hypot", np.hypot,
               (lambda g, out, x, y: sum_to(g * x / out, x.shape),
                lambda g, out, x, y: sum_to(g * y / out, y.shape)),
               "in+out", "math.hypot({0}, {1})", shape=shapes.true_divide)  # fmt: skip
logaddexp = binary("logaddexp", np.logaddexp,
                   (lambda g, out, x, y: sum_to(g * exp(x - out), x.shape),
                    lambda g, out, x, y: sum_to(g * exp(y - out), y.shape)),
                   "in+out", shape=shapes.true_divide)  # fmt: skip
logaddexp2 = binary("logaddexp2", np.logaddexp2,
                    (lambda g, out, x, y: sum_to(g * exp2(x - out), x.shape),
                     lambda g, out, x, y: sum_to(g * exp2(y - out), y.shape)),
                    "in+out", shape=shapes.true_divide)  # fmt: skip
remainder = binary("remainder", np.remainder,
                   (lambda g, out, x, y: sum_to(g, x.shape),
                    lambda g, out, x, y: sum_to(-(g * floor(x / y)), y.shape)),
                   "in", "({0} % {1})")  # fmt: skip
fmod = binary("fmod", np.fmod,
              (lambda g, out, x, y: sum_to(g, x.shape),
               lambda g, out, x, y: sum_to(-(g * trunc(x / y)), y.shape)),
              "in", "np.fmod({0}, {1})")  # fmt: skip
where = Primitive("where", _where, _where_rule,
                  (None,
                   lambda g, out, c, x, y: sum_to(where(c, g, 0.0), x.shape),
                   lambda g, out, c, x, y: sum_to(where(c, 0.0, g), y.shape)),
                  "in0", kind=Kind.ELEMENTWISE, scalar="({1} if {0} else {2})",
                  numpy=np.where, scratch=_where_scratch, promotion="values", **_C)  # fmt: skip
less = binary("less", np.less, shape=shapes.compare, scalar="({0} < {1})")
less_equal = binary("less_equal", np.less_equal, shape=shapes.compare, scalar="({0} <= {1})")
greater = binary("greater", np.greater, shape=shapes.compare, scalar="({0} > {1})")
greater_equal = binary(
    "greater_equal", np.greater_equal, shape=shapes.compare, scalar="({0} >= {1})"
)
equal = binary("equal", np.equal, shape=shapes.compare, scalar="({0} == {1})")
not_equal = binary("not_equal", np.not_equal, shape=shapes.compare, scalar="({0} != {1})")


def _astype_vjp(g, out, x, dtype):
    """The cotangent cast back; a real value cast to complex gets the real part (PyTorch's)."""
    if x.dtype.kind not in "fcV":  # V: bfloat16's bits
        return None
    return (real(g) if g.dtype.kind == "c" and x.dtype.kind == "f" else g).astype(x.dtype)


astype = unary("astype", bfloat16.cast, _astype_vjp,
               shape=lambda x, dtype: (x.shape, dtype), scalar="{0}", **_C)  # fmt: skip


def _float32_rule(x):
    if x.dtype != np.float32:
        raise TypeError(f"bfloat16_rounded takes float32, not {x.dtype}")
    return x.shape, x.dtype


# float32 values rounded to bfloat16's precision: the cast to bfloat16 and back (the simplify
# pass's `bfloat16_round_trip`), as one op that kernels take and fuse with their neighbours
bfloat16_rounded = unary("bfloat16_rounded", bfloat16.rounded,
                         lambda g, out, x: bfloat16_rounded(g), shape=_float32_rule,
                         scalar="bfloat16_rounded({0})", helpers=("bfloat16_rounded",))  # fmt: skip


# Complex numbers' parts, as PyTorch's (no scalar templates: kernels are real, complex values
# stay NumPy's). The results are copies, as every elementwise op's: NumPy's `.real` is a view.
def _complex_rule(re, im):
    if re.dtype.kind != "f" or im.dtype.kind != "f":
        raise ValueError(f"the parts must be floats, not {re.dtype} and {im.dtype}")
    return shapes.broadcast(re, im), shapes.complex_dtype(shapes.result_type(re.dtype, im.dtype))


def _complex(re, im):
    shape, dtype = _complex_rule(re, im)
    out = np.empty(shape, dtype)
    out.real, out.imag = re, im  # not re + 1j * im: 1j * inf would be nan + inf j
    return out


def _angle_rule(x):
    return x.shape, shapes.real_dtype(shapes.floating(x)[1])


def _angle(x):
    """NumPy's angle of complex numbers; of real ones PyTorch's: pi below 0, else 0 (also at
    -0.0, where NumPy's is pi), nan at nan."""
    if x.dtype.kind == "c":
        return np.angle(x)
    dtype = _angle_rule(x)[1]
    return np.where(x < 0, dtype.type(np.pi), np.where(x == x, dtype.type(0), x)).astype(dtype)


def _angle_vjp(g, out, x):
    """g i z / |z|^2, 0 at 0 (PyTorch's); 0 for real values, whose angle is constant."""
    if x.dtype.kind != "c":
        return g * 0.0
    a, b = real(x), imag(x)
    r2 = a * a + b * b
    return complex(0.0, g) * x / where(r2 == 0.0, 1.0, r2)


real = unary("real", lambda x: x.real.copy(), lambda g, out, x: g.astype(x.dtype),
             shape=shapes.magnitude, **_C)  # fmt: skip
imag = unary("imag", lambda x: x.imag.copy(), lambda g, out, x: complex(0.0, g),
             shape=shapes.magnitude, **_C)  # fmt: skip
conj = unary("conj", np.conjugate, lambda g, out, x: conj(g), shape=shapes.same, **_C)
angle = unary("angle", _angle, _angle_vjp, "in", shape=_angle_rule, **_C)
complex = binary("complex", _complex,
                 (lambda g, out, re, im: sum_to(real(g), re.shape),
                  lambda g, out, re, im: sum_to(imag(g), im.shape)),
                 shape=_complex_rule, **_C)  # fmt: skip


def _bits(kinds: str) -> Callable:
    """The shape rule of a bitwise op: integers (and, for `&`, `|` and `^`, bools) only."""

    def rule(*xs):
        if any(x.dtype.kind not in kinds for x in xs):
            dtypes = ", ".join(str(x.dtype) for x in xs)
            raise TypeError(f"expects integer{' or bool' if 'b' in kinds else ''} tensors, "
                            f"got {dtypes}")  # fmt: skip
        return shapes.broadcast_binary(*xs) if len(xs) == 2 else shapes.same(*xs)

    return rule


# integers' bitwise ops, without gradients (bool masks' `~` is logical_not's: Numba's ~True is -2)
bitwise_and = binary("bitwise_and", np.bitwise_and, (None, None), scalar="({0} & {1})",
                     shape=_bits("biu"))  # fmt: skip
bitwise_or = binary("bitwise_or", np.bitwise_or, (None, None), scalar="({0} | {1})",
                    shape=_bits("biu"))  # fmt: skip
bitwise_xor = binary("bitwise_xor", np.bitwise_xor, (None, None), scalar="({0} ^ {1})",
                     shape=_bits("biu"))  # fmt: skip
bitwise_not = Primitive("bitwise_not", np.invert, _bits("iu"), (None,),
                        kind=Kind.ELEMENTWISE, scalar="(~{0})")  # fmt: skip
bitwise_left_shift = binary(
    "bitwise_left_shift", np.left_shift, (None, None), scalar="({0} << {1})", shape=_bits("iu")
)
bitwise_right_shift = binary(
    "bitwise_right_shift", np.right_shift, (None, None), scalar="({0} >> {1})", shape=_bits("iu")
)
gcd = binary("gcd", np.gcd, (None, None), shape=_bits("iu"))  # non-negative, gcd(0, 0) = 0
lcm = binary("lcm", np.lcm, (None, None), shape=_bits("iu"))


def _floats(name: str) -> Callable:
    """The shape rule of an op of floating values only (PyTorch's `frexp`, `nextafter`)."""

    def rule(*xs):
        if any(x.dtype.kind != "f" for x in xs):
            dtypes = ", ".join(str(x.dtype) for x in xs)
            raise TypeError(f"{name} is only implemented for floating tensors, got {dtypes}")
        return shapes.broadcast_binary(*xs) if len(xs) == 2 else shapes.same(*xs)

    return rule


def _frexp_mantissa_vjp(g, out, x):
    """g 2^-e (PyTorch's grad / exponent.exp2()): the mantissa over x, exactly; g itself at 0,
    infinities and nan, whose exponent is 0."""
    usual = (x != 0.0) & (abs(x) < math.inf)  # finite and nonzero
    return g * where(usual, out / where(usual, x, 1.0), 1.0)


# frexp's two results (PyTorch's `frexp`): x = mantissa * 2 ** exponent, |mantissa| in [0.5, 1)
# (x itself at 0, infinities and nan, with exponent 0); the exponent is int32, without gradient
frexp_mantissa = unary("frexp_mantissa", lambda x: np.frexp(x)[0], _frexp_mantissa_vjp, "in+out",
                       shape=_floats("frexp"))  # fmt: skip
frexp_exponent = unary("frexp_exponent", lambda x: np.frexp(x)[1].astype(np.int32),
                       shape=lambda x: (_floats("frexp")(x)[0], np.dtype(np.int32)))  # fmt: skip
# the next float after x towards y; PyTorch's gradient is g for x, zeros for y
nextafter = binary("nextafter", np.nextafter,
                   (lambda g, out, x, y: sum_to(g, x.shape),
                    lambda g, out, x, y: sum_to(g * 0.0, y.shape)),
                   shape=_floats("nextafter"))  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.views import sum_to  # noqa: E402

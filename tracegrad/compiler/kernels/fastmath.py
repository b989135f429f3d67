"""Vectorizable float32 tanh, exp, log, sigmoid, erf and GELU for Numba kernels.

Numba lowers `math.tanh`/`exp`/`log`/`erf` to libm calls, which stop LLVM from vectorizing the
loop. These are branch-free polynomial/rational approximations (after Eigen's `ptanh_float`,
`pexp_float`, `plog_float`, themselves from Cephes, and its `generic_fast_erf_float`) built only
of arithmetic, min/max, selects and integer bit tricks, so once LLVM inlines them the
surrounding loop becomes SIMD code.
Special values follow IEEE (exp(-inf) = 0, log(0) = -inf, log(-1) = nan, nan -> nan), which is
why the flags below leave out `nnan`/`ninf`, and why they leave out `reassoc`: it would undo
the Cody-Waite argument reduction. Error bounds, as measured by
tests/compiler/kernels/test_fastmath.py, are in docs/kernels.md.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic

from tracegrad.core.ops.elementwise import (
    ERF_F32_CLAMP,
    ERF_F32_P,
    ERF_F32_Q,
    GELU_TANH_A,
    GELU_TANH_C,
    INV_SQRT_2PI,
    SQRT_HALF,
)

FLAGS = frozenset({"nsz", "contract", "afn"})


def flags_literal(flags: frozenset[str]) -> str:
    """`flags` as a set literal for generated source, sorted: a set's own repr follows the
    process's string hashing, so each process would write, and compile, a module of its own."""
    return "{" + ", ".join(repr(f) for f in sorted(flags)) + "}"


_jit = numba.njit(fastmath=set(FLAGS), error_model="numpy", cache=True)

_F = np.float32
_ONE, _HALF, _ZERO = _F(1.0), _F(0.5), _F(0.0)
_INF, _NAN = _F(np.inf), _F(np.nan)


# --- bit tricks ---------------------------------------------------------------------------------


def _float32_only(x: types.Type) -> None:
    if x != types.float32:
        raise numba.errors.TypingError(f"fastmath intrinsics take float32, not {x}")


@intrinsic
def _pow2(typingctx, n):
    """2**n for an integer-valued float32 n in [-126, 127], written straight into the exponent."""
    _float32_only(n)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        biased = builder.add(builder.fptosi(args[0], i32), i32(127))
        return builder.bitcast(builder.shl(biased, i32(23)), ir.FloatType())

    return types.float32(types.float32), codegen


@intrinsic
def _binary_exponent(typingctx, x):
    """e such that x = m * 2**e with m in [0.5, 1), for a positive normal float32 x (frexp)."""
    _float32_only(x)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        biased = builder.and_(builder.lshr(bits, i32(23)), i32(0xFF))
        return builder.sitofp(builder.sub(biased, i32(126)), ir.FloatType())

    return types.float32(types.float32), codegen


@intrinsic
def _mantissa(typingctx, x):
    """m in [0.5, 1) such that x = m * 2**e, for a positive normal float32 x (frexp)."""
    _float32_only(x)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        bits = builder.or_(builder.and_(bits, i32(0x807FFFFF)), i32(0x3F000000))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(types.float32), codegen


@intrinsic
def bfloat16_rounded(typingctx, x):
    """x rounded to bfloat16's precision (its upper 16 bits) to nearest, ties to even, every
    NaN the quiet NaN: `bfloat16.to_bfloat16`'s rounding, kept in float32."""
    _float32_only(x)

    def codegen(context, builder, sig, args):
        return bfloat16_rounded_ir(builder, args[0])

    return types.float32(types.float32), codegen


def bfloat16_rounded_ir(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The instructions of `bfloat16_rounded` on the float32 `x`."""
    i32 = ir.IntType(32)
    bits = builder.bitcast(x, i32)
    odd = builder.and_(builder.lshr(bits, i32(16)), i32(1))
    rounded = builder.and_(builder.add(builder.add(bits, i32(0x7FFF)), odd), i32(-65536))
    nan = builder.icmp_unsigned(">", builder.and_(bits, i32(0x7FFFFFFF)), i32(0x7F800000))
    out = builder.select(nan, i32(0x7FC00000), rounded)
    return builder.bitcast(out, ir.FloatType())


@intrinsic
def bfloat16_bits(typingctx, x):
    """The bfloat16 nearest x (ties to even; every NaN the quiet NaN), as its 16 bits: a store
    of a bfloat16 array in a kernel."""
    _float32_only(x)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        rounded = builder.bitcast(bfloat16_rounded_ir(builder, args[0]), i32)
        return builder.trunc(builder.lshr(rounded, i32(16)), ir.IntType(16))

    return types.uint16(types.float32), codegen


@intrinsic
def bfloat16_widened(typingctx, bits):
    """The float32 of a bfloat16's 16 bits (exact: they are its upper half)."""
    if bits != types.uint16:
        raise numba.errors.TypingError(f"bfloat16_widened takes uint16 bits, not {bits}")

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        return builder.bitcast(builder.shl(builder.zext(args[0], i32), i32(16)), ir.FloatType())

    return types.float32(types.uint16), codegen


def _ieee_extreme(name: str):
    """LLVM's `name` (llvm.maximum or llvm.minimum) of two floats of one type: NaN from either
    side propagates, as NumPy's does, and LLVM vectorizes a loop that folds a row with it (it
    does not vectorize Python's max, a compare and a select, even with `nnan`)."""

    @intrinsic
    def extreme(typingctx, a, b):
        if not isinstance(a, types.Float) or a != b:
            return None

        def codegen(context, builder, sig, args):
            ty = args[0].type
            fn = builder.module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty, ty]))
            return builder.call(fn, args)

        return a(a, b), codegen

    return extreme


fmaximum = _ieee_extreme("llvm.maximum")
fminimum = _ieee_extreme("llvm.minimum")


# --- exp ----------------------------------------------------------------------------------------

_EXP_HI = _F(88.8)  # exp overflows to inf from 88.7228; clamping keeps the exponent in range
# exp(-104) is below half the smallest subnormal: it rounds to 0. The clamp is lower, where the
# first half of 2**m is 2**-127, whose bits are +0.0: -inf or float32's lowest (a softmax's
# masked scores) then make 0 by a product with 0, where an underflowing product (x down to -176)
# costs a microcode assist on Intel cores, far more than the whole exp (docs/kernels.md).
_EXP_LO = _F(-176.0)
_LOG2E = _F(1.44269504088896341)
_LN2_HI = _F(0.693359375)  # Cody-Waite: ln 2 = hi + lo, hi with few mantissa bits, m * hi exact
_LN2_LO = _F(-2.12194440e-4)
_E0, _E1, _E2, _E3, _E4, _E5 = map(
    _F, (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
         5.0000001201e-1)
)  # fmt: skip


@_jit
def exp_f32(x):
    """e**x: x = m ln2 + r with |r| <= ln2/2, a degree-7 polynomial for e**r, times 2**m.

    2**m is applied in two halves so that subnormal results (x down to -103.9) keep their bits.
    """
    xc = min(max(x, _EXP_LO), _EXP_HI)
    m = np.floor(xc * _LOG2E + _HALF)
    r = xc - m * _LN2_HI
    r = r - m * _LN2_LO
    p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
    y = p * (r * r) + r + _ONE
    m1 = np.floor(m * _HALF)
    y = y * _pow2(m1) * _pow2(m - m1)
    return y if x == x else x


# --- log ----------------------------------------------------------------------------------------

_MIN_NORMAL = _F(1.17549435e-38)
_TWO_24, _24 = _F(2.0**24), _F(24.0)
_SQRT_HALF = _F(0.707106781186547524)
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8 = map(
    _F, (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
         -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
)  # fmt: skip


@_jit
def log_f32(x):
    """ln x: x = m 2**e with m in [sqrt(1/2), sqrt(2)), ln m by Cephes' polynomial, + e ln 2.

    Subnormal x are scaled by 2**24 first; x <= 0, inf and nan give -inf/nan/inf/nan.
    """
    tiny = x < _MIN_NORMAL
    xs = x * _TWO_24 if tiny else x
    e = _binary_exponent(xs) - (_24 if tiny else _ZERO)
    m = _mantissa(xs)
    low = m < _SQRT_HALF
    e = e - _ONE if low else e
    m = (m + m if low else m) - _ONE
    z = m * m
    p = ((((((((_L0 * m + _L1) * m + _L2) * m + _L3) * m + _L4) * m + _L5) * m + _L6) * m + _L7)
         * m + _L8)  # fmt: skip
    y = p * m * z + e * _LN2_LO - _HALF * z
    y = (m + y) + e * _LN2_HI
    y = y if x < _INF else x
    return y if x > _ZERO else (-_INF if x == _ZERO else _NAN)


# --- tanh and sigmoid ---------------------------------------------------------------------------

_TANH_CLAMP = _F(9.0)  # float32 tanh is 1 from 9.01; the rational form holds up to 9, not 10
_TANH_TINY = _F(0.0004)  # below it tanh x rounds to x
_A13, _A11, _A9, _A7, _A5, _A3, _A1 = map(
    _F, (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
         1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
)  # fmt: skip
_B6, _B4, _B2, _B0 = map(
    _F, (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
)


@_jit
def tanh_f32(x):
    """tanh x as Eigen's odd/even rational function of degree 13/6, on x clamped to [-9, 9]."""
    xc = min(max(x, -_TANH_CLAMP), _TANH_CLAMP)
    x2 = xc * xc
    p = ((((((_A13 * x2 + _A11) * x2 + _A9) * x2 + _A7) * x2 + _A5) * x2 + _A3) * x2 + _A1) * xc
    q = ((_B6 * x2 + _B4) * x2 + _B2) * x2 + _B0
    y = min(max(p / q, -_ONE), _ONE)
    return y if abs(x) >= _TANH_TINY else x


@_jit
def sigmoid_f32(x):
    """1 / (1 + e**-x), as e**x / (1 + e**x) for x < 0: one exp of -|x|, which never
    overflows, so tiny results keep their relative accuracy down to the subnormals."""
    e = exp_f32(-abs(x))
    r = _ONE / (_ONE + e)
    return r if x >= _ZERO else e * r


@_jit
def silu_f32(x):
    return x * sigmoid_f32(x)


@_jit
def silu_slope_f32(x):
    """s (1 + x (1 - s)), s = sigmoid(x)."""
    s = sigmoid_f32(x)
    return s * (_ONE + x * (_ONE - s))


# --- erf ----------------------------------------------------------------------------------------

_ERF_CLAMP = _F(ERF_F32_CLAMP)
_P1, _P3, _P5, _P7, _P9, _P11, _P13 = map(_F, ERF_F32_P)
_Q0, _Q2, _Q4, _Q6, _Q8 = map(_F, ERF_F32_Q)


@_jit
def erf_f32(x):
    """erf x as Eigen's odd/even rational function of degree 13/8, on x clamped to [-4, 4],
    the result clamped to [-1, 1] (nan stays nan)."""
    xc = min(max(x, -_ERF_CLAMP), _ERF_CLAMP)
    x2 = xc * xc
    p = (((((_P13 * x2 + _P11) * x2 + _P9) * x2 + _P7) * x2 + _P5) * x2 + _P3) * x2 + _P1
    q = (((_Q8 * x2 + _Q6) * x2 + _Q4) * x2 + _Q2) * x2 + _Q0
    y = p / q * xc  # x last: tiny x keep their relative accuracy down to the subnormals
    return min(max(y, -_ONE), _ONE)


# --- GELU, exact and tanh's, and their slopes -------------------------------------------------

_SQRT_HALF, _INV_SQRT_2PI = _F(SQRT_HALF), _F(INV_SQRT_2PI)
_TWO_C, _TWO_AC = _F(2 * GELU_TANH_C), _F(2 * GELU_TANH_A * GELU_TANH_C)
_SIX_AC = _F(6 * GELU_TANH_A * GELU_TANH_C)


@_jit
def gelu_f32(x):
    return _HALF * x * (_ONE + erf_f32(x * _SQRT_HALF))


@_jit
def gelu_slope_f32(x):
    """Phi(x) + x phi(x)."""
    density = _INV_SQRT_2PI * exp_f32(-_HALF * x * x)
    return _HALF * (_ONE + erf_f32(x * _SQRT_HALF)) + x * density


@_jit
def gelu_tanh_f32(x):
    """x (1 + tanh u) / 2 = x sigmoid(2u), u = c (x + a x^3): no cancellation for x < 0. The
    sigmoid's argument is written as the slope's, so that a kernel computing both (a recomputed
    activation beside its gradient) computes it once."""
    x2 = x * x
    return x * sigmoid_f32((_TWO_AC * x2 + _TWO_C) * x)


@_jit
def gelu_tanh_slope_f32(x):
    """s + x s (1 - s) 2u', s = sigmoid(2u), 2u' = 2c (1 + 3 a x^2)."""
    x2 = x * x
    s = sigmoid_f32((_TWO_AC * x2 + _TWO_C) * x)
    return s + x * s * (_ONE - s) * (_SIX_AC * x2 + _TWO_C)

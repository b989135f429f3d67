"""The names a primitive's `scalar` template calls, resolved by dtype when Numba compiles a kernel.

float32 gets the vectorizable approximations of fastmath.py; float64 (and integers, promoted to
float64 as NumPy does) keeps exact `math.*`. `maximum`/`minimum` propagate nan from either side as
`np.maximum` does (Python's `max` only from its first argument); generated kernels import them as
`max`/`min`, the names the templates use. Outside Numba these are plain Python functions.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.core import types
from numba.extending import overload

from tracegrad.compiler.kernels import fastmath
from tracegrad.core import bfloat16
from tracegrad.core.ops.elementwise import GELU_TANH_A, GELU_TANH_C, INV_SQRT_2PI, SQRT_HALF

_jit = numba.njit(fastmath=set(fastmath.FLAGS), error_model="numpy", cache=True)


def maximum(a, b):
    return a if a >= b or a != a else b


def minimum(a, b):
    return a if a <= b or a != a else b


def _extreme(python_function, ieee_impl) -> None:
    """Floats of one type take LLVM's NaN-propagating intrinsic (a row's fold with it
    vectorizes); other operands the selects of `python_function`, compiled on its own."""
    selects = _jit(python_function)

    @overload(
        python_function, jit_options={"fastmath": set(fastmath.FLAGS), "error_model": "numpy"}
    )
    def dispatch(a, b):
        if isinstance(a, types.Float) and a == b:
            return lambda a, b: ieee_impl(a, b)
        return lambda a, b: selects(a, b)


_extreme(maximum, fastmath.fmaximum)
_extreme(minimum, fastmath.fminimum)


@_jit
def sign(x):
    return np.sign(x)


@_jit
def sqrt(x):
    return math.sqrt(x)


@_jit
def sin(x):
    return math.sin(x)


@_jit
def cos(x):
    return math.cos(x)


def exp(x):
    return math.exp(x)


def log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def tanh(x):
    return math.tanh(x)


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def erf(x):
    return math.erf(x)


def silu(x):
    return x * _exact_sigmoid(x)


def silu_slope(x):
    s = _exact_sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


def gelu(x):
    return 0.5 * x * (1.0 + math.erf(x * SQRT_HALF))


def gelu_slope(x):
    return 0.5 * (1.0 + math.erf(x * SQRT_HALF)) + x * INV_SQRT_2PI * math.exp(-0.5 * x * x)


def gelu_tanh(x):
    return x * _exact_sigmoid(2.0 * GELU_TANH_C * (x + GELU_TANH_A * x * x * x))


def gelu_tanh_slope(x):
    s = _exact_sigmoid(2.0 * GELU_TANH_C * (x + GELU_TANH_A * x * x * x))
    return s + x * s * (1.0 - s) * 2.0 * GELU_TANH_C * (1.0 + 3.0 * GELU_TANH_A * x * x)


def bfloat16_rounded(x):
    return bfloat16.rounded(np.float32(x))


def bfloat16_bits(x):
    return bfloat16.to_bfloat16(np.float32(x)).view(np.uint16)


def bfloat16_widened(bits):
    return (np.uint32(bits) << np.uint32(16)).view(np.float32)


def _intrinsic(python_function, impl, argument: types.Type) -> None:
    """Register a Numba overload: an `argument`-typed value takes `impl` (a fastmath
    intrinsic on bits, of one type only)."""

    @overload(python_function, jit_options={"error_model": "numpy"})
    def dispatch(x):
        if x == argument:
            return lambda x: impl(x)
        return None


_intrinsic(bfloat16_rounded, fastmath.bfloat16_rounded, types.float32)
_intrinsic(bfloat16_bits, fastmath.bfloat16_bits, types.float32)
_intrinsic(bfloat16_widened, fastmath.bfloat16_widened, types.uint16)


@_jit
def _exact_log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


@_jit
def _exact_sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def _by_dtype(python_function, float32_impl, exact_impl) -> None:
    """Register a Numba overload: float32 arguments take `float32_impl`, others `exact_impl`."""

    @overload(
        python_function, jit_options={"fastmath": set(fastmath.FLAGS), "error_model": "numpy"}
    )
    def dispatch(x):
        if x == types.float32:
            return lambda x: float32_impl(x)
        if isinstance(x, types.Float | types.Integer | types.Boolean):
            return lambda x: exact_impl(np.float64(x))
        return None


_by_dtype(exp, fastmath.exp_f32, math.exp)
_by_dtype(log, fastmath.log_f32, _exact_log)
_by_dtype(tanh, fastmath.tanh_f32, math.tanh)
_by_dtype(sigmoid, fastmath.sigmoid_f32, _exact_sigmoid)
_by_dtype(erf, fastmath.erf_f32, math.erf)
_by_dtype(silu, fastmath.silu_f32, _jit(silu))
_by_dtype(silu_slope, fastmath.silu_slope_f32, _jit(silu_slope))
_by_dtype(gelu, fastmath.gelu_f32, _jit(gelu))
_by_dtype(gelu_slope, fastmath.gelu_slope_f32, _jit(gelu_slope))
_by_dtype(gelu_tanh, fastmath.gelu_tanh_f32, _jit(gelu_tanh))
_by_dtype(gelu_tanh_slope, fastmath.gelu_tanh_slope_f32, _jit(gelu_tanh_slope))

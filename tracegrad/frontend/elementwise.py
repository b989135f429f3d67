"""Elementwise functions composed of the op table's primitives (no VJP of their own), PyTorch's
comparison and logical names, and its arithmetic with options (`add(x, y, alpha=2)`,
`div(x, y, rounding_mode="floor")`, `addcmul`, `lerp`, `masked_fill`), and complex numbers'
parts, `complex`, `polar` and `view_as_real`/`view_as_complex`. `equal` is PyTorch's: one bool
for the whole tensors (NumPy's elementwise `equal` is `eq`, or `tracegrad.numpy.equal`)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError, warn_user
from tracegrad.frontend.functions import pytorch_keywords, reshape, stack, viewing
from tracegrad.frontend.promotion import is_number, result_type
from tracegrad.frontend.tensor import Tensor, as_tensor, get_default_dtype

eq, ne, lt, le, gt, ge = P.equal, P.not_equal, P.less, P.less_equal, P.greater, P.greater_equal
mul = multiply = P.mul
true_divide, negative, absolute, fix = P.div, P.neg, P.abs, P.trunc
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def _scaled(other: Any, alpha: Any) -> Any:
    return other if alpha == 1 else other * alpha


def _old_overload(name: str, tensors: tuple, n: int) -> tuple:
    """The tensors of PyTorch's deprecated overloads with the scale first (`x.add_(alpha,
    other)`, the old tutorials' `p.data.add_(-lr, p.grad.data)`), taken with its warning."""
    if len(tensors) != n:
        raise TypeError(f"{name}(): {n + 1} positional arguments at most, got {len(tensors) + 1}")
    warn_user(
        f"This overload of {name} is deprecated: pass the scale as a keyword "
        f"({'alpha' if n == 1 else 'value'}=)"
    )
    return tensors


@pytorch_keywords
def add(input: Any, other: Any, *rest: Any, alpha: Any = 1) -> Tensor:
    """input + alpha * other."""
    if rest:
        alpha, (other,) = other, _old_overload("add", rest, 1)
    return P.add(input, _scaled(other, alpha))


@pytorch_keywords
def sub(input: Any, other: Any, *rest: Any, alpha: Any = 1) -> Tensor:
    """input - alpha * other."""
    if rest:
        alpha, (other,) = other, _old_overload("sub", rest, 1)
    return P.sub(input, _scaled(other, alpha))


subtract = sub
add.ufunc, sub.ufunc = np.add, np.subtract  # x.add_(y, alpha=a) in x's array (`mutation.in_place`)


@pytorch_keywords
def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    """input / other, rounded toward zero ("trunc") or down ("floor") if asked."""
    if rounding_mode not in (None, "trunc", "floor"):
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', not "
                         f"{rounding_mode!r}")  # fmt: skip
    if rounding_mode is None:
        return P.div(input, other)
    rounded = P.trunc if rounding_mode == "trunc" else P.floor
    x, y = (a if is_number(a) else as_tensor(a) for a in (input, other))
    dtype = result_type(x, y)
    if dtype.kind in "fc":
        return rounded(P.div(x, y)) if rounded is P.trunc else _floor_divide(x, y)
    x, y = (float(a) if is_number(a) else a.astype(np.float64) for a in (x, y))
    return rounded(P.div(x, y)).astype(dtype)  # integers: exact up to 2**53, not float32's


divide = div


def _floor_divide(x: Any, y: Any) -> Tensor:
    """PyTorch's (and Python's) float floor division: the quotient that goes with fmod's
    remainder, so that `-0.9 // 0.3` is -4, as `x - (x // y) * y` is `x % y` (floor(x / y)
    gives -3: the division rounds -3.0000000000000004 to -3). No gradient, as floor's."""
    mod = P.fmod(x, y)
    q = P.div(P.sub(x, mod), y)
    q = P.where((mod != 0) & (P.less(y, 0) != P.less(mod, 0)), P.sub(q, 1.0), q)
    floor = P.floor(q)
    floor = P.where(P.sub(q, floor) > 0.5, P.add(floor, 1.0), floor)
    ratio = P.div(x, y)
    floor = P.where(q == 0, P.mul(ratio, 0.0), floor)  # a zero of x / y's sign
    return P.where(P.equal(y, 0), P.floor(ratio), floor)  # inf or nan, as x / y


@pytorch_keywords
def addcmul(input: Any, tensor1: Any, tensor2: Any, *rest: Any, value: Any = 1) -> Tensor:
    """input + value * tensor1 * tensor2 (also PyTorch's deprecated (value, tensor1, tensor2))."""
    if rest:
        value, (tensor1, tensor2) = tensor1, _old_overload("addcmul", (tensor2, *rest), 2)
    return P.add(input, _scaled(P.mul(tensor1, tensor2), value))


@pytorch_keywords
def addcdiv(input: Any, tensor1: Any, tensor2: Any, *rest: Any, value: Any = 1) -> Tensor:
    """input + value * tensor1 / tensor2 (also PyTorch's deprecated (value, tensor1, tensor2))."""
    if rest:
        value, (tensor1, tensor2) = tensor1, _old_overload("addcdiv", (tensor2, *rest), 2)
    return P.add(input, _scaled(P.div(tensor1, tensor2), value))


@pytorch_keywords
def lerp(input: Any, end: Any, weight: Any) -> Tensor:
    """input + weight * (end - input)."""
    return P.add(input, P.mul(weight, P.sub(end, input)))


def masked_fill(input: Any, mask: Any, value: Any) -> Tensor:
    """`value` where `mask` (broadcast) is true, else `input`; input's dtype."""
    x = as_tensor(input)
    out = P.where(as_tensor(mask), value, x)
    return out if out.dtype == x.dtype else out.astype(x.dtype)


def _truth(x: Any) -> Tensor:
    x = as_tensor(x)
    return x if x.dtype == np.bool_ else x != 0


@pytorch_keywords
def logical_not(input: Any) -> Tensor:
    return _truth(input) == False  # noqa: E712 (an elementwise comparison)


@pytorch_keywords
def logical_and(input: Any, other: Any) -> Tensor:
    return P.where(_truth(input), _truth(other), False)


@pytorch_keywords
def logical_or(input: Any, other: Any) -> Tensor:
    return P.where(_truth(input), True, _truth(other))


@pytorch_keywords
def logical_xor(input: Any, other: Any) -> Tensor:
    return _truth(input) != _truth(other)


def _bitwise(bits: Any, logical: Any) -> Any:
    """`&`, `|`, `^` and `~`: the op on integers' bits, the logical one on bool masks."""

    def op(*args: Any) -> Tensor:
        if all(a.dtype == np.bool_ if isinstance(a, Tensor) else isinstance(a, bool | np.bool_)
               for a in args):  # fmt: skip
            return logical(*args)
        return bits(*args)

    op.__name__ = op.__qualname__ = bits.name
    return op


bitwise_and = _bitwise(P.bitwise_and, logical_and)
bitwise_or = _bitwise(P.bitwise_or, logical_or)
bitwise_xor = _bitwise(P.bitwise_xor, logical_xor)
bitwise_not = _bitwise(P.bitwise_not, logical_not)


def relu(input: Any) -> Tensor:
    """max(0, x), with gradient 0 at 0 (maximum sends ties to its first operand)."""
    x = as_tensor(input)
    return P.maximum(0.0 if x._value.dtype.kind == "f" else 0, x)


def equal(input: Any, other: Any) -> bool:
    """Whether the two tensors have the same shape and elements (PyTorch's)."""
    a, b = as_tensor(input), as_tensor(other)
    return a.shape == b.shape and bool(np.array_equal(a.numpy(), b.numpy()))


@pytorch_keywords
def square(input: Any) -> Tensor:
    """x * x; booleans squared as int64, as PyTorch's."""
    x = as_tensor(input)
    x = x.astype(np.int64) if x.dtype.kind == "b" else x
    return x * x


@pytorch_keywords
def reciprocal(input: Any) -> Tensor:
    return 1.0 / as_tensor(input)


@pytorch_keywords
def deg2rad(input: Any) -> Tensor:
    return as_tensor(input) * (math.pi / 180.0)


@pytorch_keywords
def rad2deg(input: Any) -> Tensor:
    return as_tensor(input) * (180.0 / math.pi)


@pytorch_keywords
def sinc(input: Any) -> Tensor:
    """sin(pi x) / (pi x), 1 at 0; the 0 is replaced before dividing so the gradient there is
    0, not nan."""
    x = as_tensor(input)
    at_zero = x == 0.0
    safe = P.where(at_zero, 1.0, x) * math.pi
    return P.where(at_zero, 1.0, P.sin(safe) / safe)


@pytorch_keywords
def maximum(input: Any, other: Any) -> Tensor:
    """The larger of each pair; a tie's gradient is shared half and half, as PyTorch's (the op
    gives it all to `input`: clamp and relu, which rely on that, call the op)."""
    return _ties_shared(P.maximum, input, other)


@pytorch_keywords
def minimum(input: Any, other: Any) -> Tensor:
    """The smaller of each pair; a tie's gradient shared, as `maximum`'s."""
    return _ties_shared(P.minimum, input, other)


def _ties_shared(op: Any, input: Any, other: Any) -> Tensor:
    """op(x, y), and where x == y, (x + y) / 2: the same value (but where |x| is over half the
    dtype's largest), half the gradient each; every op at the broadcast shape."""
    x, y = (a if is_number(a) else as_tensor(a) for a in (input, other))
    if result_type(x, y).kind != "f":
        return op(x, y)
    return P.where(P.equal(x, y), P.mul(P.add(x, y), 0.5), op(x, y))


@pytorch_keywords
def fmax(input: Any, other: Any) -> Tensor:
    """maximum, ignoring a nan on one side."""
    x, y = as_tensor(input), as_tensor(other)
    return P.where(y != y, x, P.where(x != x, y, P.maximum(x, y)))


@pytorch_keywords
def fmin(input: Any, other: Any) -> Tensor:
    x, y = as_tensor(input), as_tensor(other)
    return P.where(y != y, x, P.where(x != x, y, P.minimum(x, y)))


@pytorch_keywords
def floor_divide(input: Any, other: Any) -> Tensor:
    """input // other, rounded down; integers stay integers, as PyTorch's `//`."""
    return div(input, other, rounding_mode="floor")


def isnan(input: Any) -> Tensor:
    x = as_tensor(input)
    return x != x


def isinf(input: Any) -> Tensor:
    return P.abs(input) == math.inf


def isfinite(input: Any) -> Tensor:
    x = as_tensor(input)
    if x.dtype.kind not in "fc":  # integers and booleans are all finite
        return x == x
    return (x - x) == 0.0  # inf - inf and nan - nan are nan


@pytorch_keywords
def round(input: Any, *, decimals: int = 0) -> Tensor:
    """Rounded half to even; no gradient, as it is piecewise constant."""
    scale = 10.0**decimals
    return P.rint(as_tensor(input) * scale) / scale if decimals else P.rint(input)


@pytorch_keywords
def nan_to_num(input: Any, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:  # fmt: skip
    """nan and infinities replaced by finite numbers; gradient 1 where x was finite, else 0.
    Integers and booleans have none: a copy of the same dtype, as PyTorch's."""
    x = as_tensor(input)
    if x.dtype.kind not in "fc":
        return P.where(x == x, x, x)
    big = bfloat16.finfo(x.dtype).max if x.dtype.kind == "f" else 0
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    return P.where(x != x, nan, P.where(x == math.inf, posinf, P.where(x == -math.inf, neginf, x)))


# --- complex numbers (PyTorch's convention for their gradients: see core/vocabulary.py) -------


@pytorch_keywords
def real(input: Any) -> Tensor:
    """The real part of a complex tensor, a view (writing it writes the tensor); a real tensor
    itself."""
    x = as_tensor(input)
    if x.dtype.kind != "c":
        return x
    return viewing(x, P.real(x), lambda v: P.complex(v, P.imag(x)))


@pytorch_keywords
def imag(input: Any) -> Tensor:
    """The imaginary part of a complex tensor, a view (a real one has none, as in PyTorch)."""
    x = as_tensor(input)
    if x.dtype.kind != "c":
        raise RuntimeError(f"imag is not implemented for tensors with non-complex dtypes "
                           f"({x.dtype})")  # fmt: skip
    return viewing(x, P.imag(x), lambda v: P.complex(P.real(x), v))


@pytorch_keywords
def conj(input: Any) -> Tensor:
    """The complex conjugate (computed: PyTorch's lazy conjugate bit has no counterpart, so
    `conj_physical`, `resolve_conj` and `resolve_neg` are this or the tensor itself); a real
    tensor itself."""
    x = as_tensor(input)
    return P.conj(x) if x.dtype.kind == "c" else x


conj_physical = conj


def resolve_conj(input: Any) -> Tensor:
    return as_tensor(input)


resolve_neg = resolve_conj


@pytorch_keywords
def angle(input: Any) -> Tensor:
    """The argument of a complex number; of a real one pi for x < 0, else 0 (its gradient 0),
    of integers in the default float dtype."""
    x = as_tensor(input)
    return P.angle(x if x.dtype.kind in "fc" else x.astype(get_default_dtype()))


def is_complex(input: Tensor) -> bool:
    return as_tensor(input).dtype.kind == "c"


@pytorch_keywords
def complex(real: Any, imag: Any) -> Tensor:  # noqa: A001 (PyTorch's name)
    """real + i imag, of float tensors of one dtype (float32 parts make complex64)."""
    re, im = as_tensor(real), as_tensor(imag)
    if re.dtype != im.dtype:
        raise RuntimeError(f"complex: expected parts of one dtype, got {re.dtype} and {im.dtype}")
    return P.complex(re, im)


@pytorch_keywords
def polar(abs: Any, angle: Any) -> Tensor:  # noqa: A002 (PyTorch's names)
    """abs (cos angle + i sin angle)."""
    r, theta = as_tensor(abs), as_tensor(angle)
    return P.complex(r * P.cos(theta), r * P.sin(theta))


def view_as_real(input: Any) -> Tensor:
    """A complex tensor as real pairs along a new last axis: (..., 2) of its parts. A view:
    an in-place op on it writes the complex tensor (optimizers update complex parameters so)."""
    x = as_tensor(input)
    if x.dtype.kind != "c":
        raise RuntimeError(f"view_as_real is only supported for complex tensors, not {x.dtype}")
    return viewing(x, stack([P.real(x), P.imag(x)], -1), _as_complex)


def _as_complex(pairs: Tensor) -> Tensor:
    return P.complex(pairs[..., 0], pairs[..., 1])


def view_as_complex(input: Any) -> Tensor:
    """Real pairs along the last axis (..., 2) as complex numbers; a view, as view_as_real's."""
    x = as_tensor(input)
    if x.dtype not in (np.float32, np.float64):
        raise RuntimeError("view_as_complex is only supported for float and double tensors, "
                           f"but got a tensor of scalar type: {x.dtype}")  # fmt: skip
    if x.ndim == 0 or x.shape[-1] != 2:
        raise RuntimeError(f"view_as_complex: the tensor must have a last dimension of size 2, "
                           f"not shape {x.shape}")  # fmt: skip
    return viewing(x, _as_complex(x), lambda v: stack([P.real(v), P.imag(v)], -1))


@pytorch_keywords
def frac(input: Any) -> Tensor:
    """The fractional part, with the input's sign: x - trunc(x)."""
    x = as_tensor(input)
    return x - P.trunc(x)


@pytorch_keywords
def heaviside(input: Any, values: Any) -> Tensor:
    """The step function: 0 below zero, 1 above, `values` at zero."""
    x = as_tensor(input)
    return P.where(x == 0, values, (x > 0).astype(x.dtype))


@pytorch_keywords
def copysign(input: Any, other: Any) -> Tensor:
    """|input| with the sign of `other` (-0.0 counts as negative, as in IEEE)."""
    x, y = as_tensor(input), as_tensor(other)
    dtype = result_type(x, y)
    dtype = dtype if dtype.kind == "f" else get_default_dtype()  # integers: the default float
    x = x if x.dtype == dtype else x.astype(dtype)
    negative = signbit(y)
    return P.where(negative, -P.abs(x), P.abs(x))


@pytorch_keywords
def signbit(input: Any) -> Tensor:
    """Whether the sign bit is set (true for -0.0), without gradient."""
    x = as_tensor(input).detach()
    if x.dtype.kind != "f":
        return x < 0
    return (x < 0) | ((x == 0) & (P.arctan2(x, -1.0) < 0))  # atan2(-0.0, -1) is -pi


@pytorch_keywords
def float_power(input: Any, exponent: Any) -> Tensor:
    """input ** exponent in float64, as PyTorch's."""
    x, e = as_tensor(input).astype(np.float64), as_tensor(exponent)
    return P.pow(x, e.astype(np.float64) if e.dtype.kind == "f" else e)


@pytorch_keywords
def isposinf(input: Any) -> Tensor:
    x = as_tensor(input)
    return x == math.inf


@pytorch_keywords
def isneginf(input: Any) -> Tensor:
    x = as_tensor(input)
    return x == -math.inf


def isreal(input: Any) -> Tensor:
    """Where the imaginary part is 0 (everywhere, for a real tensor)."""
    x = as_tensor(input)
    if x.dtype.kind == "c":
        return P.imag(x) == 0.0
    return Tensor._of(np.ones(x.shape, np.bool_))


def isclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:  # fmt: skip
    """|input - other| <= atol + rtol * |other| elementwise (infinities equal only to
    themselves; nan equal to nan if `equal_nan`)."""
    x, y = as_tensor(input), as_tensor(other)
    if x.dtype.kind == "b" and y.dtype.kind == "b":
        return x == y
    close = (x == y) | (P.abs(x - y) <= atol + rtol * P.abs(y))
    return close | (isnan(x) & isnan(y)) if equal_nan else close


def allclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:  # fmt: skip
    """Whether `isclose` holds everywhere: one Python bool, read eagerly."""
    return bool(isclose(input, other, rtol, atol, equal_nan).numpy().all())


def sign(input: Any) -> Tensor:
    """-1, 0 or 1 by the sign; 0 at nan and a bool tensor itself, as PyTorch's (NumPy's sign
    of nan is nan: tracegrad.numpy.sign)."""
    x = as_tensor(input)
    if x.dtype == np.bool_:
        return x
    return P.where(isnan(x), 0, P.sign(x)) if x.dtype.kind == "f" else P.sign(x)


def sgn(input: Any) -> Tensor:
    """z / |z| (0 at 0) of a complex tensor, differentiable; `sign` of a real one."""
    x = as_tensor(input)
    if x.dtype.kind != "c":
        return sign(x)
    r = P.abs(x)
    return x / P.where(r == 0.0, 1.0, r)


@pytorch_keywords
def ldexp(input: Any, other: Any) -> Tensor:
    """input * 2 ** other, a float (the default one for integers), as PyTorch's: in input's
    float dtype (a float16 input stays float16)."""
    x, e = as_tensor(input), as_tensor(other)
    dtype = result_type(x, e)
    scale = P.pow(
        2.0,
        e
        if e.dtype.kind in "fc"
        else e.astype(dtype if dtype.kind in "fc" else get_default_dtype()),
    )
    return mul(x, scale)


class FrexpResult(NamedTuple):
    mantissa: Tensor
    exponent: Tensor


def frexp(input: Any) -> FrexpResult:
    """(mantissa, exponent) with input = mantissa * 2 ** exponent, |mantissa| in [0.5, 1) (the
    input itself at 0, infinities and nan, exponent 0); the exponent int32 and without gradient,
    the mantissa's gradient 2 ** -exponent, as PyTorch's. Floating tensors only."""
    x = as_tensor(input)
    if x.dtype.kind != "f":
        raise ShapeError("torch.frexp() only supports floating-point dtypes")
    return FrexpResult(P.frexp_mantissa(x), P.frexp_exponent(x))


@pytorch_keywords
def nextafter(input: Any, other: Any) -> Tensor:
    """The next float after each input element towards `other` (PyTorch's promotion; floating
    tensors only). Its gradient is PyTorch's: the cotangent itself for input, zeros for other."""
    return P.nextafter(input, other)


@pytorch_keywords
def hardshrink(input: Any, lambd: float = 0.5) -> Tensor:
    """x where |x| > lambd, else 0."""
    x = as_tensor(input)
    return P.where(P.abs(x) > lambd, x, 0.0).astype(x.dtype)


@pytorch_keywords
def prelu(input: Any, weight: Any) -> Tensor:
    """x where x > 0, else weight * x, with one weight for every channel (dim 1) or one each."""
    x, w = as_tensor(input), as_tensor(weight)
    if w.size > 1:
        if x.ndim < 2 or x.shape[1] != w.size:
            raise ShapeError(f"prelu: {w.size} weights for input {x.shape}: need one, or one "
                             "per channel (dim 1)")  # fmt: skip
        w = reshape(w, (w.size,) + (1,) * (x.ndim - 2))
    return P.where(x > 0.0, x, w * x)


def clamp_min(input: Any, min: Any) -> Tensor:
    return P.maximum(input, min)


def clamp_max(input: Any, max: Any) -> Tensor:
    return P.minimum(input, max)


__all__ = [
    "absolute", "add", "addcdiv", "addcmul", "allclose", "angle", "bitwise_and", "bitwise_not",
    "bitwise_or", "bitwise_xor", "clamp_max", "clamp_min", "complex", "conj", "conj_physical",
    "copysign", "deg2rad", "div", "divide", "eq", "equal", "fix", "float_power", "floor_divide",
    "fmax", "fmin", "frac", "frexp", "ge", "greater", "greater_equal", "gt", "hardshrink",
    "heaviside", "imag", "is_complex", "isclose", "isfinite", "isinf", "isnan", "isneginf",
    "isposinf", "isreal", "ldexp", "le", "lerp", "less", "less_equal", "logical_and",
    "logical_not", "logical_or", "logical_xor", "lt", "masked_fill", "maximum", "minimum", "mul",
    "multiply", "nan_to_num", "ne", "negative", "nextafter", "not_equal", "polar", "prelu",
    "rad2deg", "real", "reciprocal", "relu", "resolve_conj", "resolve_neg", "round", "sgn",
    "sign", "signbit", "sinc", "square", "sub", "subtract", "true_divide", "view_as_complex",
    "view_as_real",
]  # fmt: skip

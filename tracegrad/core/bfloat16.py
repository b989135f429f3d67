"""bfloat16 as NumPy holds it here: each element's bits (the upper half of a float32's) in a
one-field structured dtype, since NumPy has no bfloat16. Such arrays are made, viewed, indexed
and converted (to and from float32, rounding to nearest even as PyTorch does). NumPy has no
arithmetic for them: an op given bfloat16 operands computes in float32 and rounds its float
results to bfloat16 (`Widen`), as PyTorch's CPU kernels do, one op at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

BFLOAT16 = np.dtype([("bfloat16", "<u2")])
HALF = (BFLOAT16, np.dtype(np.float16))  # the floats PyTorch's CPU kernels compute in float32


class Widen(TypeError):
    """An op's shape rule met bfloat16 operands: the caller computes it in float32 instead
    (`tensor.bind`). Raised, not asked at every op, so that float32 ops pay nothing for it."""


def to_bfloat16(a: Any) -> np.ndarray:
    """Values (anything float32 takes) as bfloat16 bits, rounded to nearest, ties to even."""
    f = np.asarray(a, np.float32)
    flat = f.reshape(-1)  # a copy only where `a` is not contiguous
    bits = flat.view(np.uint32)
    rounded = bits >> 16  # in place from here: every op of bfloat16 operands rounds its result
    rounded &= 1
    rounded += 0x7FFF
    rounded += bits
    rounded >>= 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(flat)
    if nan.any():
        out[nan] = 0x7FC0  # a quiet NaN (rounding could reach infinity)
    return out.view(BFLOAT16).reshape(f.shape)


def from_bfloat16(a: np.ndarray) -> np.ndarray:
    """bfloat16 bits as the float32 values they are (exactly)."""
    bits = np.ascontiguousarray(a).reshape(-1).view(np.uint16).astype(np.uint32)
    bits <<= 16
    return bits.view(np.float32).reshape(np.shape(a))


def rounded(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16's precision, as float32 (a cast there and back)."""
    return from_bfloat16(to_bfloat16(x))


def cast(x: np.ndarray, dtype: Any) -> np.ndarray:
    """`x.astype(dtype)`, through float32 where either side is bfloat16."""
    dtype = np.dtype(dtype)
    if x.dtype == BFLOAT16:
        return x.copy() if dtype == BFLOAT16 else from_bfloat16(x).astype(dtype)
    return to_bfloat16(x) if dtype == BFLOAT16 else x.astype(dtype)


def readable(a: Any) -> Any:
    """An array as its values: bfloat16 bits as float32 (for printing, item, tolist)."""
    return from_bfloat16(a) if getattr(a, "dtype", None) == BFLOAT16 else a


def as_dtype(value: Any, dtype: Any) -> np.ndarray:
    """`np.asarray(value, dtype)`, through float32 where `dtype` is bfloat16: NumPy would cast
    a number into the bits' stand-in as an integer (5.66 as the subnormal 5 * 2**-133)."""
    if np.dtype(dtype) == BFLOAT16:
        return value if getattr(value, "dtype", None) == BFLOAT16 else to_bfloat16(value)
    return np.asarray(value, dtype)


def full(shape: Any, value: Any, dtype: Any) -> np.ndarray:
    """`np.full`, made in float32 and rounded where `dtype` is bfloat16 (`as_dtype`'s reason)."""
    if np.dtype(dtype) == BFLOAT16:
        return to_bfloat16(np.full(shape, value, np.float32))
    return np.full(shape, value, dtype)


class _Limits:
    """bfloat16's `np.finfo`: float32's exponent, 8 bits of precision (7 stored)."""

    bits, nmant = 16, 7
    eps, max, min = 2.0**-7, 3.3895313892515355e38, -3.3895313892515355e38
    tiny = smallest_normal = 2.0**-126
    dtype = BFLOAT16


def finfo(dtype: Any) -> Any:
    """`np.finfo`, knowing bfloat16."""
    return _Limits if np.dtype(dtype) == BFLOAT16 else np.finfo(dtype)


def can_cast(source: Any, target: Any, casting: str = "same_kind") -> bool:
    """`np.can_cast`, taking bfloat16 for the float it is (NumPy sees a structured dtype)."""
    source, target = (np.float32 if np.dtype(d) == BFLOAT16 else d for d in (source, target))
    return np.can_cast(source, target, casting)

"""PyTorch's type promotion, which the top level and Tensor methods follow (`tracegrad.numpy`
casts to NumPy's loop dtypes before it calls them, so its names keep NumPy's meaning).

Where the two disagree: an integer and a float combine into the float's dtype (int64 with
float32 is float32, not float64); a Python float beside integers, and a float function of
integers (sqrt, true division), give the default dtype; a 0-d tensor of the same category
as the dimensioned operands does not widen them (float32 beside a float64 scalar tensor stays
float32). Operands fall in three groups, dimensioned tensors above 0-d tensors above Python
numbers, and categories bool < integer < float < complex: a lower group only counts where
its category is higher."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from tracegrad.core.bfloat16 import BFLOAT16

_default_float = np.dtype(np.float32)


def get_default_dtype() -> np.dtype:
    """The dtype of Python floats made tensors and of float constructors (PyTorch's default
    dtype): float32 unless `set_default_dtype` changed it."""
    return _default_float


def set_default_dtype(dtype: Any) -> None:
    """Make Python floats, float constructors (zeros, randn, ...) and new layers' parameters
    `dtype`, a float (float32 the default), as PyTorch's set_default_dtype (transformers'
    `from_pretrained(dtype=torch.bfloat16)` sets it while it builds the model)."""
    global _default_float
    d = np.dtype(dtype)
    if d not in (np.float32, np.float64, np.float16, BFLOAT16):
        raise TypeError(f"set_default_dtype: only floating-point types are supported, not {d}")
    _default_float = d


@contextlib.contextmanager
def default_dtype(dtype: Any) -> Iterator[None]:
    """`set_default_dtype(dtype)` inside the block, the previous default restored after."""
    global _default_float
    previous = _default_float
    set_default_dtype(dtype)
    try:
        yield
    finally:
        _default_float = previous


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3, "V": 2}  # "V": bfloat16's bits


def category(dtype: np.dtype) -> int:
    """0 bool, 1 integer, 2 float, 3 complex."""
    return _CATEGORY[dtype.kind]


def promote_types(a: Any, b: Any) -> np.dtype:
    """PyTorch's: within a category (or between float and complex) NumPy's promotion, across
    categories the higher one's dtype (int64 with float16 is float16)."""
    a, b = np.dtype(a), np.dtype(b)
    ka, kb = category(a), category(b)
    if BFLOAT16 in (a, b) and a != b and ka >= 2 and kb >= 2:  # NumPy knows no bfloat16
        return np.promote_types(np.float32, b if a == BFLOAT16 else a)  # as float16: float32
    if ka == kb or (ka >= 2 and kb >= 2):
        return a if a == b else np.promote_types(a, b)
    return a if ka > kb else b


def is_number(a: Any) -> bool:
    """A Python number (NumPy's float64 and complex128 scalars are Python floats and complexes),
    which takes its dtype from the tensors beside it."""
    return isinstance(a, int | float | complex)


def number_dtype(a: Any) -> np.dtype:
    """The dtype standing for a Python number among others of its group."""
    if isinstance(a, bool):
        return np.dtype(np.bool_)
    if isinstance(a, int):
        return np.dtype(np.int64)
    if isinstance(a, float):
        return _default_float
    return np.dtype(np.complex128 if _default_float == np.float64 else np.complex64)


def result_type(*operands: Any) -> np.dtype:
    """The dtype PyTorch computes an elementwise op of `operands` (tensors, arrays, Python
    numbers) in: `torch.result_type`."""
    groups: list[np.dtype | None] = [None, None, None]  # dimensioned, 0-d, numbers
    for a in operands:
        if is_number(a):
            group, dtype = 2, number_dtype(a)
        else:
            group, dtype = (0 if a.ndim else 1), np.dtype(a.dtype)
        held = groups[group]
        groups[group] = dtype if held is None else promote_types(held, dtype)
    dimensioned, zero_d, numbers = groups
    return _combine(dimensioned, _combine(zero_d, numbers))


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    """A higher group's dtype, unless the lower group's category is above it (c10's
    combine_categories)."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    kh, kl = category(higher), category(lower)
    if kh == 3:
        return higher
    if kl == 3:  # a complex number beside floats keeps their precision
        return promote_types(higher, np.complex64) if kh == 2 else lower
    if kh == 2:
        return higher
    if kh == 0 or kl == 2:
        return promote_types(higher, lower)
    return higher

"""`torch.testing`: `assert_close` with PyTorch's default tolerances per dtype, over tensors,
arrays, numbers and nested sequences and mappings of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["assert_allclose", "assert_close"]

# PyTorch's defaults: (rtol, atol) by the dtype compared
_TOLERANCES = {np.dtype(np.float16): (1e-3, 1e-5), np.dtype(np.float32): (1.3e-6, 1e-5),
               np.dtype(np.float64): (1e-7, 1e-7)}  # fmt: skip


def assert_close(actual: Any, expected: Any, *, allow_subclasses: bool = True,
                 rtol: float | None = None, atol: float | None = None, equal_nan: bool = False,
                 check_device: bool = True, check_dtype: bool = True, check_layout: bool = True,
                 check_stride: bool = False, msg: str | None = None) -> None:  # fmt: skip
    """Raise AssertionError unless |actual - expected| <= atol + rtol * |expected| everywhere
    (exactly equal for integers and bools), with equal shapes and, unless `check_dtype` is
    False, equal dtypes."""
    if (rtol is None) != (atol is None):
        raise ValueError("assert_close: give both rtol and atol, or neither")
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping) or set(actual) != set(expected):
            raise AssertionError(msg or f"keys differ: {list(actual)} and {list(expected)}")
        for key in expected:
            assert_close(actual[key], expected[key], rtol=rtol, atol=atol, equal_nan=equal_nan,
                         check_dtype=check_dtype, msg=msg)  # fmt: skip
        return
    if isinstance(expected, Sequence) and not isinstance(expected, str):
        if not isinstance(actual, Sequence) or len(actual) != len(expected):
            raise AssertionError(msg or "sequences of different lengths")
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan,
                         check_dtype=check_dtype, msg=msg)  # fmt: skip
        return
    a, e = _array(actual), _array(expected)
    if a.shape != e.shape:
        raise AssertionError(msg or f"The values for attribute 'shape' do not match: {a.shape} "
                                    f"!= {e.shape}.")  # fmt: skip
    both_tensors = isinstance(actual, Tensor) and isinstance(expected, Tensor)
    if check_dtype and both_tensors and a.dtype != e.dtype:
        raise AssertionError(msg or f"The values for attribute 'dtype' do not match: {a.dtype} "
                                    f"!= {e.dtype}.")  # fmt: skip
    if rtol is None:
        rtol, atol = _TOLERANCES.get(np.promote_types(a.dtype, e.dtype), (0.0, 0.0))
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan):
        bad = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
        worst = np.max(np.abs(a.astype(np.float64) - e.astype(np.float64))[bad])
        raise AssertionError(
            msg
            or f"Tensor-likes are not close!\n\nMismatched elements: {bad.sum()} / {a.size}"
            f"\nGreatest absolute difference: {worst} (up to {atol} allowed, rtol {rtol})"
        )


def assert_allclose(actual: Any, expected: Any, rtol: float | None = None,
                    atol: float | None = None, equal_nan: bool = True,
                    msg: str = "") -> None:  # fmt: skip
    """PyTorch's deprecated spelling: `assert_close` without the dtype check."""
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False,
                 msg=msg or None)  # fmt: skip


def _array(x: Any) -> np.ndarray:
    return np.asarray(x.detach().numpy() if isinstance(x, Tensor) else x)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

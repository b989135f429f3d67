"""`torch.testing`: `assert_close` with PyTorch's default tolerances per dtype, over tensors,
arrays, numbers and nested sequences and mappings of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracegrad.core.bfloat16 import BFLOAT16, readable
from tracegrad.frontend.promotion import promote_types
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["assert_allclose", "assert_close", "make_tensor"]

# PyTorch's defaults: (rtol, atol) by the dtype compared
_TOLERANCES = {np.dtype(np.float16): (1e-3, 1e-5), BFLOAT16: (1.6e-2, 1e-5),
               np.dtype(np.float32): (1.3e-6, 1e-5),
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
        rtol, atol = _TOLERANCES.get(promote_types(a.dtype, e.dtype), (0.0, 0.0))
    a, e = readable(a), readable(e)  # bfloat16's bits as their values
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


def make_tensor(*shape: Any, dtype: Any, device: Any = None, low: float | None = None,
                high: float | None = None, requires_grad: bool = False,
                noncontiguous: bool = False, exclude_zero: bool = False,
                memory_format: Any = None) -> Tensor:  # fmt: skip
    """PyTorch's test tensor: uniform in [low, high) (by default [-9, 9) for floats, [-9, 10)
    for integers, [0, 10) for unsigned ones; bools either way); with `exclude_zero` a zero
    becomes the dtype's smallest positive step (1 for integers). The data are tracegrad's draws,
    not PyTorch's."""
    from tracegrad.frontend import creation

    dims = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
    kind = np.dtype(dtype)
    if kind.kind == "b":
        return Tensor._of(creation.rand(*dims).numpy() < 0.5).requires_grad_(requires_grad)
    lo = (0 if kind.kind == "u" else -9) if low is None else low
    hi = (10 if kind.kind in "iu" else 9) if high is None else high
    if low is not None and high is not None and low > high:
        raise ValueError(f"make_tensor: low {low} must not exceed high {high}")
    values = lo + (hi - lo) * creation.rand(*dims, dtype=np.float64).numpy()
    values = np.floor(values) if kind.kind in "iu" else values
    if exclude_zero:
        values[values == 0] = 1 if kind.kind in "iu" else float(np.finfo(kind).tiny)
    out = Tensor._of(values.astype(kind))
    return out.requires_grad_() if requires_grad else out


def _array(x: Any) -> np.ndarray:
    return np.asarray(x.detach().numpy() if isinstance(x, Tensor) else x)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""torch's functions that are other spellings of tracegrad's (`row_stack`, `unsafe_split`, the
`*_copy` forms of views), legacy settings (`set_default_tensor_type`), the symbolic-size helpers
PyTorch code calls on plain ints (`sym_max`), control flow as functions (`cond`,
`while_loop`) and count draws (`poisson`, `binomial`)."""

from __future__ import annotations

import builtins
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import tracegrad as _tg
from tracegrad.distributions.counts import binomial_draws, poisson_draws
from tracegrad.frontend import random
from tracegrad.frontend.functions import pytorch_keywords
from tracegrad.frontend.storage import UntypedStorage
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import functional as F

__all__ = [
    "binomial", "compiled_with_cxx11_abi", "cond", "constant_pad_nd", "empty_strided",
    "frobenius_norm", "get_device", "is_conj", "is_neg", "is_signed", "is_storage",
    "nuclear_norm", "poisson", "range", "row_stack", "set_default_tensor_type", "sym_float",
    "sym_int", "sym_ite", "sym_max", "sym_min", "sym_not", "sym_sqrt", "sym_sum",
    "unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes", "while_loop", "is_inference",
    "OutOfMemoryError", "is_vulkan_available",
]  # fmt: skip

row_stack = _tg.vstack
unsafe_chunk, unsafe_split = _tg.chunk, _tg.split  # PyTorch's skip a check of in-place use


def unsafe_split_with_sizes(input: Tensor, split_sizes: Sequence[int], dim: int = 0) -> list:
    return _tg.split(input, list(split_sizes), dim)


def set_default_tensor_type(t: Any) -> None:
    """PyTorch's deprecated setting: the default float dtype of `torch.FloatTensor` or
    `torch.DoubleTensor` (by type or by name); CUDA types are refused."""
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.",
                  UserWarning, stacklevel=2)  # fmt: skip
    name = t if isinstance(t, str) else f"torch.{getattr(t, '__name__', t)}"
    if "cuda" in name:
        raise RuntimeError(f"set_default_tensor_type({name}): tracegrad has no CUDA device")
    dtypes = {"torch.FloatTensor": np.float32, "torch.DoubleTensor": np.float64,
              "torch.HalfTensor": np.float16}  # fmt: skip
    if name not in dtypes:
        raise TypeError(f"set_default_tensor_type: only floating-point types are supported as "
                        f"the default type, got {name}")  # fmt: skip
    _tg.set_default_dtype(dtypes[name])


def empty_strided(size: Sequence[int], stride: Sequence[int], *, dtype: Any = None,
                  layout: Any = None, device: Any = None, requires_grad: bool = False,
                  pin_memory: bool = False) -> Tensor:  # fmt: skip
    """An uninitialized tensor of `size`. Tensors here are row-major (`stride()` says so), so
    `stride` is checked and the layout is not kept: values are what a layout does not change."""
    if len(stride) != len(size):
        raise RuntimeError(f"empty_strided: mismatch in length of strides and shape: size "
                           f"{list(size)}, stride {list(stride)}")  # fmt: skip
    return _tg.empty(tuple(size), dtype=dtype or _tg.get_default_dtype(),
                     requires_grad=requires_grad)  # fmt: skip


def get_device(input: Tensor) -> int:
    """-1: the CPU, as PyTorch's answer for a CPU tensor."""
    return input.get_device()


def is_signed(input: Tensor) -> bool:
    return input.is_signed()


def is_conj(input: Tensor) -> bool:
    """False: conjugation here makes a new tensor, never a lazy bit on a view."""
    return False


is_neg = is_conj


def is_inference(input: Tensor) -> bool:
    return input.is_inference()


def is_vulkan_available() -> bool:
    return False


class OutOfMemoryError(RuntimeError):
    """What PyTorch raises when a device's allocator fails; code catches it by this name. The
    CPU's allocations fail with NumPy's MemoryError here."""


def is_storage(obj: Any) -> bool:
    return isinstance(obj, UntypedStorage)


def compiled_with_cxx11_abi() -> bool:
    """What build scripts of C++ extensions ask (none are built here)."""
    return True


@pytorch_keywords
def constant_pad_nd(input: Tensor, pad: Sequence[int], value: float = 0.0) -> Tensor:
    return F.pad(input, list(pad), "constant", value)


def frobenius_norm(input: Tensor, dim: Any = (-2, -1), keepdim: bool = False) -> Tensor:
    """The deprecated spelling of the 2-norm over `dim`."""
    return _tg.linalg.vector_norm(input, 2, dim, keepdim)


def nuclear_norm(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """The deprecated spelling of `linalg.matrix_norm(input, "nuc", dim)`."""
    if isinstance(dim, bool):  # nuclear_norm(input, keepdim)
        dim, keepdim = None, dim
    return _tg.linalg.matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim)


def range(start: float, end: float, step: float = 1, *, dtype: Any = None,
          **kwargs: Any) -> Tensor:  # noqa: A001 (PyTorch's name)  # fmt: skip
    """PyTorch's deprecated inclusive `arange`: start, start + step, ... up to `end` included,
    in the default float dtype."""
    warnings.warn("torch.range is deprecated and will be removed in a future release because "
                  "its behavior is inconsistent with Python's range builtin. Instead, use "
                  "torch.arange, which produces values in [start, end).",
                  UserWarning, stacklevel=2)  # fmt: skip
    count = builtins.int(math.floor((end - start) / step)) + 1
    values = start + step * np.arange(builtins.max(count, 0), dtype=np.float64)
    return _tg.tensor(values, dtype=dtype or _tg.get_default_dtype(), **kwargs)


def poisson(input: Tensor, generator: Any = None) -> Tensor:
    """Poisson draws of the rates in `input`, in its dtype (no gradient, as PyTorch's)."""
    return poisson_draws(input, random.state_of(generator))


def binomial(count: Tensor, prob: Tensor, generator: Any = None) -> Tensor:
    """Binomial draws of `count` trials of probability `prob` (no gradient)."""
    return binomial_draws(count, prob, random.state_of(generator))


def cond(pred: Any, true_fn: Callable, false_fn: Callable, operands: Sequence[Any] = ()) -> Any:
    """`true_fn(*operands)` if `pred` else `false_fn(*operands)`: PyTorch's branch as a
    function (inside a compiled step a tensor `pred` is read as any `if` on a tensor is)."""
    return (true_fn if builtins.bool(pred) else false_fn)(*operands)


def while_loop(cond_fn: Callable, body_fn: Callable, carried_inputs: Sequence[Any]) -> Any:
    """Run `body_fn` on the carried values while `cond_fn` of them holds; the last values."""
    values = tuple(carried_inputs)
    while builtins.bool(cond_fn(*values)):
        values = tuple(body_fn(*values))
    return values


# the symbolic-size helpers: sizes here are always ints, so these are Python's own
def sym_int(a: Any) -> int:
    return math.trunc(a) if isinstance(a, builtins.float) else builtins.int(a)


def sym_float(a: Any) -> float:
    return builtins.float(a)


def sym_max(a: Any, b: Any) -> Any:
    return builtins.max(a, b)


def sym_min(a: Any, b: Any) -> Any:
    return builtins.min(a, b)


def sym_not(a: Any) -> bool:
    return not a


def sym_ite(b: Any, t: Any, f: Any) -> Any:
    return t if b else f


def sym_sum(args: Sequence[Any]) -> Any:
    return builtins.sum(args)


def sym_sqrt(a: Any) -> float:
    return math.sqrt(a)


def _copying(view: str) -> Callable:
    def copy(input: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = getattr(input, view)(*args, **kwargs)
        return [t.clone() for t in out] if isinstance(out, list | tuple) else out.clone()

    copy.__name__ = copy.__qualname__ = f"{view}_copy"
    copy.__doc__ = f"`input.{view}(...)` as a new tensor, not a view (PyTorch's `{view}_copy`)."
    return copy


# the `*_copy` forms of views, which functionalized PyTorch code calls
COPIES = {f"{view}_copy": _copying(view) for view in (
    "as_strided", "detach", "diagonal", "expand", "narrow", "permute", "select", "split",
    "split_with_sizes", "squeeze", "t", "transpose", "unbind", "unfold", "unsqueeze", "view",
    "view_as_complex", "view_as_real",
)} | {"alias_copy": lambda input: input.clone()}  # fmt: skip

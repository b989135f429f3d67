"""Constructors with PyTorch's meanings: `tensor` copies its data (`as_tensor` and
`from_numpy` share an ndarray's memory), Python floats become float32, and sizes are given as
zeros(2, 3) or zeros((2, 3)). NumPy's (float64 by default, `array`, `asarray`) are in
`tracegrad.numpy`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.frontend.functions import astype, broadcast_to, pytorch_keywords
from tracegrad.frontend.tensor import Tensor
from tracegrad.frontend.tensor import as_tensor as _as_tensor


def tensor(data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A new leaf holding a copy of `data` (as torch.tensor; `as_tensor` and `from_numpy`
    share an ndarray's memory). Python floats become float32; an ndarray keeps its dtype."""
    if isinstance(data, Tensor) and not data.is_symbolic:
        data = data.numpy()
    if isinstance(data, np.ndarray | np.generic):
        data = np.array(data, dtype=dtype)
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


def as_tensor(data: Any, dtype: Any = None) -> Tensor:
    """`data` as a tensor, sharing its memory where it can (a tensor itself, an ndarray of the
    dtype); a list holding tensors is stacked (differentiably), never detached."""
    x = _as_tensor(data)
    return x if dtype is None else astype(x, dtype)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing `a`'s memory and dtype (as torch.from_numpy)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected an ndarray, got {type(a).__name__}")
    return Tensor(a)


def _shape_dtype(args: tuple, dtype: Any) -> tuple[tuple, Any]:
    """PyTorch's (*sizes) or ((sizes), dtype) positional arguments."""
    if args and not isinstance(args[0], int | np.integer):
        if len(args) > 2:
            raise TypeError(f"expected (shape, dtype) or integer sizes, got {args}")
        return tuple(args[0]), args[1] if len(args) == 2 else dtype
    return tuple(args), dtype


def zeros(*size: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    """zeros(2, 3) or zeros((2, 3)); float32 by default."""
    size, dtype = _shape_dtype(size, dtype)
    return Tensor(np.zeros(size, dtype), requires_grad=requires_grad)


def ones(*size: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    size, dtype = _shape_dtype(size, dtype)
    return Tensor(np.ones(size, dtype), requires_grad=requires_grad)


def eye(
    n: int, m: int | None = None, dtype: Any = np.float32, requires_grad: bool = False
) -> Tensor:
    return Tensor(np.eye(n, m, dtype=dtype), requires_grad=requires_grad)


def full(size: Any, fill_value: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """`fill_value` everywhere; a tensor `fill_value` is broadcast, so its gradient flows."""
    size = (size,) if isinstance(size, int) else tuple(size)
    if isinstance(fill_value, Tensor):
        return broadcast_to(fill_value if dtype is None else astype(fill_value, dtype), size)
    if dtype is None and type(fill_value) is float:
        dtype = np.float32  # Python floats become float32, as everywhere in tracegrad
    return Tensor(np.full(size, fill_value, dtype), requires_grad=requires_grad)


def zeros_like(input: Any, dtype: Any = None) -> Tensor:
    return zeros(input.shape, dtype=input.dtype if dtype is None else dtype)


def ones_like(input: Any, dtype: Any = None) -> Tensor:
    return ones(input.shape, dtype=input.dtype if dtype is None else dtype)


def full_like(input: Any, fill_value: Any, dtype: Any = None) -> Tensor:
    x = _as_tensor(input)
    return full(x.shape, fill_value, dtype or x.dtype)


empty_like = zeros_like


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None) -> Tensor:
    """Integers stay int64, floats become float32."""
    data = np.arange(start, end, step) if end is not None else np.arange(start)
    return Tensor(
        data if dtype is None and data.dtype.kind != "f" else data.astype(dtype or np.float32)
    )


@pytorch_keywords
def linspace(start: Any, end: Any, steps: int, dtype: Any = None) -> Tensor:
    """`steps` evenly spaced values from start to end; differentiable in tensor endpoints."""
    return spaced(start, end, steps, True, dtype, np.float32)


def spaced(start: Any, stop: Any, num: int, endpoint: bool, dtype: Any, default: Any) -> Tensor:
    """linspace's values; Python-number endpoints give `default` (the namespace's float)."""
    steps = np.linspace(0.0, 1.0, num, endpoint=endpoint)
    if not isinstance(start, Tensor) and not isinstance(stop, Tensor):
        python = all(type(v) in (int, float) for v in (start, stop))
        dtype = default if dtype is None and python else dtype
        return Tensor(np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype))
    start, stop = _as_tensor(start), _as_tensor(stop)
    out = start + (stop - start) * steps.astype(np.result_type(start.dtype, stop.dtype))
    return out if dtype is None else astype(out, dtype)


_generator = np.random.default_rng()


def seed(value: int) -> None:
    """Seed the generator behind randn, rand and randint (tracegrad.manual_seed seeds it too)."""
    global _generator
    _generator = np.random.default_rng(value)


def randn(*size: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    """Standard normal samples, randn(2, 3) or randn((2, 3))."""
    size, dtype = _shape_dtype(size, dtype)
    data = _generator.standard_normal(size).astype(dtype)
    return Tensor(data, requires_grad=requires_grad)


def rand(*size: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1)."""
    size, dtype = _shape_dtype(size, dtype)
    return Tensor(_generator.random(size).astype(dtype), requires_grad=requires_grad)


def randint(low: int, high: int, size: Sequence[int], dtype: Any = np.int64) -> Tensor:
    return Tensor(_generator.integers(low, high, tuple(size)).astype(dtype))


def randperm(n: int, dtype: Any = np.int64) -> Tensor:
    """A random permutation of 0..n-1."""
    return Tensor(_generator.permutation(n).astype(dtype))


__all__ = [
    "arange", "as_tensor", "empty_like", "eye", "from_numpy", "full", "full_like", "linspace",
    "ones", "ones_like", "rand", "randint", "randn", "randperm", "tensor", "zeros", "zeros_like",
]  # fmt: skip

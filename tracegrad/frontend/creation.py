"""Constructors with PyTorch's meanings: `tensor` copies its data (`as_tensor` and
`from_numpy` share an ndarray's memory), Python floats and float constructors give the default
dtype (float32 unless `set_default_dtype` says float64), and sizes are given as zeros(2, 3) or
zeros((2, 3)). Each takes PyTorch's `device=` (the CPU only), `requires_grad=` and `layout=`,
`pin_memory=`, `memory_format=` (accepted, meaningless here). NumPy's (float64, `array`,
`asarray`) are in `tracegrad.numpy`."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.ops import shapes
from tracegrad.frontend import random
from tracegrad.frontend.counting import data_dependent_shape
from tracegrad.frontend.device import check_device
from tracegrad.frontend.functions import astype, broadcast_to, pytorch_keywords
from tracegrad.frontend.promotion import default_dtype
from tracegrad.frontend.random import Generator
from tracegrad.frontend.tensor import Listeners, Tensor, get_default_dtype
from tracegrad.frontend.tensor import as_tensor as _as_tensor

# PyTorch's default generator: its counter-based state, which randn, rand, randint and randperm
# draw from, is the default one (dropout's and sampling's); `tracegrad.manual_seed` seeds it and
# returns it.
default_generator = Generator(state=random.default_state)
_IGNORED = frozenset({"layout", "pin_memory", "memory_format"})


def _check(where: str, device: Any, options: dict[str, Any]) -> None:
    """`device=` names the CPU; the other options are PyTorch's that mean nothing here."""
    check_device(device, where)
    unknown = set(options) - _IGNORED
    if unknown:
        hint = " (tensors are values here: use the result)" if "out" in unknown else ""
        raise TypeError(f"{where}() got unexpected keyword arguments {sorted(unknown)}{hint}")


def _float(dtype: Any) -> np.dtype:
    return get_default_dtype() if dtype is None else np.dtype(dtype)


def _bfloat16_via_float32(f: Any) -> Any:
    """A creation function asked for bfloat16, or making a float while bfloat16 is the default
    dtype, makes float32, then rounds it: NumPy would cast numbers into the bits' stand-in as
    integers (1.5 as a tiny subnormal), silently."""
    params = inspect.signature(f).parameters
    positional = params["dtype"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    at = list(params).index("dtype") if positional else 1 << 30  # after *size: keyword only

    @functools.wraps(f)
    def made(*args: Any, **kwargs: Any) -> Any:
        given = kwargs.get("dtype", args[at] if len(args) > at else None)
        if given is None and get_default_dtype() == BFLOAT16:  # a float made in the default
            with default_dtype(np.float32):
                out = f(*args, **kwargs)
            return astype(out, BFLOAT16) if out.dtype == np.float32 else out
        if given is None or np.dtype(given) != BFLOAT16:
            return f(*args, **kwargs)
        if len(args) > at:
            args = (*args[:at], np.float32, *args[at + 1 :])
        else:
            kwargs = {**kwargs, "dtype": np.float32}
        return astype(f(*args, **kwargs), BFLOAT16)

    return made


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
           **options: Any) -> Tensor:  # fmt: skip
    """A new leaf holding a copy of `data` (as torch.tensor; `as_tensor` and `from_numpy`
    share an ndarray's memory). Python floats get the default dtype; an ndarray keeps its."""
    _check("tensor", device, options)
    if isinstance(data, Tensor) and not data.is_symbolic:
        data = data.numpy()
    if isinstance(data, np.ndarray | np.generic) and (dtype is None or data.dtype == dtype):
        data = np.array(data)  # a copy; to another dtype `_init`'s cast copies (and rounds)
    return Tensor._of(data, dtype=dtype, requires_grad=requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """`data` as a tensor, sharing its memory where it can (a tensor itself, an ndarray of the
    dtype); a list holding tensors is stacked (differentiably), never detached."""
    check_device(device, "as_tensor")
    x = _as_tensor(data, dtype)  # Python data is made at dtype, not rounded through the default
    return x if dtype is None else astype(x, dtype)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing `a`'s memory and dtype (as torch.from_numpy). While tracing, an array
    argument of the traced function is already its tensor (read at each call)."""
    if not isinstance(a, np.ndarray):
        slot = Listeners.tracers[-1].slots.get(id(a)) if Listeners.tracers else None
        if slot is not None and slot.arg is not None:
            return a
        raise TypeError(f"from_numpy: expected an ndarray, got {type(a).__name__}")
    return Tensor._of(a)


def _shape_dtype(where: str, args: tuple, dtype: Any, size: Any = None) -> tuple[tuple, Any]:
    """PyTorch's (*sizes) or ((sizes), dtype) positional arguments, or its `size=` keyword."""
    if size is not None:
        if args:
            raise TypeError(f"{where}: sizes given twice, {args} and size={size}")
        return tuple(size), dtype
    if args and not isinstance(args[0], int | np.integer):
        if len(args) > 2:
            raise TypeError(f"{where}: expected (shape, dtype) or integer sizes, got {args}")
        return tuple(args[0]), args[1] if len(args) == 2 else dtype
    return tuple(args), dtype


def _filled(where: str, sizes: tuple, fill: Any, dtype: Any, device: Any,
            requires_grad: bool, options: dict) -> Tensor:  # fmt: skip
    size, dtype = _shape_dtype(where, sizes, dtype, options.pop("size", None))
    _check(where, device, options)
    return Tensor._of(np.full(size, fill, _float(dtype)), requires_grad=requires_grad)


@pytorch_keywords(aliases=False)  # out=: written into that tensor
@_bfloat16_via_float32
def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
          **options: Any) -> Tensor:  # fmt: skip
    """zeros(2, 3) or zeros((2, 3)); the default dtype (float32) unless `dtype`."""
    return _filled("zeros", size, 0, dtype, device, requires_grad, options)


@pytorch_keywords(aliases=False)
@_bfloat16_via_float32
def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
         **options: Any) -> Tensor:  # fmt: skip
    return _filled("ones", size, 1, dtype, device, requires_grad, options)


@pytorch_keywords(aliases=False)
@_bfloat16_via_float32
def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
          **options: Any) -> Tensor:  # fmt: skip
    """Zeros: PyTorch leaves them uninitialized, which no program may rely on."""
    return _filled("empty", size, 0, dtype, device, requires_grad, options)


@pytorch_keywords(aliases=False)
@_bfloat16_via_float32
def eye(n: int, m: int | None = None, dtype: Any = None, device: Any = None,
        requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    _check("eye", device, options)
    return Tensor._of(np.eye(n, m, dtype=_float(dtype)), requires_grad=requires_grad)


@pytorch_keywords(aliases=False)
@_bfloat16_via_float32
def full(size: Any, fill_value: Any, dtype: Any = None, device: Any = None,
         requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    """`fill_value` everywhere; a tensor `fill_value` is broadcast, so its gradient flows.
    A Python float gives the default dtype, an int int64 and a bool bool, as PyTorch's."""
    _check("full", device, options)
    size = (size,) if isinstance(size, int) else tuple(size)
    if isinstance(fill_value, Tensor):
        return broadcast_to(fill_value if dtype is None else astype(fill_value, dtype), size)
    if dtype is None and type(fill_value) is float:
        dtype = get_default_dtype()
    return Tensor._of(np.full(size, fill_value, dtype), requires_grad=requires_grad)


def _like(where: str, input: Any, dtype: Any, device: Any, options: dict) -> tuple:
    _check(where, device, options)
    x = _as_tensor(input)
    return x.shape, x.dtype if dtype is None else np.dtype(dtype)


def zeros_like(input: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
               **options: Any) -> Tensor:  # fmt: skip
    shape, dtype = _like("zeros_like", input, dtype, device, options)
    return Tensor._of(np.zeros(shape, dtype), requires_grad=requires_grad)


def ones_like(input: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
              **options: Any) -> Tensor:  # fmt: skip
    shape, dtype = _like("ones_like", input, dtype, device, options)
    return Tensor._of(bfloat16.full(shape, 1, dtype), requires_grad=requires_grad)


def full_like(input: Any, fill_value: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    """`fill_value` in the input's shape; bfloat16 (asked for or the input's) is made in
    float32 and rounded (`bfloat16.full`)."""
    shape, dtype = _like("full_like", input, dtype, device, options)
    return Tensor._of(bfloat16.full(shape, fill_value, dtype), requires_grad=requires_grad)


empty_like = zeros_like


@pytorch_keywords(aliases=False)
@_bfloat16_via_float32
def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: Any = None,
           requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    """Integers stay int64, floats get the default dtype."""
    _check("arange", device, options)
    data_dependent_shape("arange", start, end, step, why="its length is a value the step computes")
    data = np.arange(start, end, step) if end is not None else np.arange(start)
    if dtype is not None or data.dtype.kind == "f":
        data = data.astype(_float(dtype))
    return Tensor._of(data, requires_grad=requires_grad)


@pytorch_keywords
@_bfloat16_via_float32
def linspace(start: Any, end: Any, steps: int, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
    """`steps` evenly spaced values from start to end; differentiable in tensor endpoints."""
    check_device(device, "linspace")
    out = spaced(start, end, steps, True, dtype, get_default_dtype())
    return out.requires_grad_() if requires_grad else out


@_bfloat16_via_float32
def logspace(start: Any, end: Any, steps: int, base: float = 10.0, dtype: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """base ** linspace(start, end, steps)."""
    check_device(device, "logspace")
    exponents = np.linspace(start, end, steps)
    out = Tensor._of(np.power(float(base), exponents).astype(_float(dtype)))
    return out.requires_grad_() if requires_grad else out


def spaced(start: Any, stop: Any, num: int, endpoint: bool, dtype: Any, default: Any) -> Tensor:
    """linspace's values; Python-number endpoints give `default` (the namespace's float)."""
    steps = np.linspace(0.0, 1.0, num, endpoint=endpoint)
    if not isinstance(start, Tensor) and not isinstance(stop, Tensor):
        python = all(type(v) in (int, float) for v in (start, stop))
        dtype = default if dtype is None and python else dtype
        return Tensor._of(np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype))
    start, stop = _as_tensor(start), _as_tensor(stop)
    out = start + (stop - start) * steps.astype(np.result_type(start.dtype, stop.dtype))
    return out if dtype is None else astype(out, dtype)


def seed(value: int) -> Generator:
    """Seed the generator behind randn, rand, randint and randperm, and return it
    (tracegrad.manual_seed seeds it too)."""
    return default_generator.manual_seed(value)


# randn, rand, randint and randperm draw from a counter-based random state (frontend/random.py),
# as dropout does: a traced step reads the state and advances it at every call, so it draws fresh
# numbers each time, the same numbers an eager run with the same seed draws.


def _drawn(out: Tensor, requires_grad: bool) -> Tensor:
    return out.requires_grad_() if requires_grad else out


@pytorch_keywords(aliases=False)
@_bfloat16_via_float32
def randn(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    """Standard normal samples, randn(2, 3) or randn((2, 3))."""
    size, dtype = _shape_dtype("randn", size, dtype, options.pop("size", None))
    _check("randn", device, options)
    return _drawn(_draw(P.normal, generator, size, _float(dtype)), requires_grad)


@pytorch_keywords(aliases=False)
@_bfloat16_via_float32
def rand(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    """Uniform samples in [0, 1)."""
    size, dtype = _shape_dtype("rand", size, dtype, options.pop("size", None))
    _check("rand", device, options)
    return _drawn(_draw(P.uniform, generator, size, _float(dtype)), requires_grad)


def _draw(op: Any, generator: Generator | None, size: tuple, dtype: np.dtype) -> Tensor:
    """Samples of `op`; of a complex dtype, its real and imaginary parts drawn independently,
    each of variance 1/2 for normal samples, as PyTorch's."""
    state = random.state_of(generator)
    if dtype.kind != "c":
        return random.draw(op, state, shape=tuple(size), dtype=dtype)
    parts = random.draw(op, state, shape=(*size, 2), dtype=shapes.real_dtype(dtype))
    if op is P.normal:
        parts = parts * math.sqrt(0.5)
    return P.complex(parts[..., 0], parts[..., 1])


@pytorch_keywords(aliases=False)
def normal(mean: Any, std: Any = 1.0, size: Sequence[int] | None = None, *,
           generator: Generator | None = None, dtype: Any = None, device: Any = None,
           requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    """PyTorch's `torch.normal`: samples of N(mean, std), elementwise over the broadcast
    `mean` and `std` (tensors, or a tensor and a number), or over `size` where both are
    numbers. It passes no gradient (PyTorch's passes zeros): a sample to differentiate through
    is the reparametrization `mean + std * randn(...)`, written out."""
    _check("normal", device, options)
    given = [x for x in (mean, std) if isinstance(x, Tensor)]
    if size is None and not given:
        raise TypeError("normal: with numbers for mean and std, give size=")
    shape = tuple(size) if size is not None else np.broadcast_shapes(*(t.shape for t in given))
    z = randn(shape, generator=generator, dtype=given[0].dtype if given else _float(dtype))
    return _drawn((z * std + mean).detach(), requires_grad)


@pytorch_keywords(aliases=False)
def randint(*args: Any, size: Sequence[int] | None = None, generator: Generator | None = None,
            dtype: Any = np.int64, device: Any = None, requires_grad: bool = False,
            low: int | None = None, high: int | None = None, **options: Any) -> Tensor:  # fmt: skip
    """Integers in [low, high): randint(high, size) or randint(low, high, size), as PyTorch's."""
    _check("randint", device, options)
    if size is None and args and not isinstance(args[-1], int | np.integer):
        *args, size = args
    bounds = [*args, *(v for v in (low, high) if v is not None)]
    if size is None or len(bounds) not in (1, 2):
        raise TypeError("randint: expected randint(high, size) or randint(low, high, size)")
    low, high = (0, *bounds) if len(bounds) == 1 else bounds
    size = (size,) if isinstance(size, int | np.integer) else tuple(int(d) for d in size)
    out = random.draw(P.randint, random.state_of(generator), shape=size, low=int(low),
                      high=int(high), dtype=np.dtype(dtype))  # fmt: skip
    return _drawn(out, requires_grad)


@pytorch_keywords(aliases=False)
def randperm(n: int, generator: Generator | None = None, dtype: Any = np.int64,
             device: Any = None, **options: Any) -> Tensor:  # fmt: skip
    """A random permutation of 0..n-1."""
    _check("randperm", device, options)
    return random.draw(P.randperm, random.state_of(generator), n=int(n), dtype=np.dtype(dtype))


@_bfloat16_via_float32
def randn_like(input: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
               **options: Any) -> Tensor:  # fmt: skip
    shape, dtype = _like("randn_like", input, dtype, device, options)
    return randn(shape, dtype=dtype, requires_grad=requires_grad)


@_bfloat16_via_float32
def rand_like(input: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
              **options: Any) -> Tensor:  # fmt: skip
    shape, dtype = _like("rand_like", input, dtype, device, options)
    return rand(shape, dtype=dtype, requires_grad=requires_grad)


def randint_like(input: Any, low: int = 0, high: int | None = None, dtype: Any = None,
                 device: Any = None, **options: Any) -> Tensor:  # fmt: skip
    """randint_like(x, high) or randint_like(x, low, high): x's shape and dtype."""
    shape, dtype = _like("randint_like", input, dtype, device, options)
    low, high = (0, low) if high is None else (low, high)
    return randint(low, high, shape, dtype=dtype)


__all__ = [
    "arange", "as_tensor", "default_generator", "empty", "empty_like", "eye", "from_numpy",
    "full", "full_like", "linspace", "logspace", "normal", "ones", "ones_like", "rand",
    "rand_like",
    "randint", "randint_like", "randn", "randn_like", "randperm", "tensor", "zeros", "zeros_like",
]  # fmt: skip

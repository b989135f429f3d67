"""The public functions over the op table, with NumPy's signatures (axis normalization, shape
tuples, 1-D matmul, ...), Tensor's operators and methods, and NumPy interop.

Everything public in the op table is exported as it is (a primitive is a callable op); the
functions below wrap the ops whose NumPy signature differs from the primitive's attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import primitives as P
from .errors import ShapeError, TraceError
from .primitives import *  # noqa: F403 (every public op, as it is)
from .primitives import PRIMITIVES, Primitive, sum_to
from .tensor import Listeners, Tensor, as_tensor


def _axes(op: str, axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    axes = range(ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"{op}: axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(a % ndim)
    return tuple(sorted(set(out)))


def _reduction(prim: Primitive) -> Callable:
    def reduce(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x)
        return prim(x, axis=_axes(prim.name, axis, x.ndim), keepdims=bool(keepdims))

    reduce.__name__ = reduce.__qualname__ = prim.name
    reduce.__doc__ = f"{prim.name} over `axis` (int, tuple or None), as NumPy's."
    return reduce


sum = _reduction(P.sum)
max = _reduction(P.max)
min = _reduction(P.min)
prod = _reduction(P.prod)


def mean(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    x = as_tensor(x)
    axes = _axes("mean", axis, x.ndim)
    return sum(x, axes, keepdims) / float(math.prod(x.shape[a] for a in axes))


def argmax(x: Any, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    return P.argmax(x, axis=_axes("argmax", axis, x.ndim)[0])


def _shape_arg(shape: tuple) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape


def reshape(x: Any, *shape: Any) -> Tensor:
    """reshape(x, (4, 3)) or reshape(x, 4, 3); one -1 is inferred."""
    x, shape = as_tensor(x), list(_shape_arg(shape))
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or x.size % known == 0:  # else the shape rule names the shape as given
            shape[shape.index(-1)] = x.size // known if known else 0
    shape = tuple(int(d) for d in shape)
    return x if shape == x.shape else P.reshape(x, shape=shape)


def transpose(x: Any, axes: Sequence[int] | None = None) -> Tensor:
    x = as_tensor(x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else tuple(a % x.ndim for a in axes)
    return x if axes == tuple(range(x.ndim)) else P.transpose(x, axes=axes)


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    x = as_tensor(x)
    return x if tuple(shape) == x.shape else P.broadcast_to(x, shape=tuple(shape))


def expand_dims(x: Any, axis: int) -> Tensor:
    x = as_tensor(x)
    axis = axis % (x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def squeeze(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    x = as_tensor(x)
    axes = (
        tuple(i for i, d in enumerate(x.shape) if d == 1)
        if axis is None
        else _axes("squeeze", axis, x.ndim)
    )
    if any(x.shape[a] != 1 for a in axes):
        raise ShapeError(f"squeeze: cannot squeeze axes {axes} of shape {x.shape}")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def concatenate(xs: Sequence[Any], axis: int = 0) -> Tensor:
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ShapeError("concatenate: needs at least one tensor")
    return P.concatenate(*xs, axis=_axes("concatenate", axis, xs[0].ndim)[0])


def stack(xs: Sequence[Any], axis: int = 0) -> Tensor:
    xs = [as_tensor(x) for x in xs]
    if len({x.shape for x in xs}) > 1:
        raise ShapeError("stack: shapes " + ", ".join(str(x.shape) for x in xs) + " differ")
    return concatenate([expand_dims(x, axis) for x in xs], axis % (xs[0].ndim + 1))


def matmul(a: Any, b: Any) -> Tensor:
    """NumPy's matmul: 2-D, batched (broadcast) and 1-D operands."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise ShapeError(f"matmul: {a.shape} @ {b.shape}")
    if a.ndim > 2 and b.ndim == 2:  # rows times one matrix: one GEMM (see primitives)
        rows = P.matmul(reshape(a, (-1, a.shape[-1])), b)
        return reshape(rows, (*a.shape[:-1], b.shape[-1]))
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    out = P.matmul(a2, b2)
    if a.ndim == 1:  # drop a's row axis first: b's column axis is still last
        out = reshape(out, out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        out = reshape(out, out.shape[:-1])
    return out


def astype(x: Any, dtype: Any) -> Tensor:
    x = as_tensor(x)
    return x if np.dtype(dtype) == x.dtype else P.astype(x, dtype=np.dtype(dtype))


def clip(x: Any, lo: Any = None, hi: Any = None) -> Tensor:
    x = as_tensor(x)
    x = x if lo is None else P.maximum(x, lo)
    return x if hi is None else P.minimum(x, hi)


def getitem(x: Any, index: Any) -> Tensor:
    """Indexing with ints, slices, None, ..., integer arrays (several) and boolean masks."""
    x = as_tensor(x)
    template, arrays = [], []
    for item in index if isinstance(index, tuple) else (index,):
        if isinstance(item, Tensor | np.ndarray | list):
            item = as_tensor(item)
            if item.dtype == np.bool_:
                if item.is_symbolic:
                    raise TraceError(
                        "indexing with a traced boolean mask gives a data-dependent shape; use "
                        "tracegrad.where(mask, x, 0) instead"
                    )
                parts = [Tensor(a) for a in np.nonzero(item.numpy())]
            else:
                parts = [item]
            template += ["@"] * len(parts)
            arrays += parts
        elif isinstance(item, int | np.integer):
            template.append(int(item))
        elif item is None or item is Ellipsis or isinstance(item, slice):
            template.append(item)
        else:
            raise TypeError(f"getitem: unsupported index {item!r}")
    return P.getitem(x, *arrays, template=tuple(template))


def logsumexp(x: Any, axis: int | Sequence[int] | None = -1, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))), stable for large |x|: the max is subtracted (and not differentiated)."""
    x = as_tensor(x)
    m = max(x, axis, keepdims=True).detach()
    out = P.log(sum(P.exp(x - m), axis, keepdims=True)) + m
    return out if keepdims else squeeze(out, _axes("logsumexp", axis, x.ndim))


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    return x - logsumexp(x, axis, keepdims=True)


def softmax(x: Any, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    e = P.exp(x - max(x, axis, keepdims=True).detach())
    return e / sum(e, axis, keepdims=True)


def zeros(shape: Sequence[int], dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    return Tensor(np.zeros(shape, dtype), requires_grad=requires_grad)


def ones(shape: Sequence[int], dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    return Tensor(np.ones(shape, dtype), requires_grad=requires_grad)


def zeros_like(x: Any) -> Tensor:
    return zeros(x.shape, x.dtype)


def ones_like(x: Any) -> Tensor:
    return ones(x.shape, x.dtype)


# --- Tensor's operators and methods, attached from above (see DESIGN.md: no circles) ----------


def _swap(f: Callable) -> Callable:
    return lambda self, other: f(other, self)


def _inplace(f: Primitive) -> Callable:
    def op(self: Tensor, other: Any) -> Tensor:
        if Listeners.grad_enabled and self.is_leaf and self.requires_grad:
            raise RuntimeError(
                f"in-place {f.name} on a leaf tensor that requires grad: wrap the update in "
                "`with tracegrad.no_grad():` (as optimizers do) or use an out-of-place op"
            )
        result = f(self, other)
        if Listeners.grad_enabled and not result.is_leaf:
            return result  # recorded ops stay functional: the name is rebound to the result
        self._assign(result)
        return self

    return op


_OPERATORS = {
    "add": P.add, "radd": _swap(P.add), "sub": P.sub, "rsub": _swap(P.sub), "mul": P.mul,
    "rmul": _swap(P.mul), "truediv": P.div, "rtruediv": _swap(P.div), "pow": P.pow,
    "rpow": _swap(P.pow), "matmul": matmul, "rmatmul": _swap(matmul), "lt": P.less,
    "le": P.less_equal, "gt": P.greater, "ge": P.greater_equal, "eq": P.equal,
    "ne": P.not_equal, "getitem": getitem,
}  # fmt: skip
for _name, _f in _OPERATORS.items():
    setattr(Tensor, f"__{_name}__", _f)
for _name, _f in {"iadd": P.add, "isub": P.sub, "imul": P.mul, "itruediv": P.div}.items():
    setattr(Tensor, f"__{_name}__", _inplace(_f))
Tensor.__neg__ = P.neg
Tensor.__abs__ = P.abs
Tensor.__pos__ = lambda self: self

for _p in PRIMITIVES.values():  # every one-input elementwise op is a method too: t.exp()
    if _p.kind == "elementwise" and _p.arity == 1 and not hasattr(Tensor, _p.name):
        setattr(Tensor, _p.name, _p)
for _f in (sum, mean, max, min, prod, argmax, transpose, astype, clip, squeeze, expand_dims,
           softmax, log_softmax, logsumexp, reshape):  # fmt: skip
    setattr(Tensor, _f.__name__, _f)
Tensor.T = property(lambda self: transpose(self))
Tensor.flatten = lambda self: reshape(self, (-1,))


# --- NumPy interop: ufuncs on tensors dispatch to tracegrad, never return a detached ndarray ----

_UFUNCS = {p.numpy: p for p in PRIMITIVES.values() if isinstance(p.numpy, np.ufunc)}
_UFUNCS[np.matmul] = matmul


def _array_ufunc(self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    op = _UFUNCS.get(ufunc)
    if op is None or method != "__call__" or kwargs:
        raise TypeError(
            f"np.{ufunc.__name__}{'' if method == '__call__' else '.' + method} is not supported "
            "on tracegrad tensors (it would drop the gradient); use the tracegrad function"
        )
    return op(*inputs)


_FUNCTIONS = {
    np.concatenate: concatenate, np.stack: stack, np.where: P.where, np.clip: clip,
    np.reshape: reshape, np.transpose: transpose, np.broadcast_to: broadcast_to,
    np.expand_dims: expand_dims, np.squeeze: squeeze, np.sum: sum, np.mean: mean, np.max: max,
    np.min: min, np.prod: prod, np.shape: lambda x: x.shape, np.ndim: lambda x: x.ndim,
}  # fmt: skip


def _array_function(self: Tensor, func: Callable, types: Any, args: Any, kwargs: Any) -> Any:
    """Other NumPy functions (np.concatenate, np.dot, ...) would read tensors through __array__:
    those tracegrad has dispatch to it; the rest run on the arrays only if no floats come out
    (np.argmax, np.allclose), since floats would be a detached copy of a differentiable result."""
    op = _FUNCTIONS.get(func)
    if op is not None:
        return op(*args, **kwargs)
    result = func(*_arrays(args), **_arrays(kwargs))
    if _has_floats(result):
        raise TypeError(
            f"np.{func.__name__} is not supported on tracegrad tensors (it would drop the "
            "gradient); use the tracegrad function, or np.asarray(t) to leave autodiff on purpose"
        )
    return result


def _arrays(x: Any) -> Any:
    """`x` with every tensor (also inside lists, tuples and dicts) replaced by its ndarray."""
    if isinstance(x, Tensor):
        return x.numpy()
    if isinstance(x, list | tuple):
        return type(x)(_arrays(v) for v in x)
    return {k: _arrays(v) for k, v in x.items()} if isinstance(x, dict) else x


def _has_floats(result: Any) -> bool:
    if isinstance(result, tuple | list):
        return any(_has_floats(r) for r in result)
    if isinstance(result, np.ndarray | np.generic | float):
        return np.asarray(result).dtype.kind in "fc"
    return False


Tensor.__array_ufunc__ = _array_ufunc
Tensor.__array_function__ = _array_function

__all__ = [*P.__all__, "argmax", "astype", "broadcast_to", "clip", "concatenate", "expand_dims",
           "getitem", "log_softmax", "logsumexp", "matmul", "max", "mean", "min", "ones",
           "ones_like", "prod", "reshape", "softmax", "squeeze", "stack", "sum", "sum_to",
           "transpose", "zeros", "zeros_like"]  # fmt: skip
__all__ = sorted(set(__all__) - {"fused", "scatter_add"})

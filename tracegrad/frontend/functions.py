"""The public functions over the op table, with NumPy's signatures (axis normalization, shape
tuples, 1-D matmul, ...), Tensor's operators and methods, and NumPy interop.

Everything public in the op table is exported as it is (a primitive is a callable op); the
functions below wrap the ops whose NumPy signature differs from the primitive's attributes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError, TraceError, user_location
from tracegrad.core.primitives import *  # noqa: F403 (every public op, as it is)
from tracegrad.core.primitives import PRIMITIVES, Primitive, sum_to
from tracegrad.frontend.tensor import Listeners, Tensor, as_tensor

# PyTorch's keyword names for NumPy's: every function taking `axis` also takes `dim`. One
# implementation: the wrapper only renames the keyword.
_TORCH_NAMES = {"dim": "axis", "keepdim": "keepdims"}


def torch_names(f: Callable) -> Callable:
    """Let `f` (NumPy's keywords) accept PyTorch's too: dim= for axis=, keepdim= for keepdims=."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for torch_name, name in _TORCH_NAMES.items():
            if torch_name in kwargs:
                if name in kwargs:
                    raise TypeError(f"{f.__name__}: got both {torch_name}= and {name}=")
                kwargs[name] = kwargs.pop(torch_name)
        return f(*args, **kwargs)

    return wrapper


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
    return torch_names(reduce)


sum = _reduction(P.sum)
max = _reduction(P.max)
min = _reduction(P.min)
prod = _reduction(P.prod)


@torch_names
def mean(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    x = as_tensor(x)
    axes = _axes("mean", axis, x.ndim)
    return sum(x, axes, keepdims) / float(math.prod(x.shape[a] for a in axes))


@torch_names
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


@torch_names
def expand_dims(x: Any, axis: int) -> Tensor:
    x = as_tensor(x)
    axis = axis % (x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


@torch_names
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


@torch_names
def concatenate(xs: Sequence[Any], axis: int = 0) -> Tensor:
    """NumPy's concatenate, PyTorch's cat (dim=)."""
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ShapeError("concatenate: needs at least one tensor")
    return P.concatenate(*xs, axis=_axes("concatenate", axis, xs[0].ndim)[0])


@torch_names
def stack(xs: Sequence[Any], axis: int = 0) -> Tensor:
    """Tensors stacked along a new axis; nested lists stack recursively (as np.array does)."""
    xs = [stack(x) if isinstance(x, list | tuple) else as_tensor(x) for x in xs]
    if not xs:
        raise ShapeError("stack: needs at least one tensor")
    if len({x.shape for x in xs}) > 1:
        raise ShapeError("stack: shapes " + ", ".join(str(x.shape) for x in xs) + " differ")
    return concatenate([expand_dims(x, axis) for x in xs], axis % (xs[0].ndim + 1))


def matmul(a: Any, b: Any) -> Tensor:
    """NumPy's matmul: 2-D, batched (broadcast) and 1-D operands."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise ShapeError(f"matmul: {a.shape} @ {b.shape}")
    if a.ndim > 2 and b.ndim == 2:  # rows times one matrix: one GEMM (see core.ops.linalg)
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


def clip(a: Any, a_min: Any = None, a_max: Any = None, *, min: Any = None, max: Any = None):
    """NumPy's clip(a, a_min, a_max); PyTorch's clamp(min=, max=) is the same function."""
    x = as_tensor(a)
    lo = a_min if min is None else min
    hi = a_max if max is None else max
    x = x if lo is None else P.maximum(x, lo)
    return x if hi is None else P.minimum(x, hi)


clamp = clip


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


@torch_names
def logsumexp(x: Any, axis: int | Sequence[int] | None = -1, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))), stable for large |x|: the max is subtracted (and not differentiated)."""
    x = as_tensor(x)
    m = max(x, axis, keepdims=True).detach()
    m = P.where(P.abs(m) < math.inf, m, 0.0)  # an all -inf row sums exp(-inf) = 0: log 0 = -inf
    out = P.log(sum(P.exp(x - m), axis, keepdims=True)) + m
    return out if keepdims else squeeze(out, _axes("logsumexp", axis, x.ndim))


@torch_names
def log_softmax(x: Any, axis: int = -1) -> Tensor:
    """(x - m) - log(sum(exp(x - m))), m the max: subtracting logsumexp, a large number whose
    rounding error is large, lost log C in a row of -1e9 and 5e-4 at logits near 1e4."""
    x = as_tensor(x)
    m = max(x, axis, keepdims=True).detach()
    shifted = x - P.where(P.abs(m) < math.inf, m, 0.0)
    return shifted - P.log(sum(P.exp(shifted), axis, keepdims=True))


@torch_names
def softmax(x: Any, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    e = P.exp(x - max(x, axis, keepdims=True).detach())
    return e / sum(e, axis, keepdims=True)


def check_range(x: Any, lo: int, hi: int, what: str, allow: int | None = None) -> Tensor:
    """`x`, after checking that lo <= x < hi everywhere (or x == allow: an ignored label); else
    ValueError naming `what`, the bounds, an offending value and the caller's line. Traced,
    the check runs in the plan."""
    return P.check_range(as_tensor(x), lo=lo, hi=hi, allow=allow, what=what,
                         where=user_location())  # fmt: skip


def _shape_dtype(args: tuple, dtype: Any) -> tuple[tuple, Any]:
    """NumPy's (shape, dtype) or PyTorch's (*sizes) positional arguments."""
    if args and not isinstance(args[0], int | np.integer):
        if len(args) > 2:
            raise TypeError(f"expected (shape, dtype) or integer sizes, got {args}")
        return tuple(args[0]), args[1] if len(args) == 2 else dtype
    return tuple(args), dtype


def zeros(*shape: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    """zeros((2, 3), dtype) (NumPy) or zeros(2, 3) (PyTorch); float32 by default."""
    shape, dtype = _shape_dtype(shape, dtype)
    return Tensor(np.zeros(shape, dtype), requires_grad=requires_grad)


def ones(*shape: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    shape, dtype = _shape_dtype(shape, dtype)
    return Tensor(np.ones(shape, dtype), requires_grad=requires_grad)


def full(shape: Any, fill_value: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """NumPy's full; a tensor `fill_value` is broadcast, so its gradient flows."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if isinstance(fill_value, Tensor):
        return broadcast_to(fill_value if dtype is None else astype(fill_value, dtype), shape)
    if dtype is None and type(fill_value) is float:
        dtype = np.float32  # Python floats become float32, as everywhere in tracegrad
    return Tensor(np.full(shape, fill_value, dtype), requires_grad=requires_grad)


def zeros_like(x: Any, dtype: Any = None) -> Tensor:
    return zeros(x.shape, dtype=x.dtype if dtype is None else dtype)


def ones_like(x: Any, dtype: Any = None) -> Tensor:
    return ones(x.shape, dtype=x.dtype if dtype is None else dtype)


_generator = np.random.default_rng()


def seed(value: int) -> None:
    """Seed the generator behind randn, rand and randint (tracegrad.manual_seed seeds it too)."""
    global _generator
    _generator = np.random.default_rng(value)


def randn(*shape: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    """Standard normal samples, PyTorch's randn(2, 3) or randn((2, 3))."""
    shape, dtype = _shape_dtype(shape, dtype)
    data = _generator.standard_normal(shape).astype(dtype)
    return Tensor(data, requires_grad=requires_grad)


def rand(*shape: Any, dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1)."""
    shape, dtype = _shape_dtype(shape, dtype)
    return Tensor(_generator.random(shape).astype(dtype), requires_grad=requires_grad)


def randint(low: int, high: int, size: Sequence[int], dtype: Any = np.int64) -> Tensor:
    return Tensor(_generator.integers(low, high, tuple(size)).astype(dtype))


def randperm(n: int, dtype: Any = np.int64) -> Tensor:
    """A random permutation of 0..n-1."""
    return Tensor(_generator.permutation(n).astype(dtype))


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> Tensor:
    """NumPy's and PyTorch's arange: integers stay int64, floats become float32."""
    data = np.arange(start, stop, step) if stop is not None else np.arange(start)
    return Tensor(
        data if dtype is None and data.dtype.kind != "f" else data.astype(dtype or np.float32)
    )


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing `a`'s memory and dtype (as torch.from_numpy)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected an ndarray, got {type(a).__name__}")
    return Tensor(a)


def var(
    a: Any, axis: Any = None, dtype: Any = None, out: None = None, ddof: float = 0,
    keepdims: bool = False, *, correction: float | None = None, unbiased: bool | None = None,
) -> Tensor:  # fmt: skip
    """NumPy's var (ddof=0 by default); PyTorch's `correction=` is ddof and `unbiased=True`
    ddof=1 (PyTorch's default is 1: write x.var(dim, correction=1) for its value)."""
    x = as_tensor(a)
    ddof = ddof if correction is None else correction
    ddof = ddof if unbiased is None else int(unbiased)
    axes = _axes("var", axis, x.ndim)
    centered = x - mean(x, axes, keepdims=True)
    count = math.prod(x.shape[a] for a in axes) - ddof
    return sum(centered * centered, axes, keepdims) / float(count)


def std(
    a: Any, axis: Any = None, dtype: Any = None, out: None = None, ddof: float = 0,
    keepdims: bool = False, *, correction: float | None = None, unbiased: bool | None = None,
) -> Tensor:  # fmt: skip
    return P.sqrt(var(a, axis, dtype, out, ddof, keepdims, correction=correction,
                      unbiased=unbiased))  # fmt: skip


var, std = torch_names(var), torch_names(std)


# --- Tensor's operators and methods, attached from above (no circles: docs/architecture.md) --


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
    "ne": P.not_equal, "getitem": getitem, "mod": P.remainder, "rmod": _swap(P.remainder),
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
for _f in (sum, mean, max, min, prod, argmax, astype, clip, squeeze, expand_dims, softmax,
           log_softmax, logsumexp, reshape, var, std, matmul):  # fmt: skip
    setattr(Tensor, _f.__name__, _f)
Tensor.T = property(lambda self: transpose(self))
Tensor._stack = staticmethod(stack)


# PyTorch's Tensor methods, each an alias of the function above it names.


def _transpose_method(self: Tensor, *axes: Any) -> Tensor:
    """NumPy's t.transpose(axes) / t.transpose(*axes), but two ints swap those two axes, as
    PyTorch's t.transpose(0, 1) (for a 2-D tensor NumPy's reading would be the identity)."""
    if len(axes) == 2 and all(isinstance(a, int) for a in axes):
        return swapaxes(self, *axes)
    return transpose(self, _shape_arg(axes) if axes and axes != (None,) else None)


def swapaxes(x: Any, axis1: int, axis2: int) -> Tensor:
    x = as_tensor(x)
    axes = list(range(x.ndim))
    axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
    return transpose(x, axes)


def _expand(self: Tensor, *sizes: Any) -> Tensor:
    """PyTorch's expand: broadcast_to, with -1 keeping an extent."""
    sizes = _shape_arg(sizes)
    lead = len(sizes) - self.ndim
    shape = tuple(self.shape[i - lead] if d == -1 else d for i, d in enumerate(sizes))
    return broadcast_to(self, shape)


def _flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """NumPy's flatten() (everything), or PyTorch's flatten(start_dim, end_dim)."""
    if self.ndim == 0:
        return reshape(self, (1,))
    start, end = start_dim % self.ndim, end_dim % self.ndim
    return reshape(self, self.shape[:start] + (-1,) + self.shape[end + 1 :])


def _zero_(self: Tensor) -> Tensor:
    """Fill with zeros in place (an in-place op: a leaf that requires grad needs no_grad)."""
    return self.fill_(0.0)


def _to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """PyTorch's t.to(dtype) or t.to("cpu"): a cast, or the tensor itself (the CPU is the only
    device)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, str) and a.startswith("cpu") or a is None or isinstance(a, bool):
            continue
        if isinstance(a, str):
            raise ValueError(f"to({a!r}): tracegrad runs on the CPU only")
        self = astype(self, a)
    return self


def _fill_(self: Tensor, value: Any) -> Tensor:
    if Listeners.grad_enabled and self.is_leaf and self.requires_grad:
        raise RuntimeError("in-place fill_ on a leaf tensor that requires grad: use no_grad()")
    self._assign(Tensor(np.full(self.shape, value, self.dtype)))
    return self


_METHODS = {
    "transpose": _transpose_method, "view": reshape, "permute": lambda self, *dims:
    transpose(self, _shape_arg(dims)), "unsqueeze": expand_dims, "expand": _expand,
    "flatten": _flatten, "ravel": lambda self: reshape(self, (-1,)), "clamp": clip,
    "clone": P.positive, "copy": P.positive, "numel": lambda self: self.size,
    "dim": lambda self: self.ndim, "tolist": lambda self: self.numpy().tolist(),
    "float": lambda self: astype(self, np.float32), "double": lambda self: astype(self, np.float64),
    "long": lambda self: astype(self, np.int64), "zero_": _zero_, "fill_": _fill_,
    "swapaxes": swapaxes, "to": _to, "cpu": lambda self: self,
    "t": lambda self: transpose(self), "pow": P.pow, "mm": matmul,
}  # fmt: skip
for _name, _f in _METHODS.items():
    setattr(Tensor, _name, _f)
Tensor.mT = property(lambda self: swapaxes(self, -1, -2))


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

__all__ = [*P.__all__, "arange", "argmax", "astype", "broadcast_to", "clamp", "clip",
           "concatenate", "expand_dims", "from_numpy", "full", "getitem", "log_softmax",
           "logsumexp", "matmul", "max", "mean", "min", "ones", "ones_like", "prod", "rand",
           "randint", "randn", "randperm", "reshape", "softmax", "squeeze", "stack", "std", "sum",
           "sum_to", "swapaxes", "transpose", "var", "zeros", "zeros_like"]  # fmt: skip
# Not exported at the top: internals, and the linear algebra records (tracegrad.linalg has
# them with NumPy's signatures).
__all__ = sorted(set(__all__) - {"fused", "scatter_add", "inv", "det", "logabsdet", "det_sign",
                                 "solve", "cholesky", "eigh_values", "eigh_vectors", "pinv", "svd",
                                 "einsum", "argsort", "argpartition", "cumsum", "pad",
                                 "check_range", "max_pool2d", "max_pool2d_argmax",
                                 "max_pool2d_gather", "max_pool2d_scatter", "attention",
                                 "attention_grad", "layer_norm", "layer_norm_grad"})  # fmt: skip

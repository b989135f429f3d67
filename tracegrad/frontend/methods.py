"""Every method and operator of `Tensor`, attached from one table (`METHODS`): PyTorch's
methods with PyTorch's meanings (`x.max(dim)` gives (values, indices), `x.repeat` tiles,
`x.var()` is unbiased), the NumPy array methods that mean the same (`astype`, `T`, `copy`),
`backward`, and the NumPy interop hooks.

`tensor.py` defines the class and knows no op; this module, above both it and the functions,
attaches them (as HIPS autograd attaches its Box's operators in numpy_boxes.py), so there is
no import cycle. The interop hooks dispatch through two registries that `tracegrad.numpy`
fills with NumPy's meanings: np.max(t, axis=0) gives values, as NumPy's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.vocabulary import Kind
from tracegrad.frontend import autodiff, linalg
from tracegrad.frontend import elementwise as E
from tracegrad.frontend import functions as F
from tracegrad.frontend import products as M
from tracegrad.frontend import rearrange as A
from tracegrad.frontend import reductions as R
from tracegrad.frontend import sorting as S
from tracegrad.frontend.tensor import Listeners, Tensor

# NumPy's function (or ufunc) -> tracegrad's with NumPy's meaning; filled by tracegrad.numpy.
NUMPY_FUNCTIONS: dict[Callable, Callable] = {}
NUMPY_UFUNCS: dict[np.ufunc, Callable] = {}


def _swapped(f: Callable) -> Callable:
    return lambda self, other: f(other, self)


def _in_place(f: Callable) -> Callable:
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


def _fill_(self: Tensor, value: Any) -> Tensor:
    """Fill with `value` in place (a leaf that requires grad needs no_grad)."""
    if Listeners.grad_enabled and self.is_leaf and self.requires_grad:
        raise RuntimeError("in-place fill_ on a leaf tensor that requires grad: use no_grad()")
    self._assign(Tensor(np.full(self.shape, value, self.dtype)))
    return self


def _to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """t.to(dtype) or t.to("cpu"): a cast, or the tensor itself (the CPU is the only device)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, str) and a.startswith("cpu") or a is None or isinstance(a, bool):
            continue
        if isinstance(a, str):
            raise ValueError(f"to({a!r}): tracegrad runs on the CPU only")
        self = F.astype(self, a)
    return self


def _cast(dtype: Any) -> Callable:
    return lambda self: F.astype(self, dtype)


def _norm(self: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False) -> Tensor:
    """PyTorch's t.norm(p, dim): a vector norm of the elements over `dim` (all by default);
    "fro" is the 2-norm, "nuc" the matrix nuclear norm."""
    if p == "nuc":
        return linalg.matrix_norm(self, "nuc", (-2, -1) if dim is None else dim, keepdim)
    return linalg.vector_norm(self, 2 if p == "fro" else p, dim, keepdim)


def _varargs(f: Callable) -> Callable:
    """PyTorch's method form f(*dims) of a function taking one sequence: x.flip(0, 1)."""
    return lambda self, *dims: f(self, F.shape_arg(dims))


# --- NumPy interop: NumPy calls on tensors give NumPy's meaning, never a detached ndarray -------


def _array_ufunc(self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    op = NUMPY_UFUNCS.get(ufunc)
    if op is None or method != "__call__" or kwargs:
        raise TypeError(
            f"np.{ufunc.__name__}{'' if method == '__call__' else '.' + method} is not supported "
            "on tracegrad tensors (it would drop the gradient); use the tracegrad function"
        )
    return op(*inputs)


def _array_function(self: Tensor, func: Callable, types: Any, args: Any, kwargs: Any) -> Any:
    """NumPy functions tracegrad.numpy has dispatch to it; the rest run on the arrays only if
    no floats come out (np.argmax, np.allclose), since floats would be a detached copy of a
    differentiable result."""
    op = NUMPY_FUNCTIONS.get(func)
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


# --- the table ----------------------------------------------------------------------------------

_ELEMENTWISE = {p.name: p for p in P.PRIMITIVES.values()
                if p.kind is Kind.ELEMENTWISE and p.arity in (1, 2)}  # fmt: skip
_ELEMENTWISE.update(floor=P.floor, ceil=P.ceil, trunc=P.trunc, sign=P.sign)
for _name in ("astype", "where", "equal", "less", "less_equal", "greater", "greater_equal",
              "not_equal", "positive"):  # fmt: skip
    _ELEMENTWISE.pop(_name, None)  # other names below, or not PyTorch's methods

METHODS: dict[str, Any] = {
    **_ELEMENTWISE,
    # operators
    "__add__": P.add, "__radd__": _swapped(P.add), "__sub__": P.sub, "__rsub__": _swapped(P.sub),
    "__mul__": P.mul, "__rmul__": _swapped(P.mul), "__truediv__": P.div,
    "__rtruediv__": _swapped(P.div), "__pow__": P.pow, "__rpow__": _swapped(P.pow),
    "__matmul__": F.matmul, "__rmatmul__": _swapped(F.matmul), "__mod__": P.remainder,
    "__rmod__": _swapped(P.remainder), "__floordiv__": E.floor_divide,
    "__rfloordiv__": _swapped(E.floor_divide), "__lt__": P.less, "__le__": P.less_equal,
    "__gt__": P.greater, "__ge__": P.greater_equal, "__eq__": P.equal, "__ne__": P.not_equal,
    "__getitem__": F.getitem, "__neg__": P.neg, "__abs__": P.abs, "__pos__": lambda self: self,
    "__iadd__": _in_place(P.add), "__isub__": _in_place(P.sub), "__imul__": _in_place(P.mul),
    "__itruediv__": _in_place(P.div),
    "__array_ufunc__": _array_ufunc, "__array_function__": _array_function,
    "backward": autodiff.tensor_backward,
    # shapes
    "reshape": F.reshape, "view": F.reshape, "permute": F.permute, "transpose": F.transpose,
    "swapaxes": F.swapaxes, "swapdims": F.swapdims, "t": F.t, "expand": F.expand,
    "broadcast_to": F.broadcast_to, "squeeze": F.squeeze, "unsqueeze": F.unsqueeze,
    "flatten": F.flatten, "ravel": F.ravel, "moveaxis": F.moveaxis, "movedim": F.movedim,
    "T": property(F.reversed_axes), "mT": property(F.matrix_transpose),
    # indexing
    "gather": F.gather, "take_along_dim": F.take_along_dim, "index_select": F.index_select,
    "select": F.select, "narrow": F.narrow,
    "where": lambda self, condition, other: P.where(condition, self, other),
    "nonzero": A.nonzero,
    # reductions and scans
    "sum": R.sum, "mean": R.mean, "prod": R.prod, "max": R.max, "min": R.min, "amax": R.amax,
    "amin": R.amin, "argmax": R.argmax, "argmin": R.argmin, "var": R.var, "std": R.std,
    "logsumexp": R.logsumexp, "softmax": R.softmax, "log_softmax": R.log_softmax,
    "cumsum": R.cumsum, "diff": R.diff,
    # sorting
    "sort": S.sort, "argsort": S.argsort, "msort": S.msort, "topk": S.topk,
    "kthvalue": S.kthvalue, "median": S.median,
    # rearranging
    "split": A.split, "chunk": A.chunk, "tensor_split": A.tensor_split, "unbind": A.unbind,
    "hsplit": A.hsplit, "vsplit": A.vsplit, "dsplit": A.dsplit, "flip": _varargs(A.flip),
    "fliplr": A.fliplr, "flipud": A.flipud, "roll": A.roll, "rot90": A.rot90,
    "tile": _varargs(A.tile), "repeat": A.repeat, "repeat_interleave": A.repeat_interleave,
    "diagonal": A.diagonal, "diag": A.diag, "trace": A.matrix_trace, "triu": A.triu,
    "tril": A.tril,
    # products
    "matmul": F.matmul, "mm": F.matmul, "dot": M.dot, "inner": M.inner, "outer": M.outer,
    "kron": M.kron, "cross": M.cross, "norm": _norm,
    # elementwise
    "clamp": F.clamp, "clip": F.clip, "square": E.square, "reciprocal": E.reciprocal,
    "round": E.round, "sinc": E.sinc, "isnan": E.isnan, "isinf": E.isinf,
    "isfinite": E.isfinite, "nan_to_num": E.nan_to_num, "floor_divide": E.floor_divide,
    "fmax": E.fmax, "fmin": E.fmin, "deg2rad": E.deg2rad, "rad2deg": E.rad2deg, "eq": E.eq,
    "ne": E.ne, "lt": E.lt, "le": E.le, "gt": E.gt, "ge": E.ge, "equal": E.equal,
    # dtypes, copies, in-place updates, Python values
    "astype": F.astype, "float": _cast(np.float32), "double": _cast(np.float64),
    "half": _cast(np.float16), "long": _cast(np.int64), "int": _cast(np.int32),
    "bool": _cast(np.bool_), "to": _to, "cpu": lambda self: self, "clone": P.positive,
    "copy": P.positive, "zero_": lambda self: _fill_(self, 0), "fill_": _fill_,
    "numel": lambda self: self.size, "dim": lambda self: self.ndim,
    "tolist": lambda self: self.numpy().tolist(),
    "_stack": staticmethod(F.stack),  # tensor.as_tensor stacks lists of tensors with it
}  # fmt: skip

for _name, _method in METHODS.items():
    setattr(Tensor, _name, _method)

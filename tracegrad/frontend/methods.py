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
from tracegrad.core.bfloat16 import BFLOAT16, readable
from tracegrad.core.errors import user_location
from tracegrad.core.vocabulary import Kind
from tracegrad.frontend import autodiff, linalg, sampling, sharing, sparse
from tracegrad.frontend import counting as K
from tracegrad.frontend import creation as C
from tracegrad.frontend import elementwise as E
from tracegrad.frontend import fft as T
from tracegrad.frontend import functions as F
from tracegrad.frontend import mutation as W
from tracegrad.frontend import products as M
from tracegrad.frontend import rearrange as A
from tracegrad.frontend import reductions as R
from tracegrad.frontend import sorting as S
from tracegrad.frontend import special as X
from tracegrad.frontend.device import CPU, META, require_cpu, split_meta, to_arguments
from tracegrad.frontend.storage import UntypedStorage, storage_offset
from tracegrad.frontend.tensor import Tensor

# NumPy's function (or ufunc) -> tracegrad's with NumPy's meaning; filled by tracegrad.numpy.
NUMPY_FUNCTIONS: dict[Callable, Callable] = {}
NUMPY_UFUNCS: dict[np.ufunc, Callable] = {}


def _comparing(op: Any) -> Any:
    """`==` and `!=` with what is no tensor, array, number or sequence (`idx == None`, as
    `generate(eos_id=None)` asks): NotImplemented, so Python answers False and True, as
    PyTorch does."""

    def method(self: Tensor, other: Any) -> Any:
        if not isinstance(other, Tensor | np.ndarray | np.generic | int | float | complex
                          | list | tuple):  # fmt: skip
            return NotImplemented
        return op(self, other)

    method.__name__ = op.name
    return method


def _two_d(x: Tensor, what: str) -> Tensor:
    if x.ndim not in (0, 2):  # a 0-d tensor is its own (conjugate) transpose, as in PyTorch
        raise RuntimeError(f"{what} is only supported on matrices (2-D tensors), not "
                           f"{x.ndim}-D; mH takes batches of matrices")  # fmt: skip
    return x


def _operator(f: Callable, swapped: bool = False) -> Callable:
    """A binary operator that steps aside, as PyTorch's do, for an operand it cannot take, so
    that Python asks the operand's type (zuko's tuple of tensors defines `__rmul__`) or raises
    its "unsupported operand" TypeError."""

    def operator(self: Tensor, other: Any) -> Any:
        try:
            return f(other, self) if swapped else f(self, other)
        except (TypeError, AttributeError, ValueError):  # (a ShapeError is a ValueError)
            if isinstance(other, Tensor | np.ndarray | np.generic | int | float | complex):
                raise
            return NotImplemented

    operator.__name__ = getattr(f, "name", None) or f.__name__  # (PyTorch's: `x + 1` is "add")
    return operator


_BINARY = {"add": P.add, "sub": P.sub, "mul": P.mul, "truediv": P.div, "pow": P.pow,
           "matmul": F.matmul, "mod": P.remainder, "floordiv": E.floor_divide,
           "and": E.bitwise_and, "or": E.bitwise_or, "xor": E.bitwise_xor,
           "lshift": P.bitwise_left_shift, "rshift": P.bitwise_right_shift}  # fmt: skip


def _to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """t.to(dtype), t.to("cpu"), t.to(device, dtype, non_blocking, copy) or t.to(other): a cast,
    or the tensor itself. Another device than the CPU raises."""
    meta, args, kwargs = split_meta(args, kwargs)
    dtype = to_arguments("Tensor.to", args, kwargs)
    out = self if dtype is None else F.astype(self, dtype)
    copy = kwargs.get("copy") or (meta and not self._meta)
    out = P.positive(out) if copy and out is self else out
    if meta:  # the values stay (nothing reads them, as nothing can read a meta tensor's)
        out._meta = True
    return out


def _cuda(self: Tensor, device: Any = None, non_blocking: bool = False) -> Tensor:
    require_cpu("cuda" if device is None else f"cuda:{device}", "Tensor.cuda")
    return self


# PyTorch's names of its tensor types, for t.type() and t.type("torch.LongTensor")
_TYPE_NAMES = {
    "float32": "torch.FloatTensor", "float64": "torch.DoubleTensor", "float16": "torch.HalfTensor",
    "int64": "torch.LongTensor", "int32": "torch.IntTensor", "int16": "torch.ShortTensor",
    "int8": "torch.CharTensor", "uint8": "torch.ByteTensor", "bool": "torch.BoolTensor",
}  # fmt: skip


class TensorType(type):
    """PyTorch's legacy tensor types (`torch.FloatTensor`, `torch.LongTensor`, ...): calling one
    is the legacy constructor of its dtype (`torch.FloatTensor(3, 4)`, `torch.LongTensor([1,
    2])`), a tensor of its dtype is an instance, and `t.type(torch.LongTensor)` casts."""

    dtype: np.dtype

    def __instancecheck__(cls, x: Any) -> bool:
        return isinstance(x, Tensor) and x.dtype == cls.dtype

    def __call__(cls, *data: Any) -> Tensor:
        return Tensor(*data, dtype=cls.dtype)


def legacy_types() -> dict[str, TensorType]:
    """PyTorch's legacy tensor types by name, one per dtype of `_TYPE_NAMES`."""
    names = {name.removeprefix("torch."): np.dtype(d) for d, name in _TYPE_NAMES.items()}
    return {name: TensorType(name, (), {"dtype": d}) for name, d in names.items()}


def _type(self: Tensor, dtype: Any = None, non_blocking: bool = False) -> Any:
    """t.type(): PyTorch's name of the tensor's type; t.type(dtype, name or legacy type): a
    cast."""
    if dtype is None:
        return _TYPE_NAMES.get(self.dtype.name, f"torch.{self.dtype.name}")
    if isinstance(dtype, TensorType):
        dtype = dtype.dtype
    if isinstance(dtype, str):
        names = {v: k for k, v in _TYPE_NAMES.items()}
        if dtype not in names:
            raise TypeError(f"Tensor.type: unknown type name {dtype!r}")
        dtype = names[dtype]
    return F.astype(self, dtype)


def _format(self: Tensor, spec: str) -> str:
    """A 0-d tensor formats as its number ('{:.4f}'.format(loss)), as in PyTorch."""
    if self.ndim == 0:
        return format(self._concrete("formatting a tensor").item(), spec)
    if spec:
        raise TypeError(f"unsupported format string {spec!r} for a tensor of shape {self.shape}: "
                        "only a 0-d tensor formats as a number")  # fmt: skip
    return repr(self)


def _missing(self: Tensor, name: str) -> Any:
    """A Tensor method or attribute tracegrad lacks: say so, and where it was used (private
    and special names, which Python and NumPy probe for, fail quietly)."""
    if name.startswith("_"):
        raise AttributeError(f"'Tensor' object has no attribute {name!r}")
    raise AttributeError(
        f"Tensor.{name} is not provided by tracegrad (used at {user_location()}); see "
        "docs/api.md for Tensor's methods"
    )


def _new(fill: Callable) -> Callable:
    """t.new_zeros(size) and the like: t's dtype unless `dtype`."""

    @F.sequence_keyword("size")  # t.new_zeros(size=(2, 3))
    def method(self: Tensor, *size: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
        return fill(F.shape_arg(size), dtype=self.dtype if dtype is None else dtype,
                    device=device, requires_grad=requires_grad, **options)  # fmt: skip

    return method


def _new_empty_strided(self: Tensor, size: Any, stride: Any, dtype: Any = None, device: Any = None,
                       requires_grad: bool = False, **options: Any) -> Tensor:  # fmt: skip
    """An uninitialized tensor of `size`, row-major as every tensor here (`stride` not kept)."""
    if len(stride) != len(size):
        raise RuntimeError(f"new_empty_strided: mismatch in length of strides and shape: size "
                           f"{list(size)}, stride {list(stride)}")  # fmt: skip
    return C.empty(tuple(size), dtype=self.dtype if dtype is None else dtype,
                   requires_grad=requires_grad)  # fmt: skip


def _apply_(self: Tensor, fn: Callable, *others: Tensor) -> Tensor:
    """`fn` on each element (and the matching elements of `others`: `map_`, `map2_`), written
    in place; Python's speed, no gradient, as PyTorch's CPU-only `apply_`."""
    values = [self._concrete("Tensor.apply_()")]
    values += [np.broadcast_to(o._concrete("Tensor.map_()"), self.shape) for o in others]
    out = np.frompyfunc(fn, len(values), 1)(*values) if self.size else values[0]
    with autodiff.no_grad():
        self.copy_(Tensor._of(np.asarray(out, self.dtype)))
    return self


def _is_inference(self: Tensor) -> bool:
    """False: tensors made under inference mode are ordinary tensors here (PyTorch's are
    marked, to refuse autograd later; tracegrad's simply have no history)."""
    return False


def _dim_order(self: Tensor, *, ambiguity_check: Any = False) -> tuple[int, ...]:
    """The dimensions from outermost to innermost in memory: in order, tensors being
    row-major."""
    return tuple(range(self.ndim))


def _new_full(self: Tensor, size: Any, fill_value: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:  # fmt: skip
    return C.full(size, fill_value, self.dtype if dtype is None else dtype, device, requires_grad)


def _new_tensor(self: Tensor, data: Any, dtype: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:  # fmt: skip
    return C.tensor(data, self.dtype if dtype is None else dtype, device, requires_grad)


def _legacy_new(self: Tensor, *args: Any, **options: Any) -> Tensor:
    """PyTorch's legacy `t.new(...)` (older optimizers: `grad.new(n, n).zero_()`): of t's
    dtype, a tensor of the sizes given (zeros: PyTorch leaves it uninitialized), or of the data
    given; `t.new()` is empty."""
    sizes = args[0] if len(args) == 1 and isinstance(args[0], tuple) else args
    if all(isinstance(n, int | np.integer) for n in sizes):
        return C.zeros(tuple(sizes) or (0,), dtype=self.dtype, **options)
    (data,) = args
    return C.tensor(data, self.dtype, **options)


def _cast(dtype: Any) -> Callable:
    return lambda self: F.astype(self, dtype)


def _norm(self: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False) -> Tensor:
    """PyTorch's t.norm(p, dim): a vector norm of the elements over `dim` (all by default);
    "fro" is the 2-norm, "nuc" the matrix nuclear norm."""
    if p == "nuc":
        return linalg.matrix_norm(self, "nuc", (-2, -1) if dim is None else dim, keepdim)
    return linalg.vector_norm(self, 2 if p == "fro" else p, dim, keepdim)


def _is_nonzero(self: Tensor) -> bool:
    """The truth of a one-element tensor (PyTorch's errors for any other)."""
    if self.size != 1:
        which = "no values" if self.size == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {which} is ambiguous")
    return bool(self._concrete("Tensor.is_nonzero()").item())


_float_power_in_place = W.in_place(E.float_power, "float_power_")


def _float_power_(self: Tensor, exponent: Any) -> Tensor:
    """In place: float_power, whose result is float64, so only into a float64 tensor."""
    if self.dtype != np.float64:
        raise RuntimeError(f"the base given to float_power_ has dtype {self.dtype} but the "
                           "operation's result requires dtype float64")  # fmt: skip
    return _float_power_in_place(self, exponent)


def _varargs(f: Callable) -> Callable:
    """PyTorch's method form f(*dims) of a function taking one sequence: x.flip(0, 1), or
    x.flip(dims=(0, 1))."""
    return lambda self, *dims, **named: (
        f(self, F.shape_arg(dims), **named) if dims else f(self, **named)
    )


def _split(self: Tensor, split_size: Any = None, dim: int = 0, **named: Any) -> tuple:
    """`t.split(split_size, dim)`, also by keyword as PyTorch's method names it."""
    if split_size is None:
        split_size = named.pop("split_size_or_sections")
    return A.split(self, split_size, dim, **named)


# --- NumPy interop: NumPy calls on tensors give NumPy's meaning, never a detached ndarray -------


def _array_ufunc(self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    op = NUMPY_UFUNCS.get(ufunc)
    if op is None or method != "__call__" or kwargs:
        raise TypeError(
            f"np.{ufunc.__name__}{'' if method == '__call__' else '.' + method} is not supported "
            "on tracegrad tensors (it would drop the gradient); use the tracegrad function"
        )
    # a NumPy scalar on the left (`np.float64(2) * x` lands here) is a Python number to
    # PyTorch, weak in promotion, as it is on the right
    return op(*(i.item() if isinstance(i, np.generic) else i for i in inputs))


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
_ELEMENTWISE.update(floor=P.floor, ceil=P.ceil, trunc=P.trunc, sign=E.sign)
for _name in ("astype", "where", "equal", "less", "less_equal", "greater", "greater_equal",
              "not_equal", "positive", "complex", "frexp_mantissa", "frexp_exponent"):  # fmt: skip
    _ELEMENTWISE.pop(_name, None)  # other names below, or not PyTorch's methods


def _stride(self: Tensor, dim: int | None = None) -> Any:
    """The strides, in elements, of the row-major layout `is_contiguous` promises."""
    shape = self.shape
    strides = tuple(int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape)))
    return strides if dim is None else strides[dim]


METHODS: dict[str, Any] = {
    **_ELEMENTWISE,
    # operators
    **{f"__{n}__": _operator(f) for n, f in _BINARY.items()},
    **{f"__r{n}__": _operator(f, swapped=True) for n, f in _BINARY.items()},
    "__lt__": P.less, "__le__": P.less_equal,
    "__gt__": P.greater, "__ge__": P.greater_equal, "__eq__": _comparing(P.equal),
    "__ne__": _comparing(P.not_equal), "__getitem__": F.tensor_getitem,
    "__neg__": P.neg, "__abs__": P.abs, "__pos__": lambda self: self,
    "__iadd__": W.in_place(P.add, "__iadd__"), "__isub__": W.in_place(P.sub, "__isub__"),
    "__imul__": W.in_place(P.mul, "__imul__"), "__itruediv__": W.in_place(P.div, "__itruediv__"),
    "__ipow__": W.in_place(P.pow, "__ipow__"), "__setitem__": W.setitem, "__format__": _format,
    "__ifloordiv__": W.in_place(E.floor_divide, "__ifloordiv__"),
    "__imod__": W.in_place(P.remainder, "__imod__"),
    "__iand__": W.in_place(E.bitwise_and, "__iand__"),
    "__ior__": W.in_place(E.bitwise_or, "__ior__"),
    "__ixor__": W.in_place(E.bitwise_xor, "__ixor__"),
    "__invert__": E.bitwise_not,
    "__ilshift__": W.in_place(P.bitwise_left_shift, "__ilshift__"),
    "__irshift__": W.in_place(P.bitwise_right_shift, "__irshift__"),
    "__array_ufunc__": _array_ufunc, "__array_function__": _array_function,
    "__getattr__": _missing,
    "backward": autodiff.tensor_backward, "register_hook": autodiff.register_hook,
    "register_post_accumulate_grad_hook": autodiff.register_post_accumulate_grad_hook,
    "retains_grad": property(lambda self: self._retains and not self.is_leaf),
    # shapes
    **F.PUBLIC_VIEWS,  # reshape, view, permute, ...: a new tensor even where nothing changes
    "unsqueeze": F.unsqueeze,
    **{f"{name}_": W.reshaped(getattr(F, name), f"{name}_")  # x.unsqueeze_(-1): a new shape
       for name in ("squeeze", "unsqueeze", "t", "transpose", "swapdims", "swapaxes")},
    "flatten": F.flatten, "ravel": F.ravel, "unfold": A.windows,
    "as_strided": A.as_strided,
    "sum_to_size": lambda self, *size: P.sum_to(self, F.shape_arg(size)),
    "T": property(F.reversed_axes), "mT": property(F.matrix_transpose),
    "mH": property(linalg.adjoint), "adjoint": linalg.adjoint,
    "H": property(lambda self: linalg.adjoint(_two_d(self, "Tensor.H"))),
    # indexing
    "gather": F.gather, "take_along_dim": F.take_along_dim, "index_select": F.index_select,
    "select": F.select,
    "where": lambda self, condition, other: P.where(condition, self, other),
    "nonzero": A.nonzero, "argwhere": A.argwhere, "masked_select": A.masked_select,
    "scatter": W.scatter, "scatter_add": W.scatter_add,
    "index_fill": W.index_fill, "index_put": W.index_put, "masked_fill": E.masked_fill,
    "index_add": W.index_add, "index_copy": W.index_copy, "scatter_reduce": W.scatter_reduce,
    "index_reduce": W.index_reduce,
    "masked_scatter": W.masked_scatter, "take": W.take, "put": W.put,
    "slice_scatter": W.slice_scatter, "select_scatter": W.select_scatter,
    # reductions and scans
    "sum": R.sum, "mean": R.mean, "prod": R.prod, "max": R.max, "min": R.min, "amax": R.amax,
    "amin": R.amin, "argmax": R.argmax, "argmin": R.argmin, "var": R.var, "std": R.std,
    "logsumexp": R.logsumexp, "softmax": R.softmax, "log_softmax": R.log_softmax,
    "cumsum": R.cumsum, "diff": R.diff, "all": R.all, "any": R.any, "cumprod": R.cumprod,
    "logcumsumexp": R.logcumsumexp, "cummax": R.cummax, "cummin": R.cummin,
    "count_nonzero": R.count_nonzero, "nansum": R.nansum, "nanmean": R.nanmean,
    # sorting
    "sort": S.sort, "argsort": S.argsort, "msort": S.msort, "topk": S.topk,
    "kthvalue": S.kthvalue, "median": S.median, "mode": S.mode, "quantile": S.quantile,
    "nanquantile": S.nanquantile, "nanmedian": S.nanmedian, "aminmax": R.aminmax,
    # indices and counts
    "unique": K.unique, "unique_consecutive": K.unique_consecutive, "bincount": K.bincount,
    "histc": K.histc, "histogram": K.histogram,
    # rearranging
    "split": _split, "chunk": A.chunk, "tensor_split": A.tensor_split, "unbind": A.unbind,
    "hsplit": A.hsplit, "vsplit": A.vsplit, "dsplit": A.dsplit, "flip": _varargs(A.flip),
    "fliplr": A.fliplr, "flipud": A.flipud, "roll": A.roll, "rot90": A.rot90,
    "tile": _varargs(A.tile), "repeat": A.repeat, "repeat_interleave": A.repeat_interleave,
    "diagonal": A.diagonal, "diag": A.diag, "diag_embed": A.diag_embed, "cov": R.cov,
    "corrcoef": R.corrcoef, "trace": A.matrix_trace, "triu": A.triu,
    "tril": A.tril, "diagflat": A.diagflat, "split_with_sizes": A.split_with_sizes,
    # products
    "matmul": F.matmul, "mm": F.matmul, "dot": M.dot, "inner": M.inner, "outer": M.outer,
    "kron": M.kron, "cross": M.cross, "norm": _norm, "mv": M.mv, "bmm": M.bmm,
    "addmm": M.addmm, "addmv": M.addmv,
    "addr": M.addr, "baddbmm": M.baddbmm, "addbmm": M.addbmm, "det": linalg.det,
    "logdet": linalg.logdet, "slogdet": linalg.slogdet, "cholesky": linalg.cholesky_top,
    "cholesky_solve": linalg.cholesky_solve, "cholesky_inverse": linalg.cholesky_inverse,
    "matrix_exp": linalg.matrix_exp, "geqrf": linalg.geqrf,
    "orgqr": linalg.householder_product, "lu": linalg.lu_top, "to_sparse": sparse.to_sparse,
    "to_dense": lambda self: self,
    "lu_solve": lambda self, LU_data, LU_pivots: linalg.lu_solve(LU_data, LU_pivots, self),
    "inverse": linalg.inverse, "pinverse": linalg.pinverse, "matrix_power": linalg.matrix_power,
    "dist": linalg.dist, "renorm": linalg.renorm, "vdot": M.vdot, "ger": M.outer,
    "svd": linalg.svd_top, "qr": linalg.qr_top, "triangular_solve": linalg.triangular_solve,
    # elementwise
    "clamp": F.clamp, "clip": F.clip, "square": E.square, "reciprocal": E.reciprocal,
    "rsqrt": lambda self: 1.0 / P.sqrt(self),
    "round": E.round, "sinc": E.sinc, "isnan": E.isnan, "isinf": E.isinf,
    "isfinite": E.isfinite, "nan_to_num": E.nan_to_num, "floor_divide": E.floor_divide,
    "maximum": E.maximum, "minimum": E.minimum,
    "fmax": E.fmax, "fmin": E.fmin, "deg2rad": E.deg2rad, "rad2deg": E.rad2deg, "eq": E.eq,
    "ne": E.ne, "lt": E.lt, "le": E.le, "gt": E.gt, "ge": E.ge, "equal": E.equal,
    "add": E.add, "sub": E.sub, "subtract": E.sub, "mul": E.mul, "multiply": E.mul,
    "div": E.div, "divide": E.div, "true_divide": P.div, "addcmul": E.addcmul,
    "addcdiv": E.addcdiv, "lerp": E.lerp, "relu": E.relu, "logical_not": E.logical_not,
    "logical_and": E.logical_and, "logical_or": E.logical_or, "logical_xor": E.logical_xor,
    "clamp_min": E.clamp_min, "clamp_max": E.clamp_max, "absolute": P.abs, "negative": P.neg,
    "atan2": P.arctan2, "arctan2": P.arctan2, "frac": E.frac, "sgn": E.sgn, "isreal": E.isreal,
    "heaviside": E.heaviside, "copysign": E.copysign,
    "float_power": E.float_power, "signbit": E.signbit, "isclose": E.isclose,
    "allclose": E.allclose, "isposinf": E.isposinf, "isneginf": E.isneginf,
    "bitwise_and": E.bitwise_and, "bitwise_or": E.bitwise_or, "bitwise_xor": E.bitwise_xor,
    "bitwise_not": E.bitwise_not, "ldexp": E.ldexp, "hardshrink": E.hardshrink,
    "frexp": E.frexp, "nextafter": E.nextafter,
    "prelu": E.prelu, "positive": lambda self: self,  # torch.positive(x) is x
    # special functions
    "lgamma": P.lgamma, "digamma": P.digamma, "erfc": P.erfc, "erfinv": P.erfinv, "i0": P.i0,
    "polygamma": lambda self, n: X.polygamma(n, self), "logit": X.logit, "xlogy": X.xlogy,
    "mvlgamma": X.mvlgamma, "igamma": P.igamma, "igammac": P.igammac,
    # sampling
    "multinomial": sampling.multinomial, "bernoulli": sampling.bernoulli,
    # dtypes, devices, copies, Python values
    "astype": F.astype, "float": _cast(np.float32), "double": _cast(np.float64),
    "half": _cast(np.float16), "bfloat16": _cast(BFLOAT16), "byte": _cast(np.uint8),
    "char": _cast(np.int8),
    "long": _cast(np.int64), "int": _cast(np.int32), "short": _cast(np.int16),
    "bool": _cast(np.bool_), "type": _type,
    "type_as": lambda self, other: F.astype(self, other.dtype),
    "to": _to, "cpu": lambda self: self, "cuda": _cuda, "pin_memory": lambda self: self,
    "device": property(lambda self: META if self._meta else CPU), "get_device": lambda self: -1,
    "is_cuda": property(lambda self: False), "is_xpu": property(lambda self: False),
    "is_mps": property(lambda self: False), "is_sparse": property(lambda self: False),
    "is_quantized": property(lambda self: False), "is_meta": property(lambda self: self._meta),
    "layout": property(lambda self: sparse.strided),
    "is_floating_point": lambda self: self.dtype.is_floating_point,
    "is_complex": E.is_complex, "is_signed": lambda self: self.dtype.kind in "fic",
    "cfloat": _cast(np.complex64), "cdouble": _cast(np.complex128),
    # complex numbers: `.real` and `.imag` are attributes, as PyTorch's (views), the conjugate
    # computed
    "real": property(E.real), "imag": property(E.imag), "conj": E.conj, "angle": E.angle,
    "conj_physical": E.conj, "resolve_conj": E.resolve_conj, "resolve_neg": E.resolve_neg,
    "is_conj": lambda self: False, "is_neg": lambda self: False,
    "is_cpu": property(lambda self: True), "is_inference": _is_inference,
    "is_nonzero": _is_nonzero, "is_same_size": lambda self, other: self.shape == other.shape,
    "contiguous": lambda self, memory_format=None: P.positive(self) if self._permuted else self,
    "is_contiguous": lambda self, memory_format=None: True,
    "view_as": lambda self, other: F.PUBLIC_VIEWS["view"](self, other.shape),
    "as_subclass": F.as_subclass,
    "reshape_as": lambda self, other: F.PUBLIC_VIEWS["reshape"](self, other.shape),
    "expand_as": lambda self, other: F.PUBLIC_VIEWS["expand"](self, other.shape),
    "clone": lambda self, memory_format=None: P.positive(self), "copy": P.positive,
    "new_zeros": _new(C.zeros), "new_ones": _new(C.ones), "new_empty": _new(C.empty),
    "new_full": _new_full, "new_tensor": _new_tensor, "new": _legacy_new,
    "new_empty_strided": _new_empty_strided, "apply_": _apply_,
    "map_": lambda self, other, fn: _apply_(self, fn, other),
    "map2_": lambda self, x, y, fn: _apply_(self, fn, x, y), "dim_order": _dim_order,
    "is_pinned": lambda self, device=None: False, "stft": T.stft, "istft": T.istft,
    "unsafe_chunk": A.chunk, "unsafe_split": _split,
    "unsafe_split_with_sizes": lambda self, sizes, dim=0: _split(self, list(sizes), dim),
    "numel": lambda self: self.size, "nelement": lambda self: self.size,
    "element_size": lambda self: self.dtype.itemsize,
    "itemsize": property(lambda self: self.dtype.itemsize),
    "nbytes": property(lambda self: self.size * self.dtype.itemsize), "dim": lambda self: self.ndim,
    "ndimension": lambda self: self.ndim, "tolist": lambda self: readable(self.numpy()).tolist(),
    "stride": _stride,
    "storage_offset": lambda self: storage_offset(self._concrete("Tensor.storage_offset()")),
    "data_ptr": lambda self: self._concrete("Tensor.data_ptr()").ctypes.data,
    "__dlpack__": lambda self, **kw: self._concrete("Tensor.__dlpack__()").__dlpack__(**kw),
    "__dlpack_device__": lambda self: (1, 0),  # DLPack's CPU
    "untyped_storage": lambda self: UntypedStorage.of(self._concrete("Tensor.untyped_storage()")),
    "storage": lambda self: UntypedStorage.of(self._concrete("Tensor.storage()"), typed=True),
    "share_memory_": sharing.share_memory_, "is_shared": sharing.is_shared,
    "_is_view": lambda self: self._view is not None,  # torchviz draws a view's base
    "_base": property(lambda self: None if self._view is None else self._view[0]),
    # in-place updates (the X_ of each X below is added after the table)
    "data": property(W.get_data, W.set_data), "detach_": W.detach_,
    "copy_": W.in_place(W.copy, "copy_"), "fill_": W.fill_, "zero_": W.zero_,
    "uniform_": W.in_place(W.uniform, "uniform_"), "normal_": W.in_place(W.normal, "normal_"),
    "bernoulli_": W.in_place(W.bernoulli, "bernoulli_"),
    "exponential_": W.in_place(W.exponential, "exponential_"),
    "geometric_": W.in_place(W.geometric, "geometric_"),
    "cauchy_": W.in_place(W.cauchy, "cauchy_"),
    "log_normal_": W.in_place(W.log_normal, "log_normal_"),
    "random_": W.in_place(W.random_integers, "random_"),
    "resize_": W.reshaped(W.resize, "resize_"),
    "resize_as_": W.reshaped(lambda self, other, memory_format=None: W.resize(self, other.shape),
                             "resize_as_"),
    "fill_diagonal_": W.in_place(W.fill_diagonal, "fill_diagonal_"),
    "_stack": staticmethod(F.stack),  # tensor.as_tensor stacks lists of tensors with it
}  # fmt: skip
# PyTorch's other names of methods above
_ALIASES = {"greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
            "not_equal": "ne", "asin": "arcsin", "acos": "arccos", "atan": "arctan",
            "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh", "fix": "trunc"}  # fmt: skip
METHODS.update({alias: METHODS[name] for alias, name in _ALIASES.items()})

# The methods X with an in-place X_: X's result written into the tensor by PyTorch's rules
# (cast to its dtype, a comparison's to 0 and 1; autograd through it; the version counter).
_IN_PLACE = ("add", "sub", "mul", "div", "pow", "fmod", "remainder", "clamp", "clip",
             "clamp_min", "clamp_max", "masked_fill", "exp", "log", "sqrt", "abs", "neg",
             "sigmoid", "tanh", "relu", "floor", "ceil", "trunc", "round", "sign", "sin", "cos",
             "reciprocal", "square", "addcmul", "addcdiv", "lerp", "scatter", "scatter_add",
             "index_fill", "index_put", "nan_to_num", "logical_not", "index_add", "index_copy",
             "scatter_reduce", "index_reduce", "masked_scatter", "frac", "copysign", "cumsum",
             "atan2", "put",
             # comparisons and bitwise ops
             "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less",
             "less_equal", "not_equal", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
             "bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm",
             "logical_and", "logical_or", "logical_xor",
             # unary math
             "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "asin", "acos", "atan",
             "asinh", "acosh", "atanh", "arctan2", "log10", "log1p", "log2", "erf", "erfc",
             "erfinv", "expm1", "exp2", "rsqrt", "tan", "sinh", "cosh", "sinc", "lgamma",
             "digamma", "i0", "deg2rad", "rad2deg", "sgn", "logit", "fix", "negative", "absolute",
             # binary math and the others' other names
             "xlogy", "hypot", "heaviside", "ldexp", "fmax", "fmin", "subtract", "multiply",
             "divide", "true_divide", "floor_divide",
             # special functions, scans, triangles, products
             "mvlgamma", "polygamma", "igamma", "igammac", "cumprod", "tril", "triu", "addmm",
             "addbmm", "baddbmm", "addmv", "addr", "renorm", "nextafter")  # fmt: skip
METHODS.update({f"{name}_": W.in_place(METHODS[name], f"{name}_") for name in _IN_PLACE})
METHODS["float_power_"] = _float_power_

for _name, _method in METHODS.items():
    setattr(Tensor, _name, _method)

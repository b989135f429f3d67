"""`tracegrad.numpy`: NumPy's functions with NumPy's signatures and meanings, differentiable,
as `autograd.numpy` is used: `import tracegrad.numpy as tnp`.

One meaning per name, NumPy's: `axis=`/`keepdims=`/`ddof=` (never `dim=`), `split` into
sections, `max` the values, `sort` the values, `repeat` element-wise, `var` with ddof=0,
`trace` the diagonal sum, `array` a copy and `asarray` a view, Python floats float64. Each is
written over the front end's functions (PyTorch's meanings) and the op table, so gradients,
tracing and higher order come from the primitives. NumPy calls on tensors (`np.max(t, axis=0)`)
dispatch here. A NumPy name not defined here is NumPy's own function: on tensors it runs only
if no floats come out (np.allclose), else it raises rather than detach.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as _np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend import (
    creation,
    elementwise,
    functions,
    methods,
    products,
    rearrange,
    reductions,
    sorting,
)
from tracegrad.frontend.tensor import Tensor
from tracegrad.numpy.arrays import asarray, holds_tensors, promoted

_IMPORTED = set(globals())

pi, e, inf, nan, newaxis, euler_gamma = _np.pi, _np.e, _np.inf, _np.nan, None, _np.euler_gamma
float16, float32, float64, complex64, complex128 = (
    _np.float16, _np.float32, _np.float64, _np.complex64, _np.complex128,
)  # fmt: skip
int8, int16, int32, int64, uint8, bool_ = (
    _np.int8,
    _np.int16,
    _np.int32,
    _np.int64,
    _np.uint8,
    _np.bool_,
)


# --- arrays ------------------------------------------------------------------------------------


def array(object: Any, dtype: Any = None, *, copy: bool = True, ndmin: int = 0) -> Tensor:
    """A new array (a copy, differentiable when `object` holds tensors)."""
    if not isinstance(object, Tensor) and not holds_tensors(object):
        return Tensor._of(_np.array(object, dtype, copy=copy, ndmin=ndmin))
    out = asarray(object, dtype)
    out = P.positive(out) if copy and out is object else out
    return (
        functions.reshape(out, (1,) * (ndmin - out.ndim) + out.shape) if out.ndim < ndmin else out
    )


def copy(a: Any) -> Tensor:
    return array(a)


def _no_out(name: str, out: Any) -> None:
    if out is not None:
        raise NotImplementedError(f"{name}: out= is not supported (tensors are values)")


def _ufunc(f: Callable, name: str) -> Callable:
    """NumPy's `name` as `f`, with NumPy's dtypes: Python numbers alone become float64 arrays
    (with a tensor they take its dtype, as NumPy's weak scalars do); tensors are cast to the
    dtypes of NumPy's loop (int64 with float32 is float64 here, float32 at the top level)."""
    ufunc = getattr(_np, name, None)
    ufunc = ufunc if isinstance(ufunc, _np.ufunc) else None

    def call(*args: Any) -> Tensor:
        if not builtins.any(isinstance(a, Tensor) for a in args):
            args = tuple(asarray(a) for a in args)
        return f(*(promoted(args, ufunc) if ufunc is not None else args))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"NumPy's {name}, differentiable."
    return call


_UFUNCS = {
    "add": P.add, "subtract": P.sub, "multiply": P.mul, "divide": P.div, "true_divide": P.div,
    "negative": P.neg, "positive": P.positive, "power": P.pow, "absolute": P.abs, "abs": P.abs,
    "fabs": P.abs, "mod": P.remainder, "remainder": P.remainder, "fmod": P.fmod, "exp": P.exp,
    "exp2": P.exp2, "expm1": P.expm1, "log": P.log, "log2": P.log2, "log10": P.log10,
    "log1p": P.log1p, "sqrt": P.sqrt, "sin": P.sin, "cos": P.cos, "tan": P.tan,
    "arcsin": P.arcsin, "arccos": P.arccos, "arctan": P.arctan, "sinh": P.sinh, "cosh": P.cosh,
    "tanh": P.tanh, "arcsinh": P.arcsinh, "arccosh": P.arccosh, "arctanh": P.arctanh,
    "arctan2": P.arctan2, "hypot": P.hypot, "logaddexp": P.logaddexp,
    "logaddexp2": P.logaddexp2, "maximum": P.maximum, "minimum": P.minimum, "floor": P.floor,
    "ceil": P.ceil, "trunc": P.trunc, "fix": P.trunc, "rint": P.rint, "sign": P.sign,
    "greater": P.greater, "greater_equal": P.greater_equal, "less": P.less,
    "less_equal": P.less_equal, "equal": P.equal, "not_equal": P.not_equal,
    "matmul": functions.promoting_matmul,
}  # fmt: skip
_UFUNCS.update({name: getattr(elementwise, name) for name in (
    "square", "reciprocal", "deg2rad", "rad2deg", "sinc", "fmax", "fmin", "floor_divide",
    "isnan", "isinf", "isfinite", "real", "conj")})  # fmt: skip
_UFUNCS.update(radians=elementwise.deg2rad, degrees=elementwise.rad2deg,
               conjugate=elementwise.conj)  # fmt: skip
globals().update({name: _ufunc(f, name) for name, f in _UFUNCS.items()})


def cbrt(x: Any) -> Tensor:
    x = asarray(x)
    return P.sign(x) * P.abs(x) ** (1.0 / 3.0)


def i0(x: Any) -> Tensor:
    """The modified Bessel function of order 0, differentiable (its derivative is I1)."""
    return P.i0(asarray(x))


def imag(val: Any) -> Tensor:
    x = asarray(val)
    return elementwise.imag(x) if x.dtype.kind == "c" else x * 0.0


def real_if_close(a: Any, tol: float = 100) -> Tensor:
    return asarray(a)


def angle(z: Any, deg: bool = False) -> Tensor:
    x = asarray(z)
    out = elementwise.angle(x if x.dtype.kind in "fc" else x.astype(float64))
    return out * (180.0 / math.pi) if deg else out


def round(a: Any, decimals: int = 0, out: None = None) -> Tensor:
    """Half to even; no gradient, as it is piecewise constant."""
    _no_out("round", out)
    return elementwise.round(asarray(a), decimals=decimals)


around = round


def clip(a: Any, a_min: Any = None, a_max: Any = None, out: None = None, *, min: Any = None,
         max: Any = None) -> Tensor:  # fmt: skip
    _no_out("clip", out)
    return functions.clamp(asarray(a), a_min if min is None else min, a_max if max is None else max)


def nan_to_num(x: Any, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:  # fmt: skip
    return elementwise.nan_to_num(asarray(x), nan, posinf, neginf)


def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """x where condition holds, else y; where(condition) alone is nonzero(condition)."""
    condition = asarray(condition)
    condition = condition if condition.dtype == bool_ else condition != 0  # NumPy's truth
    if x is None and y is None:
        return nonzero(condition)
    if not builtins.any(isinstance(v, Tensor) for v in (x, y)):
        x, y = asarray(x), asarray(y)
    return P.where(condition, *promoted((x, y)))


def nonzero(a: Any) -> tuple[Tensor, ...]:
    return rearrange.nonzero(asarray(a), as_tuple=True)


# --- reductions and statistics ------------------------------------------------------------------


def sum(
    a: Any, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False
) -> Tensor:
    _no_out("sum", out)
    return reductions.reduce_dims(P.sum, asarray(a), axis, bool(keepdims), dtype)


def prod(
    a: Any, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False
) -> Tensor:
    _no_out("prod", out)
    return reductions.prod(asarray(a), axis, bool(keepdims), dtype=dtype)


def mean(
    a: Any, axis: Any = None, dtype: Any = None, out: None = None, keepdims: bool = False
) -> Tensor:
    _no_out("mean", out)
    return reductions.mean_dims(asarray(a), axis, bool(keepdims), dtype)


def max(a: Any, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor:
    """The maximum's values over `axis` (ties share the gradient)."""
    _no_out("max", out)
    return reductions.amax(asarray(a), axis, bool(keepdims))


def min(a: Any, axis: Any = None, out: None = None, keepdims: bool = False) -> Tensor:
    _no_out("min", out)
    return reductions.amin(asarray(a), axis, bool(keepdims))


amax, amin = max, min


def argmax(a: Any, axis: int | None = None, out: None = None, *, keepdims: bool = False) -> Tensor:
    _no_out("argmax", out)
    return reductions.argmax(asarray(a), axis, bool(keepdims))


def argmin(a: Any, axis: int | None = None, out: None = None, *, keepdims: bool = False) -> Tensor:
    _no_out("argmin", out)
    return reductions.argmin(asarray(a), axis, bool(keepdims))


def var(a: Any, axis: Any = None, dtype: Any = None, out: None = None, ddof: float = 0,
        keepdims: bool = False, *, correction: float | None = None) -> Tensor:  # fmt: skip
    """The variance divided by N - ddof (ddof=0 by default, as NumPy's)."""
    _no_out("var", out)
    x = asarray(a) if dtype is None else functions.astype(asarray(a), dtype)
    ddof = ddof if correction is None else correction
    return reductions.var(x, axis, keepdim=bool(keepdims), correction=ddof)


def std(a: Any, axis: Any = None, dtype: Any = None, out: None = None, ddof: float = 0,
        keepdims: bool = False, *, correction: float | None = None) -> Tensor:  # fmt: skip
    ddof = ddof if correction is None else correction
    x = asarray(a) if dtype is None else functions.astype(asarray(a), dtype)
    return reductions.std(x, axis, keepdim=bool(keepdims), correction=ddof)


def median(a: Any, axis: int | None = None, out: None = None, keepdims: bool = False) -> Tensor:
    """The middle value, or the mean of the middle two (NumPy's, unlike PyTorch's lower one)."""
    _no_out("median", out)
    x = asarray(a)
    if axis is None:
        x, axis = functions.ravel(x), 0
    s = sort(x, axis)
    n = x.shape[axis]
    mid = functions.at(s, axis % x.ndim, slice((n - 1) // 2, n // 2 + 1))
    return mean(mid, axis, keepdims=keepdims)


def cumsum(a: Any, axis: int | None = None, dtype: Any = None, out: None = None) -> Tensor:
    """Running sums along `axis`, of the flattened array if None."""
    _no_out("cumsum", out)
    x = asarray(a)
    if axis is None:
        x, axis = functions.ravel(x), 0
    return reductions.cumsum(x, axis, dtype=dtype)


def cumprod(a: Any, axis: int | None = None, dtype: Any = None, out: None = None) -> Tensor:
    """Running products along `axis`, of the flattened array if None."""
    _no_out("cumprod", out)
    x = asarray(a)
    if axis is None:
        x, axis = functions.ravel(x), 0
    return reductions.cumprod(x, axis, dtype=dtype)


def diff(a: Any, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    return reductions.diff(asarray(a), n, axis, None if prepend is None else asarray(prepend),
                  None if append is None else asarray(append))  # fmt: skip


def trapezoid(y: Any, x: Any = None, dx: float = 1.0, axis: int = -1) -> Tensor:
    """The integral along `axis` by the trapezoid rule, at the points x or spacing dx."""
    return reductions.trapezoid(asarray(y), None if x is None else asarray(x),
                                dx=None if x is not None else dx, dim=axis)  # fmt: skip


def _variables(m: Any, y: Any, rowvar: bool) -> Tensor:
    """m (and y) as one 2-D array of variables in rows (NumPy's cov and corrcoef)."""
    given = [asarray(v) for v in (m, y) if v is not None]
    rows = [rearrange.atleast_2d(v if rowvar or v.ndim < 2 else v.mT) for v in given]
    out = rows[0] if len(rows) == 1 else functions.cat(rows, 0)
    return functions.reshape(out, (-1,)) if y is None and asarray(m).ndim < 2 else out


def cov(m: Any, y: Any = None, rowvar: bool = True, bias: bool = False, ddof: int | None = None,
        fweights: Any = None, aweights: Any = None, *, dtype: Any = None) -> Tensor:  # fmt: skip
    """The covariance matrix of the variables (rows, or columns if rowvar is False), divided by
    N - 1 (N with bias=True, or N - ddof)."""
    x = _variables(m, y, rowvar)
    x = x if dtype is None else functions.astype(x, dtype)
    ddof = (0 if bias else 1) if ddof is None else ddof
    return reductions.cov(x, correction=ddof, fweights=fweights, aweights=aweights)


def corrcoef(x: Any, y: Any = None, rowvar: bool = True, *, dtype: Any = None) -> Tensor:
    """Pearson's correlation coefficients of the variables, clipped to [-1, 1]."""
    v = _variables(x, y, rowvar)
    return reductions.corrcoef(v if dtype is None else functions.astype(v, dtype))


def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> tuple:
    """Coordinate grids, "xy" (Cartesian) indexing by default (NumPy's; PyTorch's default is
    "ij"); sparse=True leaves each as a broadcastable column, row, ..."""
    grids = rearrange.meshgrid(*[asarray(x) for x in xi], indexing=indexing)
    if not sparse:
        return grids
    n = len(grids)
    out = []
    for i, x in enumerate(xi):
        at = (1 - i if i < 2 else i) if indexing == "xy" and n > 1 else i
        shape = [1] * n
        shape[at] = functions.ravel(asarray(x)).shape[0]
        out.append(functions.reshape(asarray(x), tuple(shape)))
    return tuple(out)


def vander(x: Any, N: int | None = None, increasing: bool = False) -> Tensor:
    return rearrange.vander(asarray(x), N, increasing)


def gradient(f: Any, *varargs: float, axis: Any = None, edge_order: int = 1) -> Any:
    """Central differences inside, one-sided at the edges (unit or scalar spacing); one array
    for one axis, else a tuple (NumPy's)."""
    x = asarray(f)
    spacing = varargs[0] if varargs else 1.0
    out = reductions.gradient(x, spacing=spacing, dim=axis, edge_order=edge_order)
    return out[0] if len(out) == 1 else out


# --- sorting -----------------------------------------------------------------------------------


def _flat_if_none(a: Any, axis: int | None) -> tuple[Tensor, int]:
    x = asarray(a)
    return (functions.ravel(x), 0) if axis is None else (x, axis)


def sort(a: Any, axis: int | None = -1, kind: Any = None, order: Any = None) -> Tensor:
    """The values sorted along `axis` (flattened if None); the gradient goes back to where each
    value came from."""
    x, axis = _flat_if_none(a, axis)
    return sorting.sort(x, axis).values


def argsort(a: Any, axis: int | None = -1, kind: Any = None, order: Any = None) -> Tensor:
    x, axis = _flat_if_none(a, axis)
    return sorting.argsort(x, axis)


def msort(a: Any) -> Tensor:
    return sort(a, 0)


def argpartition(a: Any, kth: int | Sequence[int], axis: int = -1) -> Tensor:
    x, axis = _flat_if_none(a, axis)
    kth = kth if isinstance(kth, int) else tuple(kth)
    return P.argpartition(x, kth=kth, axis=functions.one_dim("argpartition", axis, x.ndim))


def partition(a: Any, kth: int | Sequence[int], axis: int = -1) -> Tensor:
    x, axis = _flat_if_none(a, axis)
    return functions.take_along_dim(x, argpartition(x, kth, axis), axis)


# --- shapes --------------------------------------------------------------------------------------


def shape(a: Any) -> tuple[int, ...]:
    return a.shape if isinstance(a, Tensor) else _np.shape(a)


def ndim(a: Any) -> int:
    return a.ndim if isinstance(a, Tensor) else _np.ndim(a)


def size(a: Any, axis: int | None = None) -> int:
    shp = shape(a)
    return math.prod(shp) if axis is None else shp[axis]


def reshape(a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None) -> Tensor:
    if order != "C":
        raise NotImplementedError("reshape: only order='C'")
    shape = newshape if shape is None else shape
    return functions.reshape(asarray(a), (shape,) if isinstance(shape, int) else tuple(shape))


def ravel(a: Any, order: str = "C") -> Tensor:
    return reshape(a, -1, order)


def transpose(a: Any, axes: Sequence[int] | None = None) -> Tensor:
    """The axes permuted (reversed by default)."""
    x = asarray(a)
    return functions.reversed_axes(x) if axes is None else functions.permute(x, tuple(axes))


def swapaxes(a: Any, axis1: int, axis2: int) -> Tensor:
    return functions.transpose(asarray(a), axis1, axis2)


def moveaxis(a: Any, source: Any, destination: Any) -> Tensor:
    return functions.moveaxis(asarray(a), source, destination)


def rollaxis(a: Any, axis: int, start: int = 0) -> Tensor:
    x = asarray(a)
    axis, start = axis % x.ndim, start % (x.ndim + 1)
    return functions.moveaxis(x, axis, start - 1 if axis < start else start)


def expand_dims(a: Any, axis: int | Sequence[int]) -> Tensor:
    x = asarray(a)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    n = x.ndim + len(axes)
    new = {functions.one_dim("expand_dims", ax, n) for ax in axes}
    shape = iter(x.shape)
    return functions.reshape(x, tuple(1 if i in new else next(shape) for i in range(n)))


def squeeze(a: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """The size-1 axes removed; an axis named that is not size 1 is an error (NumPy's)."""
    x = asarray(a)
    axes = functions.dim_tuple("squeeze", axis, x.ndim)
    if axis is not None and builtins.any(x.shape[ax] != 1 for ax in axes):
        raise ShapeError(f"squeeze: cannot squeeze axes {axes} of shape {x.shape}")
    return functions.squeeze(x, axes)


def broadcast_to(array: Any, shape: Sequence[int]) -> Tensor:
    return functions.broadcast_to(
        asarray(array), (shape,) if isinstance(shape, int) else tuple(shape)
    )


def concatenate(arrays: Sequence[Any], axis: int | None = 0, out: None = None) -> Tensor:
    _no_out("concatenate", out)
    xs = _arrays(arrays)
    return (
        functions.cat([functions.ravel(x) for x in xs], 0)
        if axis is None
        else functions.cat(xs, axis)
    )


def stack(arrays: Sequence[Any], axis: int = 0, out: None = None) -> Tensor:
    _no_out("stack", out)
    return functions.stack(_arrays(arrays), axis)


def _arrays(tup: Sequence[Any]) -> list[Tensor]:
    """Arrays to join, in NumPy's common dtype."""
    return list(promoted(tuple(asarray(x) for x in tup)))


def hstack(tup: Sequence[Any]) -> Tensor:
    return rearrange.hstack(_arrays(tup))


def vstack(tup: Sequence[Any]) -> Tensor:
    return rearrange.vstack(_arrays(tup))


row_stack = vstack


def dstack(tup: Sequence[Any]) -> Tensor:
    return rearrange.dstack(_arrays(tup))


def column_stack(tup: Sequence[Any]) -> Tensor:
    return rearrange.column_stack(_arrays(tup))


def atleast_1d(*arys: Any) -> Any:
    return rearrange.atleast_1d(*map(asarray, arys))


def atleast_2d(*arys: Any) -> Any:
    return rearrange.atleast_2d(*map(asarray, arys))


def atleast_3d(*arys: Any) -> Any:
    return rearrange.atleast_3d(*map(asarray, arys))


def append(arr: Any, values: Any, axis: int | None = None) -> Tensor:
    """`values` joined to the end of `arr` (both flattened when axis is None)."""
    return concatenate([asarray(arr), asarray(values)], axis)


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    return list(rearrange.tensor_split(asarray(ary), indices_or_sections, axis))


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """n equal sections (an error if they are not), or the pieces between the listed indices
    (NumPy's; PyTorch's split by chunk size is `tracegrad.split`)."""
    x = asarray(ary)
    n = x.shape[functions.one_dim("split", axis, x.ndim)]
    if isinstance(indices_or_sections, int) and n % indices_or_sections:
        raise ShapeError(
            f"split: axis {axis} of shape {x.shape} does not split into {indices_or_sections} "
            "equal parts (array_split allows unequal ones)"
        )
    return array_split(x, indices_or_sections, axis)


def hsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    return list(rearrange.hsplit(asarray(ary), indices_or_sections))


def vsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    return list(rearrange.vsplit(asarray(ary), indices_or_sections))


def dsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    return list(rearrange.dsplit(asarray(ary), indices_or_sections))


# --- rearranging -----------------------------------------------------------------------------


def repeat(a: Any, repeats: int | Sequence[int], axis: int | None = None) -> Tensor:
    """Each element repeated (NumPy's; PyTorch's x.repeat tiles)."""
    return rearrange.repeat_interleave(asarray(a), repeats, axis)


def tile(A: Any, reps: int | Sequence[int]) -> Tensor:
    return rearrange.tile(asarray(A), reps)


def roll(a: Any, shift: int | Sequence[int], axis: int | Sequence[int] | None = None) -> Tensor:
    return rearrange.roll(asarray(a), shift, axis)


def flip(m: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """Reversed along `axis` (all axes by default)."""
    x = asarray(m)
    return rearrange.flip(x, tuple(range(x.ndim)) if axis is None else axis)


def fliplr(m: Any) -> Tensor:
    return rearrange.fliplr(asarray(m))


def flipud(m: Any) -> Tensor:
    return rearrange.flipud(asarray(m))


def rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Tensor:
    return rearrange.rot90(asarray(m), k, axes)


def pad(array: Any, pad_width: Any, mode: str = "constant", constant_values: float = 0) -> Tensor:
    """NumPy's pad in "constant" mode (the one with a simple gradient, as in autograd)."""
    x = asarray(array)
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r}; only 'constant' is differentiable here")
    widths = _np.broadcast_to(_np.asarray(pad_width, dtype=_np.int64), (x.ndim, 2))
    return P.pad(x, pad_width=tuple(map(tuple, widths.tolist())), value=float(constant_values))


def take_along_axis(arr: Any, indices: Any, axis: int | None) -> Tensor:
    return functions.take_along_dim(asarray(arr), indices, axis)


def take(a: Any, indices: Any, axis: int | None = None) -> Tensor:
    x, axis = _flat_if_none(a, axis)
    return functions.at(x, functions.one_dim("take", axis, x.ndim), asarray(indices))


def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Tensor:
    """The first choice whose condition holds, else `default` (NumPy's select; PyTorch's
    select(x, dim, index) is `tracegrad.select`)."""
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist, strict=True))):
        out = where(cond, choice, out)
    return asarray(out)


# --- triangles, diagonals, products ---------------------------------------------------------------


def triu(m: Any, k: int = 0) -> Tensor:
    return rearrange.triu(asarray(m), k)


def tril(m: Any, k: int = 0) -> Tensor:
    return rearrange.tril(asarray(m), k)


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    return rearrange.diagonal(asarray(a), offset, axis1, axis2)


def diag(v: Any, k: int = 0) -> Tensor:
    return rearrange.diag(asarray(v), k)


def make_diagonal(D: Any, offset: int = 0, axis1: int = -1, axis2: int = -2) -> Tensor:
    """autograd's inverse of diagonal: D's last axis laid on the diagonal of new last two axes
    (offset 0 and those axes only, as autograd)."""
    if offset != 0 or (axis1, axis2) not in ((-1, -2), (-2, -1)):
        raise NotImplementedError("make_diagonal: only offset=0, axis1=-1, axis2=-2")
    x = asarray(D)
    return functions.unsqueeze(x, -1) * _np.eye(x.shape[-1], dtype=x.dtype)


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None,
          out: None = None) -> Tensor:  # fmt: skip
    """The sum along a diagonal (NumPy's; `tracegrad.trace` is the compiler)."""
    _no_out("trace", out)
    return sum(diagonal(a, offset, axis1, axis2), -1, dtype)


def dot(a: Any, b: Any, out: None = None) -> Tensor:
    """A product for scalars, matmul up to 2-D, else a sum over a's last axis and b's
    second-to-last (NumPy's)."""
    _no_out("dot", out)
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if b.ndim <= 2:
        return functions.promoting_matmul(a, b)
    return products.tensordot(a, b, ([-1], [-2]))


def vdot(a: Any, b: Any) -> Tensor:
    return functions.promoting_matmul(ravel(a), ravel(b))


def inner(a: Any, b: Any) -> Tensor:
    return products.inner(asarray(a), asarray(b))


def outer(a: Any, b: Any, out: None = None) -> Tensor:
    """The outer product of the flattened inputs."""
    _no_out("outer", out)
    return products.outer(ravel(a), ravel(b))


def kron(a: Any, b: Any) -> Tensor:
    return products.kron(asarray(a), asarray(b))


def tensordot(a: Any, b: Any, axes: Any = 2) -> Tensor:
    return products.tensordot(asarray(a), asarray(b), axes)


def cross(
    a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: Any = None
) -> Tensor:
    """The cross product of 2- or 3-vectors (2-vectors get a zero third component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = functions.moveaxis(asarray(a), axisa, -1), functions.moveaxis(asarray(b), axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ShapeError(f"cross: vectors must have 2 or 3 components, got {a.shape}, {b.shape}")
    a, b = (v if v.shape[-1] == 3 else pad(v, [(0, 0)] * (v.ndim - 1) + [(0, 1)]) for v in (a, b))
    return functions.moveaxis(products.cross3(a, b, -1), -1, axisc)


def einsum(*operands: Any, out: None = None, optimize: Any = False, **kwargs: Any) -> Tensor:
    """NumPy's einsum (a subscripts string, or the sublist form), as one contraction op."""
    _no_out("einsum", out)
    if isinstance(operands[0], str):
        return products.promoting_einsum(operands[0], *map(asarray, operands[1:]))
    n = len(operands) - len(operands) % 2
    return products.promoting_einsum(*(asarray(v) if i % 2 == 0 and i < n else v
                                       for i, v in enumerate(operands)))  # fmt: skip


# --- constructors ------------------------------------------------------------------------------


def _from(make: Callable) -> Callable:
    def build(*args: Any, **kwargs: Any) -> Tensor:
        return Tensor._of(make(*args, **kwargs))

    build.__name__ = build.__qualname__ = make.__name__
    build.__doc__ = f"NumPy's {make.__name__}, as a tensor (float64 by default)."
    return build


zeros, ones, empty, eye, identity, arange = map(
    _from, (_np.zeros, _np.ones, _np.zeros, _np.eye, _np.identity, _np.arange)
)
empty.__name__ = "empty"


def full(shape: Any, fill_value: Any, dtype: Any = None) -> Tensor:
    """`fill_value` everywhere; a tensor `fill_value` is broadcast, so its gradient flows."""
    if isinstance(fill_value, Tensor):
        return creation.full(shape, fill_value, dtype)
    return Tensor._of(_np.full(shape, fill_value, dtype))


def zeros_like(a: Any, dtype: Any = None) -> Tensor:
    return Tensor._of(_np.zeros(shape(a), dtype or asarray(a).dtype))


def ones_like(a: Any, dtype: Any = None) -> Tensor:
    return Tensor._of(_np.ones(shape(a), dtype or asarray(a).dtype))


def full_like(a: Any, fill_value: Any, dtype: Any = None) -> Tensor:
    x = asarray(a)
    return full(x.shape, fill_value, dtype or x.dtype)


empty_like = zeros_like


def linspace(
    start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None
) -> Tensor:
    """NumPy's linspace (float64 for Python numbers); differentiable in tensor endpoints."""
    return creation.spaced(start, stop, num, endpoint, dtype, _np.float64)


# --- the namespace -------------------------------------------------------------------------------

from tracegrad.numpy import linalg, random  # noqa: E402, F401 (they use the functions above)

__all__ = sorted({"asarray"} | {n for n in globals() if n[0] != "_" and n not in _IMPORTED})


def __getattr__(name: str) -> Any:
    """Any other NumPy name is NumPy's own (constants, dtypes, np.allclose): on a tensor it
    runs only if no floats come out, else it raises rather than detach the gradient."""
    if name.startswith("__") and name != "__version__":
        raise AttributeError(name)
    try:
        return getattr(_np, name)
    except AttributeError:
        raise AttributeError(f"module 'tracegrad.numpy' has no attribute '{name}'") from None


# np.<name>(tensor) and the ufunc np.<name> on a tensor dispatch to NumPy's meaning here.
for _name in __all__:
    _numpy_value = getattr(_np, _name, None)
    if isinstance(_numpy_value, _np.ufunc):
        methods.NUMPY_UFUNCS[_numpy_value] = globals()[_name]
    elif callable(_numpy_value) and not isinstance(_numpy_value, type):
        methods.NUMPY_FUNCTIONS[_numpy_value] = globals()[_name]

"""The rest of NumPy's differentiable functions (HIPS autograd's list), with NumPy's signatures.

Each is a composition of the op table's primitives (slicing, index arrays, transposes, einsum,
...), so none needs a VJP of its own: gradients, tracing and higher order come from the
primitives. `np.<name>(tensor)` dispatches here too (see frontend.functions._FUNCTIONS).
"""

from __future__ import annotations

import builtins
import inspect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend import functions as api
from tracegrad.frontend.functions import (
    _axes,
    concatenate,
    expand_dims,
    getitem,
    max,
    min,
    reshape,
    stack,
    sum,
    swapaxes,
    torch_names,
    transpose,
)
from tracegrad.frontend.tensor import Tensor, as_tensor

# --- elementwise: NumPy's other names, and compositions ----------------------------------------

add, subtract, multiply, divide, true_divide = P.add, P.sub, P.mul, P.div, P.div
negative, power, absolute, fabs, mod, fix = P.neg, P.pow, P.abs, P.abs, P.remainder, P.trunc


def square(x: Any) -> Tensor:
    x = as_tensor(x)
    return x * x


def reciprocal(x: Any) -> Tensor:
    return 1.0 / as_tensor(x)


def deg2rad(x: Any) -> Tensor:
    return as_tensor(x) * (math.pi / 180.0)


def rad2deg(x: Any) -> Tensor:
    return as_tensor(x) * (180.0 / math.pi)


radians, degrees = deg2rad, rad2deg


def sinc(x: Any) -> Tensor:
    """sin(pi x) / (pi x), 1 at 0; the 0 is replaced before dividing so the gradient there is
    0, not nan."""
    x = as_tensor(x)
    at_zero = x == 0.0
    safe = P.where(at_zero, 1.0, x) * math.pi
    return P.where(at_zero, 1.0, P.sin(safe) / safe)


def fmax(x: Any, y: Any) -> Tensor:
    """maximum, ignoring a nan on one side (NumPy's fmax)."""
    x, y = as_tensor(x), as_tensor(y)
    return P.where(y != y, x, P.where(x != x, y, P.maximum(x, y)))


def fmin(x: Any, y: Any) -> Tensor:
    x, y = as_tensor(x), as_tensor(y)
    return P.where(y != y, x, P.where(x != x, y, P.minimum(x, y)))


def floor_divide(x: Any, y: Any) -> Tensor:
    return P.floor(P.div(x, y))


def isnan(x: Any) -> Tensor:
    x = as_tensor(x)
    return x != x


def isinf(x: Any) -> Tensor:
    return P.abs(x) == math.inf


def isfinite(x: Any) -> Tensor:
    x = as_tensor(x)
    return (x - x) == 0.0  # inf - inf and nan - nan are nan


def round(a: Any, decimals: int = 0) -> Tensor:
    """NumPy's round (half to even); no gradient, as it is piecewise constant."""
    scale = 10.0**decimals
    return P.rint(as_tensor(a) * scale) / scale if decimals else P.rint(a)


around = round


def nan_to_num(
    x: Any, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
    neginf: float | None = None,
) -> Tensor:  # fmt: skip
    """nan and infinities replaced by finite numbers; gradient 1 where x was finite, else 0."""
    x = as_tensor(x)
    big = np.finfo(x.dtype).max if x.dtype.kind == "f" else 0
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    return P.where(x != x, nan, P.where(x == math.inf, posinf, P.where(x == -math.inf, neginf, x)))


def real(x: Any) -> Tensor:
    return as_tensor(x)


def imag(x: Any) -> Tensor:
    x = as_tensor(x)
    return x * 0.0


conj = conjugate = real_if_close = real


def angle(x: Any) -> Tensor:
    """0 for x >= 0, pi for x < 0 (real inputs); no gradient."""
    x = as_tensor(x).detach()
    return P.where(x < 0.0, math.pi, 0.0).astype(x.dtype if x.dtype.kind == "f" else np.float64)


# --- scans, differences, sorting ------------------------------------------------------------


@torch_names
def cumsum(a: Any, axis: int | None = None, dtype: Any = None) -> Tensor:
    x = as_tensor(a)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    out = P.cumsum(x, axis=_axes("cumsum", axis, x.ndim)[0])
    return out if dtype is None else out.astype(dtype)


def _slice(x: Tensor, axis: int, start: int | None, stop: int | None, step: int = 1) -> Tensor:
    return getitem(x, (slice(None),) * axis + (slice(start, stop, step),))


@torch_names
def diff(a: Any, n: int = 1, axis: int = -1) -> Tensor:
    x = as_tensor(a)
    axis = _axes("diff", axis, x.ndim)[0]
    for _ in range(n):
        x = _slice(x, axis, 1, None) - _slice(x, axis, None, -1)
    return x


@torch_names
def take_along_axis(arr: Any, indices: Any, axis: int) -> Tensor:
    """arr[..., indices, ...] with `indices` broadcast against arr's other axes (NumPy's)."""
    x, idx = as_tensor(arr), as_tensor(indices)
    axis = _axes("take_along_axis", axis, x.ndim)[0]
    grids = []
    for d in range(x.ndim):
        if d == axis:
            grids.append(idx)
        else:
            shape = [1] * x.ndim
            shape[d] = x.shape[d]
            grids.append(np.arange(x.shape[d]).reshape(shape))
    return getitem(x, tuple(grids))


@torch_names
def argsort(a: Any, axis: int = -1) -> Tensor:
    x = as_tensor(a)
    return P.argsort(x, axis=_axes("argsort", axis, x.ndim)[0])


@torch_names
def sort(a: Any, axis: int = -1) -> Tensor:
    """Sorted along `axis`; the gradient goes back to where each element came from."""
    x = as_tensor(a)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return take_along_axis(x, argsort(x, axis), axis)


def msort(a: Any) -> Tensor:
    return sort(a, 0)


def argpartition(a: Any, kth: int | Sequence[int], axis: int = -1) -> Tensor:
    x = as_tensor(a)
    kth = kth if isinstance(kth, int) else tuple(kth)
    return P.argpartition(x, kth=kth, axis=_axes("argpartition", axis, x.ndim)[0])


def partition(a: Any, kth: int | Sequence[int], axis: int = -1) -> Tensor:
    x = as_tensor(a)
    return take_along_axis(x, argpartition(x, kth, axis), axis)


def argmin(x: Any, axis: int = -1) -> Tensor:
    return api.argmax(-as_tensor(x), axis)


# --- rearranging: repeat, tile, roll, flips, rotations, pads, axes --------------------------


def _take(x: Tensor, index: np.ndarray, axis: int) -> Tensor:
    return getitem(x, (slice(None),) * axis + (index,))


def ravel(a: Any) -> Tensor:
    return reshape(a, (-1,))


@torch_names
def repeat(a: Any, repeats: int | Sequence[int], axis: int | None = None) -> Tensor:
    x = as_tensor(a)
    if axis is None:
        x, axis = ravel(x), 0
    axis = _axes("repeat", axis, x.ndim)[0]
    return _take(x, np.repeat(np.arange(x.shape[axis]), repeats), axis)


def tile(a: Any, reps: int | Sequence[int]) -> Tensor:
    x = as_tensor(a)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    n = builtins.max(x.ndim, len(reps))
    reps = (1,) * (n - len(reps)) + reps
    x = reshape(x, (1,) * (n - x.ndim) + x.shape)
    spread = api.broadcast_to(
        reshape(x, tuple(v for d in x.shape for v in (1, d))),
        tuple(v for r, d in zip(reps, x.shape, strict=True) for v in (r, d)),
    )
    return reshape(spread, tuple(r * d for r, d in zip(reps, x.shape, strict=True)))


def roll(a: Any, shift: int | Sequence[int], axis: int | Sequence[int] | None = None) -> Tensor:
    x = as_tensor(a)
    if axis is None:
        return reshape(roll(ravel(x), shift, 0), x.shape)
    shifts, axes = np.broadcast_arrays(np.atleast_1d(shift), np.atleast_1d(axis))
    for s, ax in zip(shifts, axes, strict=True):
        ax = _axes("roll", int(ax), x.ndim)[0]
        x = _take(x, np.roll(np.arange(x.shape[ax]), int(s)), ax)
    return x


def flip(m: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    x = as_tensor(m)
    index = [slice(None)] * x.ndim
    for ax in _axes("flip", axis, x.ndim):
        index[ax] = slice(None, None, -1)
    return getitem(x, tuple(index))


def fliplr(m: Any) -> Tensor:
    return flip(m, 1)


def flipud(m: Any) -> Tensor:
    return flip(m, 0)


def rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Tensor:
    """NumPy's rot90: k quarter turns from the first axis towards the second."""
    x = as_tensor(m)
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return flip(flip(x, axes[0]), axes[1])
    if k == 1:
        return swapaxes(flip(x, axes[1]), *axes)
    return flip(swapaxes(x, *axes), axes[1])


def pad(array: Any, pad_width: Any, mode: str = "constant", constant_values: float = 0) -> Tensor:
    """NumPy's pad in "constant" mode (the one with a simple gradient, as in autograd)."""
    x = as_tensor(array)
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r}; only 'constant' is differentiable here")
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    return P.pad(x, pad_width=tuple(map(tuple, widths.tolist())), value=float(constant_values))


def moveaxis(a: Any, source: Any, destination: Any) -> Tensor:
    x = as_tensor(a)
    src = [s % x.ndim for s in np.atleast_1d(source).tolist()]
    dst = [d % x.ndim for d in np.atleast_1d(destination).tolist()]
    order = [n for n in range(x.ndim) if n not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return transpose(x, order)


def rollaxis(a: Any, axis: int, start: int = 0) -> Tensor:
    x = as_tensor(a)
    axis, start = axis % x.ndim, start % (x.ndim + 1)
    return moveaxis(x, axis, start - 1 if axis < start else start)


def _atleast(x: Any, n: int) -> Tensor:
    x = as_tensor(x)
    if x.ndim >= n:
        return x
    if n == 3 and x.ndim == 2:
        return reshape(x, x.shape + (1,))
    if n == 3:
        return reshape(x, (1, x.size, 1))
    return reshape(x, (1,) * (n - x.ndim) + x.shape)


def atleast_1d(*arys: Any) -> Any:
    out = [_atleast(a, 1) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys: Any) -> Any:
    out = [_atleast(a, 2) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys: Any) -> Any:
    out = [_atleast(a, 3) for a in arys]
    return out[0] if len(out) == 1 else out


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    x = as_tensor(ary)
    axis = _axes("array_split", axis, x.ndim)[0]
    n = x.shape[axis]
    if isinstance(indices_or_sections, int):
        parts, extra = divmod(n, indices_or_sections)
        sizes = [parts + 1] * extra + [parts] * (indices_or_sections - extra)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    else:
        bounds = [0, *indices_or_sections, n]
    return [_slice(x, axis, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    x = as_tensor(ary)
    if isinstance(indices_or_sections, int) and x.shape[axis] % indices_or_sections:
        raise ShapeError(
            f"split: axis {axis} of shape {x.shape} does not split into {indices_or_sections} "
            "equal parts (array_split allows unequal ones)"
        )
    return array_split(x, indices_or_sections, axis)


def hsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    x = as_tensor(ary)
    return split(x, indices_or_sections, 1 if x.ndim > 1 else 0)


def vsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    return split(ary, indices_or_sections, 0)


def dsplit(ary: Any, indices_or_sections: Any) -> list[Tensor]:
    return split(ary, indices_or_sections, 2)


def hstack(tup: Sequence[Any]) -> Tensor:
    xs = [_atleast(x, 1) for x in tup]
    return concatenate(xs, 0 if xs[0].ndim == 1 else 1)


def vstack(tup: Sequence[Any]) -> Tensor:
    return concatenate([_atleast(x, 2) for x in tup], 0)


def dstack(tup: Sequence[Any]) -> Tensor:
    return concatenate([_atleast(x, 3) for x in tup], 2)


# --- triangles, diagonals, products ------------------------------------------------------------


def triu(m: Any, k: int = 0) -> Tensor:
    x = as_tensor(m)
    return P.where(np.triu(np.ones(x.shape[-2:], bool), k), x, 0.0)


def tril(m: Any, k: int = 0) -> Tensor:
    x = as_tensor(m)
    return P.where(np.tril(np.ones(x.shape[-2:], bool), k), x, 0.0)


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The diagonal of the (axis1, axis2) planes, as a last axis (NumPy's)."""
    x = as_tensor(a)
    x = moveaxis(x, (axis1, axis2), (-2, -1))
    rows, cols = x.shape[-2:]
    if offset >= 0:
        n = builtins.max(0, builtins.min(rows, cols - offset))
    else:
        n = builtins.max(0, builtins.min(rows + offset, cols))
    i = np.arange(n) + (0 if offset >= 0 else -offset)
    return getitem(x, (Ellipsis, i, i + offset))


def diag(v: Any, k: int = 0) -> Tensor:
    """A 1-D input becomes a matrix with it on diagonal k; a 2-D one gives its diagonal k."""
    x = as_tensor(v)
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ShapeError(f"diag: input must be 1-D or 2-D, got {x.shape}")
    n = x.shape[0] + abs(k)
    i = np.arange(x.shape[0])
    rows, cols = (i, i + k) if k >= 0 else (i - k, i)
    return P.scatter_add(x, rows, cols, shape=(n, n), template=("@", "@"))


def make_diagonal(D: Any, offset: int = 0, axis1: int = -1, axis2: int = -2) -> Tensor:
    """autograd's inverse of diagonal: D's last axis laid on the diagonal of new last two axes
    (offset 0 and those axes only, as autograd)."""
    if offset != 0 or (axis1, axis2) not in ((-1, -2), (-2, -1)):
        raise NotImplementedError("make_diagonal: only offset=0, axis1=-1, axis2=-2")
    x = as_tensor(D)
    return expand_dims(x, -1) * np.eye(x.shape[-1], dtype=x.dtype)


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Tensor:
    out = sum(diagonal(a, offset, axis1, axis2), -1)
    return out if dtype is None else out.astype(dtype)


def outer(a: Any, b: Any) -> Tensor:
    return reshape(ravel(a), (-1, 1)) * reshape(ravel(b), (1, -1))


def tensordot(a: Any, b: Any, axes: Any = 2) -> Tensor:
    """NumPy's tensordot: the summed axes to the inside, then one matrix product."""
    a, b = as_tensor(a), as_tensor(b)
    if isinstance(axes, int):
        sa, sb = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        sa, sb = (
            (np.atleast_1d(axes[0]) % a.ndim).tolist(),
            (np.atleast_1d(axes[1]) % b.ndim).tolist(),
        )
    if [a.shape[i] for i in sa] != [b.shape[i] for i in sb]:
        raise ShapeError(f"tensordot: {a.shape} and {b.shape} over axes {sa} and {sb}")
    fa = [i for i in range(a.ndim) if i not in sa]
    fb = [i for i in range(b.ndim) if i not in sb]
    k = math.prod(a.shape[i] for i in sa)
    a2 = reshape(transpose(a, fa + sa), (-1, k))
    b2 = reshape(transpose(b, sb + fb), (k, -1))
    return reshape(
        api.matmul(a2, b2), tuple(a.shape[i] for i in fa) + tuple(b.shape[i] for i in fb)
    )


def dot(a: Any, b: Any) -> Tensor:
    """NumPy's dot: a product for scalars, matmul up to 2-D, else a sum over a's last axis and
    b's second-to-last."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if b.ndim <= 2:
        return api.matmul(a, b)
    return tensordot(a, b, ([-1], [-2]))


def inner(a: Any, b: Any) -> Tensor:
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, ([-1], [-1]))


def kron(a: Any, b: Any) -> Tensor:
    a, b = as_tensor(a), as_tensor(b)
    n = a.ndim if a.ndim > b.ndim else b.ndim
    a = reshape(a, (1,) * (n - a.ndim) + a.shape)
    b = reshape(b, (1,) * (n - b.ndim) + b.shape)
    prod = reshape(a, tuple(v for d in a.shape for v in (d, 1))) * reshape(
        b, tuple(v for d in b.shape for v in (1, d))
    )
    return reshape(prod, tuple(x * y for x, y in zip(a.shape, b.shape, strict=True)))


def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: Any = None):
    """The cross product of 3-vectors (2-vectors get a zero third component) along the axes."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ShapeError(f"cross: vectors must have 2 or 3 components, got {a.shape}, {b.shape}")
    a = (
        a
        if a.shape[-1] == 3
        else P.pad(a, pad_width=((0, 0),) * (a.ndim - 1) + ((0, 1),), value=0.0)
    )
    b = (
        b
        if b.shape[-1] == 3
        else P.pad(b, pad_width=((0, 0),) * (b.ndim - 1) + ((0, 1),), value=0.0)
    )
    c = [a[..., i] for i in range(3)], [b[..., i] for i in range(3)]
    (a0, a1, a2), (b0, b1, b2) = c
    out = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)
    return moveaxis(out, -1, axisc)


def einsum(subscripts: str, *operands: Any) -> Tensor:
    """NumPy's einsum (explicit or implicit output, `...`), as one contraction op."""
    xs = [as_tensor(x) for x in operands]
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    ins = ins.split(",")
    if len(ins) != len(xs):
        raise ShapeError(f"einsum '{subscripts}': {len(ins)} subscripts for {len(xs)} operands")
    used = set(spec) - set(".,->")
    spare = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used)
    ell_n = np.max(
        [
            x.ndim - len(s.replace("...", "")) if "..." in s else 0
            for s, x in zip(ins, xs, strict=True)
        ]
    )
    ell = "".join(next(spare) for _ in range(int(ell_n)))
    ins = [
        s.replace("...", ell[len(ell) - (x.ndim - len(s) + 3) :])
        for s, x in zip(ins, xs, strict=True)
    ]
    if arrow:
        out = out.replace("...", ell)
    else:
        letters = "".join(ins)
        out = ell + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell)
        )
    return P.einsum(*xs, spec=",".join(ins) + "->" + out)


# --- construction and selection ------------------------------------------------------------


def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None):
    """NumPy's linspace; differentiable in `start` and `stop`."""
    steps = np.linspace(0.0, 1.0, num, endpoint=endpoint)
    if not isinstance(start, Tensor) and not isinstance(stop, Tensor):
        python = all(type(v) in (int, float) for v in (start, stop))
        dtype = np.float32 if dtype is None and python else dtype  # as everywhere in tracegrad
        return Tensor(np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype))
    start, stop = as_tensor(start), as_tensor(stop)
    out = start + (stop - start) * steps.astype(np.result_type(start.dtype, stop.dtype))
    return out if dtype is None else out.astype(dtype)


def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Tensor:
    """The first choice whose condition holds, else `default` (NumPy's select)."""
    out = as_tensor(default) if isinstance(default, Tensor) else default
    for cond, choice in reversed(list(zip(condlist, choicelist, strict=True))):
        out = P.where(as_tensor(cond), choice, out)
    return as_tensor(out)


def full_like(a: Any, fill_value: Any, dtype: Any = None) -> Tensor:
    a = as_tensor(a)
    return api.full(a.shape, fill_value, dtype or a.dtype)


empty_like = api.zeros_like


def gradient(f: Any, axis: int | None = None) -> Any:
    """NumPy's gradient with unit spacing (central differences inside, one-sided at the
    edges); a list over all axes when `axis` is None and f has several."""
    x = as_tensor(f)
    axes = _axes("gradient", axis, x.ndim)
    out = []
    for ax in axes:
        inner = (_slice(x, ax, 2, None) - _slice(x, ax, None, -2)) * 0.5
        first = _slice(x, ax, 1, 2) - _slice(x, ax, 0, 1)
        last = _slice(x, ax, -1, None) - _slice(x, ax, -2, -1)
        out.append(concatenate([first, inner, last], ax))
    return out[0] if len(out) == 1 else out


amax, amin = max, min

__all__ = [
    "absolute", "add", "amax", "amin", "angle", "argmin", "argpartition", "argsort", "around",
    "array_split", "atleast_1d", "atleast_2d", "atleast_3d", "conj", "conjugate", "cross",
    "cumsum", "deg2rad", "degrees", "diag", "diagonal", "diff", "divide", "dot", "dsplit",
    "dstack", "einsum", "empty_like", "fabs", "fix", "flip", "fliplr", "flipud", "floor_divide",
    "fmax", "fmin", "full_like", "gradient", "hsplit", "hstack", "imag", "inner", "isfinite",
    "isinf", "isnan", "kron", "linspace", "make_diagonal", "mod", "moveaxis", "msort",
    "multiply", "nan_to_num",
    "negative", "outer", "pad", "partition", "power", "rad2deg", "radians", "ravel", "real",
    "real_if_close", "reciprocal", "repeat", "rollaxis", "roll", "rot90", "round", "select",
    "sinc", "sort", "split", "square", "subtract", "take_along_axis", "tensordot", "tile",
    "trace", "tril", "triu", "true_divide", "vsplit", "vstack",
]  # fmt: skip

# PyTorch's dim=/keepdim= wherever axis= is taken (the functions above not already wrapped)
for _name in __all__:
    _f = globals()[_name]
    if inspect.isfunction(_f) and not hasattr(_f, "__wrapped__"):
        if "axis" in inspect.signature(_f).parameters:
            globals()[_name] = torch_names(_f)

# np.<name>(tensor) dispatches to these; Tensor gets the methods NumPy arrays and PyTorch
# tensors share.
api._FUNCTIONS.update({getattr(np, name): globals()[name] for name in __all__
                       if hasattr(np, name) and callable(getattr(np, name))})  # fmt: skip
api._FUNCTIONS.update({np.var: api.var, np.std: api.std, np.full: api.full,
                       np.swapaxes: swapaxes, np.round: round})  # fmt: skip
api._UFUNCS.update({np.square: square, np.reciprocal: reciprocal, np.deg2rad: deg2rad,
                    np.rad2deg: rad2deg, np.fmax: fmax, np.fmin: fmin, np.isnan: isnan,
                    np.isinf: isinf, np.isfinite: isfinite,
                    np.floor_divide: floor_divide})  # fmt: skip
Tensor.__floordiv__ = floor_divide
Tensor.__rfloordiv__ = lambda self, other: floor_divide(other, self)
for _f in (cumsum, diff, sort, argsort, repeat, roll, flip, ravel, diagonal, trace, dot, argmin,
           tile, square, reciprocal):  # fmt: skip
    setattr(Tensor, _f.__name__, _f)

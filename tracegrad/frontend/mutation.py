"""In-place operations with PyTorch's rules: `x.add_(y)`, `x[mask] = 0`, `p.data.add_(g)`,
`x.copy_(y)`, `scatter_`, the random fills.

- A leaf that requires grad refuses an in-place update while grad is enabled (its gradient
  would be of a value it no longer holds); under `no_grad` (optimizers, initialization) it is
  written in place, as any tensor autograd does not track.
- A tensor autograd tracks (or one given a tracked value, `pe[:, 0::2] = sin(w)`) takes the new
  value and its history, so later uses see both. Values saved for backward are never
  overwritten by this: backward gives the gradient of what was computed, where PyTorch raises
  "a variable needed for gradient computation has been modified by an inplace operation".
- A write into an array (under `no_grad`, or of an untracked tensor) bumps the tensor's version
  counter; a backward that needs the value it held before raises, as PyTorch's does.

Tensors are values, not views of storage, but a write into a view (`x[0]`, `x.view(...)`,
`x.t()`: `functions.viewing`) writes its base too, as PyTorch's (`write_back`); `t.data` is a
tensor whose in-place updates reach `t`, as PyTorch code updates parameters through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.errors import ShapeError, TraceError
from tracegrad.core.ops.random import uniform_dtype
from tracegrad.core.vocabulary import Primitive
from tracegrad.frontend import random
from tracegrad.frontend.autodiff import edge, no_grad
from tracegrad.frontend.functions import (
    BASIC_INDEX_TYPES,
    astype,
    bool_value,
    broadcast_to,
    index_parts,
    one_dim,
    pytorch_index,
    pytorch_keywords,
    reshape,
    shape_arg,
)
from tracegrad.frontend.tensor import Alias, Listeners, Tensor, as_tensor, lift_operands


def write(target: Tensor, result: Any, op: str) -> Tensor:
    """Make `target` hold `result` (broadcast to its shape, cast to its dtype): the last step of
    every in-place op, by the rules above."""
    result = as_tensor(result)
    if _copy_into(target, result):
        return target
    if Listeners.grad_enabled and target.is_leaf and target.requires_grad:
        raise RuntimeError(
            f"{op}: a leaf tensor that requires grad cannot be changed in place; wrap the update "
            "in `with torch.no_grad():` (as optimizers do) or use an out-of-place op"
        )
    if result.shape != target.shape:
        if _broadcast(result.shape, target.shape) != target.shape:
            raise ShapeError(
                f"{op}: the result's shape {result.shape} does not broadcast to the tensor's "
                f"{target.shape} (an in-place op keeps the shape)"
            )
        result = broadcast_to(result, target.shape)
    if result.dtype != target.dtype:
        if not bfloat16.can_cast(result.dtype, target.dtype, "same_kind"):
            raise TypeError(f"{op}: result type {result.dtype} can't be cast to the tensor's "
                            f"dtype {target.dtype}")  # fmt: skip
        result = astype(result, target.dtype)
    tracked = edge(result) is not None
    if Listeners.grad_enabled and (tracked or not target.is_leaf):
        _rebind(target, P.positive(result) if tracked and result.is_leaf else
                result if tracked else _replacing(target, result), op)  # fmt: skip
        if isinstance(target, Alias):  # `t.data.lerp_(tracked)`: t's values change all the same
            target._base._assign(Tensor._wrap(target._value))
    else:
        target._assign(result)
        if not Listeners.tracers and _shares_base(target):
            return target  # the view's array is its base's memory: the base has the write
    write_back(target, op)
    return target


def _shares_base(view: Tensor) -> bool:
    """Whether a view's array is (eagerly) its base's memory (a diagonal's is a copy)."""
    return view._view is None or np.may_share_memory(view._value, view._view[0]._value)


def _replacing(target: Tensor, result: Tensor) -> Tensor:
    """`result`, untracked, as a value of the tracked `target`'s history, as PyTorch's
    `x.zero_()`, `x.copy_(constant)`: still requiring grad, its gradient to the old value
    zero."""
    return P.where(Tensor._of(np.True_), result, target)


def write_back(view: Tensor, op: str) -> None:
    """After a write into a view (basic indexing's result, `view`, `permute` and the transposes,
    `unsqueeze`, `diagonal`: `a[0][3] = 0.`, `row = a[i]; row += 1`, `a.t().mul_(2)`), write its
    base as PyTorch's views do. Eagerly most share memory, but a write autograd records, or any
    write in a traced step, gives the view a new value of its own, which the base would never
    see."""
    if view._view is not None:
        base, undo = view._view
        write(base, undo(view) if callable(undo) else index_put(base, undo, view), op)


def _rebind(target: Tensor, result: Tensor, op: str) -> None:
    """`target` takes `result`'s value and history (a new version counter: what nodes saved of
    the old value stays as it was)."""
    if _before_the_step(target):
        raise TraceError(
            f"{op}: an in-place op that autograd records, on a tensor of shape {target.shape} "
            "made before the traced step; compute it out of place, or update it under no_grad()"
        )
    version = target._version[0] + 1
    target._value, target._node, target._version = result._value, result._node, [version]
    if not target.is_leaf and target._retains:
        target.retain_grad()


def _before_the_step(t: Tensor) -> bool:
    """Whether `t` was made before the step being traced, if one is (an argument or state: a
    plan can write its value, not give it a new history or shape)."""
    tracer = Listeners.tracers[-1] if Listeners.tracers else None
    return tracer is not None and t._serial <= tracer.start


def in_place(f: Callable, name: str) -> Callable:
    """The in-place method `name` of the out-of-place function `f` (x.add_(y) of add). An op
    of one ufunc (a primitive's, or a function's `ufunc`: add's and sub's, whose `alpha=`
    scales the operand first) runs eagerly in the tensor's array where `_into` can."""
    ufunc = f.impl if isinstance(f, Primitive) else getattr(f, "ufunc", None)
    ufunc = ufunc if isinstance(ufunc, np.ufunc) else None

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if ufunc is not None and len(args) == 1 and kwargs.keys() <= {"alpha"}:
            if _into(self, ufunc, args[0], kwargs.get("alpha", 1)):
                return self
        return write(self, f(self, *args, **kwargs), name)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In place: {name[:-1]}, by PyTorch's rules (see tracegrad.frontend.mutation)."
    return method


def reshaped(f: Callable, name: str) -> Callable:
    """The in-place method `name` of a view op that changes the shape (x.unsqueeze_(-1) of
    unsqueeze, x.t_() of t): the tensor itself takes the view's shape, value and history."""

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if Listeners.grad_enabled and self.is_leaf and self.requires_grad:
            raise RuntimeError(f"{name}: a leaf tensor that requires grad cannot be changed in "
                               "place; use the out-of-place op")  # fmt: skip
        if _before_the_step(self):
            raise TraceError(
                f"{name} on a tensor of shape {self.shape} made before the traced step (an "
                "argument or state): a plan cannot change the caller's tensor's shape; use the "
                f"out-of-place op (x = x.{name[:-1]}(...))"
            )
        _rebind(self, f(self, *args, **kwargs), name)
        return self

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In place: {name[:-1]}; the tensor takes the new shape (as PyTorch's)."
    return method


def array_target(target: Tensor) -> bool:
    """Whether an eager in-place op may compute straight into `target`'s array, the test of
    every fast path below: not while tracing; a writable array; not a view held as a copy (a
    diagonal: `write` writes its base too); an alias (`p.data`) only while it holds its tensor's
    array still (`Alias._assign` writes the array the tensor holds now); and nothing autograd
    tracks, whose write `write` records."""
    a = target._value
    if Listeners.tracers or a.__class__ is not np.ndarray or not a.flags.writeable:
        return False
    if isinstance(target, Alias) and a is not target._base._value:
        return False
    if Listeners.grad_enabled and edge(target) is not None:
        return False
    return _shares_base(target)


def _into(target: Tensor, ufunc: np.ufunc, other: Any, alpha: Any = 1) -> bool:
    """Eagerly, where `write` would copy the result into an untracked tensor's array, compute
    it there: `buf *= m` in one pass, not a new array and a copy (an optimizer's every state
    update); `alpha` scales `other` first (`add_`, `sub_`). False, having done nothing, where
    the general path must run."""
    if not array_target(target):
        return False
    other = lift_operands((target, other if alpha == 1 else other * alpha))[1]
    if Listeners.grad_enabled and edge(other) is not None:
        return False
    a, b = target._value, other._value
    if b.dtype != a.dtype or b.shape != a.shape and _broadcast(b.shape, a.shape) != a.shape:
        return False
    if a.dtype.kind == "V":  # bfloat16's bits: NumPy has no arithmetic for them
        return False
    target._version[0] += 1
    ufunc(a, b, out=a)
    return True


def _copy_into(target: Tensor, result: Tensor) -> bool:
    """Eagerly, an untracked result written into an untracked tensor's array by one copy that
    broadcasts and casts (`write`'s general path makes the broadcast and the cast as arrays of
    their own first: a target network's `copy_` of its source, every in-place op's write). False,
    having done nothing, where the general path must run (its errors, autograd's rules)."""
    if not array_target(target) or Listeners.grad_enabled and edge(result) is not None:
        return False
    a, b = target._value, result._value
    if (
        b.__class__ is not np.ndarray
        or b.shape != a.shape
        and _broadcast(b.shape, a.shape) != a.shape
        or not np.can_cast(b.dtype, a.dtype, "same_kind")
    ):
        return False
    target._version[0] += 1
    np.copyto(a, b, casting="same_kind")
    return True


def _broadcast(shape: tuple, into: tuple) -> tuple | None:
    """The shape `shape` and `into` broadcast to, None where they do not."""
    try:
        return np.broadcast_shapes(shape, into)
    except ValueError:
        return None


def fill_(self: Tensor, value: Any) -> Tensor:
    """`x.fill_(value)`: `value` everywhere (a number or a 0-d tensor), in place."""
    return _fill_in_place(self, value, "fill_")


def zero_(self: Tensor) -> Tensor:
    """`x.zero_()`: zeros everywhere, in place."""
    return _fill_in_place(self, 0, "zero_")


def _fill_in_place(self: Tensor, value: Any, op: str) -> Tensor:
    """Eagerly, a Python number into an untracked tensor's array by NumPy's fill, which makes it
    in the array's dtype as `fill` does (`p.grad.zero_()` in a tutorial's loop); else `write`,
    by PyTorch's rules."""
    if value.__class__ in (int, float, bool) and array_target(self) and self.dtype != BFLOAT16:
        try:
            self._value.fill(value)
        except (OverflowError, ValueError, TypeError):
            pass  # `write` names what the dtype cannot hold
        else:
            self._version[0] += 1
            return self
    return write(self, fill(self, value), op)


def zero_grads(params: Iterable[Tensor], set_to_none: bool) -> None:
    """`zero_grad`'s work (modules', optimizers'): drop each gradient, or zero it in place, which
    an alias of `p.grad` sees, as in PyTorch; eagerly in the array itself (`array_target`),
    without an array of zeros to copy from."""
    for p in params:
        g = p.grad
        if set_to_none or g is None:
            p.grad = None
        elif array_target(g):
            g._value.fill(0)
            g._version[0] += 1
        else:
            g._assign(Tensor._of(np.zeros(g._value.shape, g._value.dtype)))


def fill(self: Tensor, value: Any) -> Tensor:
    """`value` (a number or a 0-d tensor) everywhere, in this tensor's dtype."""
    if not isinstance(value, Tensor):
        return Tensor._of(bfloat16.as_dtype(value, self.dtype))
    if value.ndim:
        raise ShapeError(f"fill_: expects a number or a 0-d tensor, got shape {value.shape}")
    return value if value.dtype == self.dtype else astype(value, self.dtype)


def copy(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """`src` broadcast to this shape and cast to this dtype (any cast, as PyTorch's copy_)."""
    src = as_tensor(src)
    return src if src.dtype == self.dtype else astype(src, self.dtype)


def uniform(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
    """Numbers from U(a, b), drawn from the counter-based random state (a traced step draws
    afresh at every call)."""
    return a + (b - a) * _uniform(self, "uniform_", generator)


def normal(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Tensor:
    """Numbers from N(mean, std^2), drawn from the counter-based random state."""
    with no_grad():
        z = random.draw(P.normal, random.state_of(generator), shape=self.shape,
                        dtype=uniform_dtype(self.dtype))  # fmt: skip
    return mean + std * z


def bernoulli(self: Tensor, p: Any = 0.5, *, generator: Any = None) -> Tensor:
    """1 with probability `p` (a number or a tensor), else 0."""
    return P.where(_uniform(self, "bernoulli_", generator) < p, 1, 0)


def exponential(self: Tensor, lambd: float = 1.0, *, generator: Any = None) -> Tensor:
    """Numbers from the exponential distribution of rate `lambd` (by inversion)."""
    return P.log1p(-_uniform(self, "exponential_", generator)) * (-1.0 / lambd)


def geometric(self: Tensor, p: float, *, generator: Any = None) -> Tensor:
    """The trial of the first success, 1, 2, ..., each trial succeeding with probability `p`."""
    u = _uniform(self, "geometric_", generator)
    return P.floor(P.log1p(-u) / float(np.log1p(-p))) + 1


def cauchy(self: Tensor, median: float = 0.0, sigma: float = 1.0, *,
           generator: Any = None) -> Tensor:  # fmt: skip
    """Numbers from the Cauchy distribution about `median` of scale `sigma`."""
    return median + sigma * P.tan(np.pi * (_uniform(self, "cauchy_", generator) - 0.5))


def log_normal(self: Tensor, mean: float = 1.0, std: float = 2.0, *,
               generator: Any = None) -> Tensor:  # fmt: skip
    """exp of numbers from N(mean, std^2) (`mean` and `std` are the logarithm's)."""
    return P.exp(normal(self, mean, std, generator=generator))


def random_integers(self: Tensor, *bounds: int, generator: Any = None, **named: int) -> Tensor:
    """`random_`'s integers: random_(to) in [0, to), random_(from, to) in [from, to); none given,
    in [0, 2^mantissa] for floats (every integer the dtype holds exactly), [0, max) for ints."""
    given = [named.pop(k, None) for k in ("from", "to")]
    bounds = (*bounds, *(v for v in given if v is not None))
    if named or len(bounds) > 2:
        raise TypeError(f"random_: expected random_(to) or random_(from, to), got {bounds} "
                        f"{named or ''}")  # fmt: skip
    if not bounds:
        top = 2 ** (bfloat16.finfo(self.dtype).nmant + 1) + 1 if self.dtype.kind == "f" else None
        bounds = (top or (2 if self.dtype == np.bool_ else int(np.iinfo(self.dtype).max)),)
    low, high = (0, *bounds) if len(bounds) == 1 else bounds
    if high <= low:
        raise ValueError(f"random_: expects from < to, got from={low}, to={high}")
    with no_grad():
        out = random.draw(P.randint, random.state_of(generator), shape=self.shape, low=int(low),
                          high=int(high), dtype=np.dtype(np.int64))  # fmt: skip
    return out if self.dtype == np.int64 else astype(out, self.dtype)


def _uniform(like: Tensor, op: str, generator: Any) -> Tensor:
    with no_grad():
        return random.uniform(like.shape, uniform_dtype(like.dtype), random.state_of(generator))


def resize(self: Tensor, *sizes: Any, memory_format: Any = None) -> Tensor:
    """`resize_`'s result: the elements in order, cut to the new size or (where PyTorch leaves
    new memory unset) padded with zeros."""
    shape = shape_arg(sizes)
    flat, size = reshape(self, (-1,)), int(np.prod(shape))
    if size < self.size:
        flat = flat[:size]
    elif size > self.size:
        flat = P.concatenate(flat, Tensor._of(np.zeros(size - self.size, self.dtype)), axis=0)
    return reshape(flat, shape)


# --- indexed writes --------------------------------------------------------------------------


def fill_diagonal(self: Tensor, fill_value: Any, wrap: bool = False) -> Tensor:
    """`fill_diagonal_`'s result: the main diagonal (all indices equal) set to `fill_value`; of a
    tall matrix with `wrap`, again every columns + 1 rows, as NumPy's fill_diagonal."""
    x = as_tensor(self)
    if x.ndim < 2 or (x.ndim > 2 and len(set(x.shape)) != 1):
        raise ShapeError(f"fill_diagonal_: needs a matrix or a tensor of equal sides, got "
                         f"{x.shape}")  # fmt: skip
    rows = np.arange(min(x.shape))
    if wrap and x.ndim == 2 and x.shape[0] > x.shape[1] + 1:
        rows = np.arange(x.shape[0])
        rows = rows[rows % (x.shape[1] + 1) < x.shape[1]]
        cols = rows % (x.shape[1] + 1)
        return index_put(x, (Tensor._of(rows), Tensor._of(cols)), fill_value)
    return index_put(x, (Tensor._of(rows),) * x.ndim, fill_value)


def setitem(self: Tensor, index: Any, value: Any) -> None:
    """`x[index] = value`, differentiable in both (PyTorch's index_put_)."""
    if not _set_in_array(self, index, value):
        write(self, index_put(self, pytorch_index(index), value), "__setitem__")


def _set_in_array(target: Tensor, index: Any, value: Any) -> bool:
    """Eagerly, `x[index] = value` by NumPy's assignment into the array where it means what
    `index_put` does: an untracked value into an untracked tensor, at a basic index or by
    boolean masks, which name no position twice (`index_put` builds the region by scatters and
    a select: `x[:, 0] = 0` in a data pipeline). False, having done nothing, where the general
    path must run (its errors, autograd's rules, indices that may repeat)."""
    tensor_value = isinstance(value, Tensor)
    if not array_target(target) or (
        Listeners.grad_enabled and tensor_value and edge(value) is not None
    ):
        return False
    items = index if index.__class__ is tuple else (index,)
    arrays = []
    for item in items:
        kind = item.__class__
        if kind is slice:
            ends = (item.start, item.stop, item.step)
            if any(e is not None and e.__class__ is not int for e in ends) or (item.step or 1) < 1:
                return False
        elif kind not in BASIC_INDEX_TYPES:
            if not (isinstance(item, Tensor) and item._value.dtype == np.bool_ and item.ndim):
                return False
            item = item._value
        arrays.append(item)
    v = value._value if tensor_value else value
    bits = target._value.dtype == BFLOAT16  # numbers rounded to bfloat16, not cast to its bits
    if v.__class__ is not np.ndarray and not isinstance(v, int | float | bool):
        return False  # lists, NumPy scalars, complex numbers: as_written's rules
    try:
        target._value[tuple(arrays)] = bfloat16.as_dtype(v, BFLOAT16) if bits else v
    except (IndexError, ValueError, TypeError, OverflowError):
        return False  # NumPy checks before it writes: the general path names the error
    target._version[0] += 1
    return True


def index_put(input: Any, index: Any, value: Any, accumulate: bool = False) -> Tensor:
    """`input` with input[index] = value (or += with `accumulate`); `value` broadcasts to the
    indexed region. A boolean mask of input's shape with one value is a `where`, so it traces;
    other indices scatter."""
    x = as_tensor(input)
    if any(bool_value(i) is False for i in (index if isinstance(index, tuple) else (index,))):
        return x  # a bool scalar False selects nothing
    mask = index if isinstance(index, Tensor | np.ndarray) else None
    if mask is not None and mask.dtype == np.bool_ and mask.shape == x.shape and not accumulate:
        if as_tensor(value).ndim == 0:
            out = P.where(mask, value, x)
            return out if out.dtype == x.dtype else astype(out, x.dtype)
    template, arrays = index_parts(index)
    return put_region(x, template, arrays, value, accumulate)


def as_written(value: Any, dtype: np.dtype) -> Tensor:
    """A value written into a tensor of `dtype`: a tensor as it is (cast where it is written),
    anything else (a Python float, a list, an array) made in that dtype at once, as PyTorch
    does; made in the default float dtype first, 0.1 would lose float64's precision."""
    return value if isinstance(value, Tensor) else as_tensor(value, dtype)


def put_region(x: Tensor, template: tuple, arrays: list, value: Any, accumulate: bool) -> Tensor:
    """x with the region that getitem(template, arrays) reads replaced by (or, accumulating,
    increased by) `value`. Where an index repeats, the values written there are averaged
    (PyTorch leaves unspecified which one wins; equal values, the usual case, are exact), and
    each has the gradient there, as in PyTorch."""
    if x.dtype == np.bool_:
        as_bytes = astype(as_written(value, np.bool_), np.uint8)
        return put_region(astype(x, np.uint8), template, arrays, as_bytes,
                          accumulate).astype(np.bool_)  # fmt: skip
    region, _ = P.getitem.shape_rule(x, *arrays, template=template)
    v = as_written(value, x.dtype)
    extra = v.ndim - len(region)  # leading 1s beyond the region's rank go, as in NumPy and PyTorch
    if extra > 0 and all(d == 1 for d in v.shape[:extra]):
        v = reshape(v, v.shape[extra:])
    v = broadcast_to(v if v.dtype == x.dtype else astype(v, x.dtype), tuple(region))
    placed = P.scatter_add(v, *arrays, shape=x.shape, template=template)
    if accumulate:
        return x + placed
    with no_grad():
        count_dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.int64)
        ones = Tensor._of(np.ones(tuple(region), count_dtype))
        count = P.scatter_add(ones, *arrays, shape=x.shape, template=template)
    if arrays:  # only index arrays can repeat a position
        mean = placed / P.maximum(count, 1)  # integers: exact for equal values
        mean = mean if mean.dtype == x.dtype else astype(mean, x.dtype)
        # each repeated value's gradient is the whole gradient there, as PyTorch's index_put
        # gives it (grad[index]), not its share of the mean
        placed = placed - (placed - mean).detach() if placed.requires_grad else mean
    return P.where(count > 0, placed, x)


@pytorch_keywords
def scatter(input: Any, dim: int, index: Any, src: Any = None, *, value: Any = None,
            reduce: str | None = None) -> Tensor:  # fmt: skip
    """out[index[i][j]][j] = src[i][j] for dim=0 (and likewise for other dims); `src` may be a
    number (or `value=`). `reduce="add"` adds instead, "multiply" multiplies."""
    src = value if src is None else src
    if reduce == "multiply":
        return scatter_reduce(input, dim, index, src, "prod")
    if reduce not in (None, "add"):
        raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', not {reduce!r}")
    return _scatter(input, dim, index, src, reduce == "add", "scatter")


@pytorch_keywords
def scatter_add(input: Any, dim: int, index: Any, src: Any) -> Tensor:
    """out[index[i][j]][j] += src[i][j] for dim=0 (and likewise for other dims)."""
    return _scatter(input, dim, index, src, True, "scatter_add")


def _scatter(input: Any, dim: int, index: Any, src: Any, accumulate: bool, op: str) -> Tensor:
    x = as_tensor(input)
    grids, src = _scatter_parts(x, dim, index, src, op)
    return put_region(x, ("@",) * x.ndim, grids, src, accumulate)


def _scatter_parts(x: Tensor, dim: int, index: Any, src: Any, op: str) -> tuple[list, Tensor]:
    """`scatter`'s index arrays, one per axis of x (`index` along `dim`, the positions along the
    others), and the part of `src` they send."""
    idx = as_tensor(index)
    if idx.ndim != x.ndim:
        raise ShapeError(f"{op}: index {idx.shape} and input {x.shape} differ in dimensions")
    d = one_dim(op, dim, x.ndim)
    grids = []
    for axis in range(x.ndim):
        shape = [1] * x.ndim
        shape[axis] = idx.shape[axis]
        grids.append(idx if axis == d else Tensor._of(np.arange(idx.shape[axis]).reshape(shape)))
    src = as_written(src, x.dtype)
    if src.ndim:  # the part of src at index's positions
        if src.ndim != idx.ndim or any(s < i for s, i in zip(src.shape, idx.shape, strict=True)):
            raise ShapeError(f"{op}: src {src.shape} is smaller than index {idx.shape}")
        src = src[tuple(slice(0, n) for n in idx.shape)]
    return grids, src


@pytorch_keywords
def index_fill(input: Any, dim: int, index: Any, value: Any) -> Tensor:
    """input with the slices at `index` along `dim` set to `value`."""
    x = as_tensor(input)
    d = one_dim("index_fill", dim, x.ndim)
    return index_put(x, (slice(None),) * d + (reshape(as_tensor(index), (-1,)),), value)


# --- PyTorch's `.data` -------------------------------------------------------------------------


def get_data(self: Tensor) -> Tensor:
    """`t.data`: a tensor autograd does not track, holding `t`'s array; an in-place op on it
    writes `t` (also in a traced step, where `t` is state)."""
    return self._alias()


def set_data(self: Tensor, value: Any) -> None:
    """`t.data = x`: t holds x's memory from now on, as in PyTorch (Lightning unshares a module
    that processes received in shared memory by `p.data = p.data.clone()`; `a.data = b.data`
    ties two tensors). Inside a traced step, t takes x's values (its state is written)."""
    new = as_tensor(value)
    if Listeners.tracers:
        if new.shape != self.shape or new.dtype != self.dtype:
            raise TraceError(
                f"t.data = x with another shape or dtype ({self.shape} {self.dtype} -> "
                f"{new.shape} {new.dtype}) inside a traced step: do it before the step"
            )
        with no_grad():
            self._assign(new)
        return
    array = new._value
    writable = isinstance(array, np.ndarray) and array.flags.writeable
    self._value = array if writable else np.array(array)
    self._version[0] += 1


def detach_(self: Tensor) -> Tensor:
    """Cut this tensor from its history, in place: a leaf that does not require grad."""
    self._node = None
    self._requires_grad = False
    return self


def _along(x: Tensor, dim: int, index: Any, op: str) -> tuple:
    """The index template that selects `index` along `dim` of `x`."""
    d = one_dim(op, dim, x.ndim)
    return (slice(None),) * d + (index,)


@pytorch_keywords
def index_add(input: Any, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Tensor:
    """input with alpha * source's slices added at `index` along `dim`; repeated indices add
    up (graph networks' sum of messages into their nodes)."""
    x = as_tensor(input)
    values = as_tensor(source) if alpha == 1 else as_tensor(source) * alpha
    idx = reshape(as_tensor(index), (-1,))
    return index_put(x, _along(x, dim, idx, "index_add"), values, accumulate=True)


@pytorch_keywords
def index_copy(input: Any, dim: int, index: Any, source: Any) -> Tensor:
    """input with source's slices written at `index` along `dim`."""
    x = as_tensor(input)
    idx = reshape(as_tensor(index), (-1,))
    return index_put(x, _along(x, dim, idx, "index_copy"), source)


@pytorch_keywords
def scatter_reduce(input: Any, dim: int, index: Any, src: Any, reduce: str, *,
                   include_self: bool = True) -> Tensor:  # fmt: skip
    """src's elements combined into input at `index` along `dim` by "sum", "prod", "mean",
    "amax" or "amin", with or without input's own values. The extremes' gradient is split
    evenly among the values that tie, the input's own among them with `include_self`; a
    product's is the product of the others (PyTorch's rules). An integer mean rounds down, as
    PyTorch's."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ValueError(f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or "
                         f"'amin', not {reduce!r}")  # fmt: skip
    x = as_tensor(input)
    with no_grad():
        ones = Tensor._of(bfloat16.full(as_tensor(index).shape, 1, x.dtype))
        count = _scatter(Tensor._of(np.zeros(x.shape, x.dtype)), dim, index, ones, True, "count")
    if reduce in ("amax", "amin", "prod"):
        grids, part = _scatter_parts(x, dim, index, src, "scatter_reduce")
        part = astype(as_tensor(part), x.dtype)
        if include_self:
            grids, part = _with_own(x, grids, part)
        template = ("@",) * x.ndim
        if reduce == "prod":
            out = P.scatter_prod(part, *grids, shape=x.shape, template=template)
        else:
            part = part if reduce == "amax" else P.neg(part)
            out = P.scatter_max(part, *grids, shape=x.shape, template=template)
            out = out if reduce == "amax" else P.neg(out)
        return out if include_self else P.where(count > 0, out, x)
    zeros = P.mul(x, 0.0) if x.dtype.kind == "f" else x * 0
    total = _scatter(zeros, dim, index, src, True, "scatter_reduce")
    if include_self:
        total = total + x
        count = count + 1
    if reduce == "mean":
        n = P.maximum(count, 1)
        out = total / n if x.dtype.kind == "f" else total // n
    else:
        out = total
    out = out if out.dtype == x.dtype else astype(out, x.dtype)
    return out if include_self else P.where(count > 0, out, x)


@pytorch_keywords
def index_reduce(input: Any, dim: int, index: Any, source: Any, reduce: str, *,
                 include_self: bool = True) -> Tensor:  # fmt: skip
    """source's slices combined into input's at `index` along `dim` by "prod", "mean", "amax"
    or "amin": `scatter_reduce` with the index spread over the slices (its gradients)."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ValueError(f"index_reduce: reduce must be 'prod', 'mean', 'amax' or 'amin', not "
                         f"{reduce!r}")  # fmt: skip
    src = as_tensor(source)
    d = dim % max(src.ndim, 1)
    idx = reshape(as_tensor(index), (1,) * d + (-1,) + (1,) * (src.ndim - d - 1))
    return scatter_reduce(input, dim, broadcast_to(idx, src.shape), src, reduce,
                          include_self=include_self)  # fmt: skip


def _with_own(x: Tensor, grids: list, part: Tensor) -> tuple[list, Tensor]:
    """Scatter's index arrays and sources, flat, with x's own elements among the sources, each
    at its place: a maximum that ties with x's value shares its gradient with x, a product's
    gradient counts x's zeros."""
    shape = np.broadcast_shapes(*(g.shape for g in grids))
    own = np.indices(x.shape).reshape(x.ndim, -1)
    flat = [reshape(broadcast_to(g, shape), (-1,)) for g in grids]
    grids = [P.concatenate(Tensor._of(o), f, axis=0) for o, f in zip(own, flat, strict=True)]
    part = reshape(broadcast_to(part, shape), (-1,))
    return grids, P.concatenate(reshape(x, (-1,)), part, axis=0)


@pytorch_keywords
def slice_scatter(input: Any, src: Any, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> Tensor:  # fmt: skip
    """input with `src` in the slice start:end:step along `dim`."""
    x = as_tensor(input)
    return index_put(x, _along(x, dim, slice(start, end, step), "slice_scatter"), src)


@pytorch_keywords
def select_scatter(input: Any, src: Any, dim: int, index: int) -> Tensor:
    """input with `src` at position `index` along `dim`."""
    x = as_tensor(input)
    return index_put(x, _along(x, dim, index, "select_scatter"), src)


def masked_scatter(input: Any, mask: Any, source: Any) -> Tensor:
    """input with source's leading elements, in order, where `mask` is true. How many depends
    on the mask's values: eager only."""
    x, m = as_tensor(input), as_tensor(mask)
    m = broadcast_to(m, x.shape)
    n = int(m._concrete("masked_scatter").sum())
    src = reshape(as_tensor(source), (-1,))
    if n > src.shape[0]:
        raise ShapeError(f"masked_scatter: the mask selects {n} elements, source has "
                         f"{src.shape[0]}")  # fmt: skip
    return index_put(x, (m,), src[:n])


def take(input: Any, index: Any) -> Tensor:
    """input's elements at flat positions `index` (as if input were 1-d)."""
    return reshape(as_tensor(input), (-1,))[as_tensor(index)]


def put(input: Any, index: Any, source: Any, accumulate: bool = False) -> Tensor:
    """`input` with the elements at flat positions `index` (as if input were 1-d; negative ones
    count from the end) set to (or, accumulating, increased by) `source`'s, `take`'s inverse."""
    x, index, source = as_tensor(input), as_tensor(index), as_tensor(source)
    if index.size != source.size:
        raise ShapeError(f"put: index {index.shape} and source {source.shape} must have the "
                         "same number of elements")  # fmt: skip
    flat = index_put(reshape(x, (-1,)), (reshape(index, (-1,)),), reshape(source, (-1,)),
                     accumulate)  # fmt: skip
    return reshape(flat, x.shape)


__all__ = ["index_add", "index_copy", "index_fill", "index_put", "index_reduce", "masked_scatter",
           "put", "scatter", "scatter_add", "scatter_reduce", "select_scatter",
           "slice_scatter", "take"]  # fmt: skip

"""The top level's functions have PyTorch's signatures and meanings; this module holds the
keyword rules they share and the basic ones: shapes and views (`transpose(x, 0, 1)` swaps two
dims; `permute` reorders), indexing and gathering, joining, matmul and clamp. The others are
in reductions, sorting, rearrange, products, elementwise, creation and linalg.

NumPy's meanings of the names where the two libraries differ live in `tracegrad.numpy`, written
over these. A function with a `dim` accepts NumPy's `axis`/`keepdims` as aliases (as PyTorch
does); any other NumPy keyword raises and says where NumPy's function is.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError, TraceError, user_location, warn_user
from tracegrad.core.ops import shapes
from tracegrad.frontend.promotion import result_type
from tracegrad.frontend.tensor import Listeners, Tensor, as_tensor, call_into

# Keywords only NumPy's functions take: a top-level call with one is a NumPy habit, and the
# error says where NumPy's meaning lives.
NUMPY_KEYWORDS = frozenset({
    "axis", "keepdims", "axes", "axis1", "axis2", "axisa", "axisb", "axisc", "ddof", "a_min",
    "a_max", "indices_or_sections", "repeats", "reps", "kind", "order", "newshape",
    "shift", "num", "endpoint", "condlist", "choicelist", "copy",
})  # fmt: skip
_ALIASES = (("axis", "dim"), ("keepdims", "keepdim"))


def pytorch_keywords(f: Callable | None = None, *, aliases: bool = True) -> Callable:
    """`f` taking NumPy's `axis=`/`keepdims=` as aliases of its `dim=`/`keepdim=` (as PyTorch's
    functions do; not where `aliases` is False, as for `split`, whose NumPy namesake means
    another thing), PyTorch's `out=` (`tensor.call_into`), and naming
    `tracegrad.numpy.<name>` when called with a NumPy keyword."""
    if f is None:
        return functools.partial(pytorch_keywords, aliases=aliases)
    params = inspect.signature(f).parameters
    renames = {a: name for a, name in _ALIASES if name in params} if aliases else {}

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs and not kwargs.keys() <= params.keys():
            if "out" in kwargs and "out" not in params:
                return call_into(call, args, kwargs, f.__name__)
            kwargs = _renamed(f.__name__, params, renames, kwargs)
        return f(*args, **kwargs)

    return call


def _renamed(name: str, params: Any, aliases: dict, kwargs: dict) -> dict:
    out = {}
    for key, value in kwargs.items():
        if key in params:
            out[key] = value
        elif key in aliases:
            if aliases[key] in kwargs:
                raise TypeError(f"{name}: got both {aliases[key]}= and {key}=")
            out[aliases[key]] = value
        else:
            hint = f" ({key}= is NumPy's: NumPy's {name} is tracegrad.numpy.{name})"
            raise TypeError(f"{name}() got an unexpected keyword argument '{key}'"
                            + (hint if key in NUMPY_KEYWORDS else ""))  # fmt: skip
    return out


def dim_tuple(op: str, dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """`dim` (an int, a sequence, or None: all) as sorted non-negative axes of an ndim array."""
    if dim.__class__ is int and ndim and -ndim <= dim < ndim:  # the common cases, asked per op
        return (dim % ndim,)
    if dim is None:
        return tuple(range(ndim))
    axes = range(ndim) if dim is None else (dim,) if isinstance(dim, int | np.integer) else dim
    out = []
    for a in axes:
        if not -builtins.max(ndim, 1) <= a < builtins.max(ndim, 1):
            raise ShapeError(f"{op}: dim {a} is out of range for a tensor of {ndim} dimensions")
        out.append(int(a) % builtins.max(ndim, 1))
    return tuple(sorted(set(out))) if ndim else ()


def one_dim(op: str, dim: int, ndim: int) -> int:
    return dim_tuple(op, dim, builtins.max(ndim, 1))[0]


def shape_arg(shape: tuple) -> tuple:
    """(4, 3) from f(4, 3) or f((4, 3)) or f([4, 3])."""
    return tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape


def sequence_keyword(*names: str) -> Callable:
    """`f(input, *sizes)` also taking its sizes or dims as one sequence by PyTorch's keyword
    (`x.reshape(shape=(4, 6))`, `x.permute(dims=(2, 0, 1))`, `x.expand(size=...)`)."""

    def wrap(f: Callable) -> Callable:
        @functools.wraps(f)
        def call(input: Any, *sizes: Any, **kwargs: Any) -> Any:
            if kwargs and not sizes:  # the keyword form, rare: views are called all the time
                given = [n for n in names if n in kwargs]
                if given:
                    sizes = (kwargs.pop(given[0]),)
            return f(input, *sizes, **kwargs)

        return call

    return wrap


# --- shapes and views ------------------------------------------------------------------------


@sequence_keyword("shape")
def reshape(input: Any, *shape: Any) -> Tensor:
    """reshape(x, (4, 3)) or reshape(x, 4, 3); one -1 is inferred."""
    return _in_shape(as_tensor(input), shape)


def _in_shape(x: Tensor, shape: tuple) -> Tensor:
    """`reshape`'s work, for `view` too without the keyword wrapper (x itself if it has that
    shape)."""
    shape = list(shape_arg(shape))
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        size = x._value.size
        if known == 0 or size % known == 0:  # else the shape rule names the shape as given
            shape[shape.index(-1)] = size // known if known else 0
    shape = tuple(map(int, shape))
    return x if shape == x._value.shape else P.reshape(x, shape=shape)


def alias(x: Tensor) -> Tensor:
    """A new tensor viewing all of `x`: PyTorch's views are new tensors even where they change
    nothing (`x.squeeze()` of a tensor without size-1 dimensions), and code tags them with
    attributes of their own (pyro's packed dimensions)."""
    return viewing(x, P.reshape(x, shape=x._value.shape), lambda v: reshape(v, x.shape))


def viewing(x: Tensor, out: Tensor, undo: Any) -> Tensor:
    """`out` as a view of `x`, as PyTorch's views: an in-place op on it writes `x` too
    (`mutation.write_back`), with `undo`, which gives x's value from out's (a function), or the
    index out was read at."""
    if out is not x:
        out._view = (x, undo)
        if x._permuted:  # a view of a permuted view is not contiguous either
            out._permuted = True
    return out


@sequence_keyword("size", "shape")
def view(input: Any, *shape: Any, dtype: Any = None) -> Tensor:
    """`x.view(shape)`: reshape, whose result is a view (`reshape`'s, which PyTorch may copy,
    is a value). `x.view(torch.int32)`: the same bytes read as another dtype (the last axis
    rescaled by the sizes' ratio), sharing memory and carrying no gradient, as PyTorch's."""
    x = as_tensor(input)
    if dtype is None and len(shape) == 1 and shape[0].__class__ is not int and _is_dtype(shape[0]):
        dtype, shape = shape[0], ()
    if dtype is not None:
        if shape:
            raise TypeError("view: give a shape or a dtype, not both")
        if x.is_symbolic:
            raise TraceError(
                f"view({np.dtype(dtype).name}) of a tensor of the traced step: reading bytes as "
                "another dtype is not traced; use .to(dtype)"
            )
        return Tensor._of(x._value.view(np.dtype(dtype)))
    return viewing(x, _in_shape(x, shape), lambda v: reshape(v, x.shape))


def as_subclass(input: Tensor, cls: type) -> Tensor:
    """`x.as_subclass(cls)`: a tensor of class `cls` (a Tensor subclass) with x's data and,
    where autograd tracks x, its history: a view, as PyTorch's (in-place writes to one show in
    the other), never x itself."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"as_subclass: {cls!r} is not a subclass of Tensor")
    out = alias(input)
    out.__class__ = cls
    return out


def _is_dtype(x: Any) -> bool:
    """A NumPy dtype or scalar type, or what stands for one (`torch.int32`: its `.dtype`)."""
    if isinstance(x, np.dtype) or isinstance(x, type) and issubclass(x, np.generic):
        return True
    return isinstance(getattr(x, "dtype", None), np.dtype) and not hasattr(x, "shape")


@sequence_keyword("dims")
def permute(input: Any, *dims: Any) -> Tensor:
    """The axes reordered: result axis i is input axis dims[i]. A view."""
    x = as_tensor(input)
    ndim = x._value.ndim
    axes = tuple([int(a) % builtins.max(ndim, 1) for a in shape_arg(dims)])
    if sorted(axes) != list(range(ndim)):
        raise ShapeError(f"permute: {tuple(shape_arg(dims))} is not a permutation of the "
                         f"{ndim} dimensions of {x.shape}")  # fmt: skip
    if axes == tuple(range(ndim)):
        return x
    back = shapes.inverse_permutation(axes)
    out = viewing(x, P.transpose(x, axes=axes), lambda v: P.transpose(v, axes=back))
    out._permuted = True  # not contiguous: `contiguous()` copies it
    return out


@pytorch_keywords
def transpose(input: Any, dim0: int, dim1: int) -> Tensor:
    """`input` with dimensions dim0 and dim1 swapped (PyTorch's; NumPy's transpose(a, axes) is
    `permute`)."""
    x = as_tensor(input)
    ndim = x._value.ndim
    axes = list(range(ndim))
    a, b = one_dim("transpose", dim0, ndim), one_dim("transpose", dim1, ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return permute(x, axes)


swapaxes = swapdims = transpose


def t(input: Any) -> Tensor:
    """The transpose of a matrix (a 0-D or 1-D tensor as it is)."""
    x = as_tensor(input)
    ndim = x._value.ndim
    if ndim > 2:
        raise ShapeError(f"t: expects a tensor of at most 2 dimensions, got {x.shape}")
    return x if ndim < 2 else permute(x, (1, 0))


def reversed_axes(input: Any) -> Tensor:
    """All axes reversed (`x.T`): a new tensor, also of a vector, as PyTorch's."""
    x = as_tensor(input)
    out = permute(x, tuple(reversed(range(x.ndim))))
    return alias(out) if out is x else out


def matrix_transpose(input: Any) -> Tensor:
    """The last two axes swapped (`x.mT`); a 0-d tensor itself, as PyTorch's."""
    x = as_tensor(input)
    return x if x.ndim == 0 else transpose(x, -1, -2)


def moveaxis(input: Any, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """The axes `source` moved to positions `destination`, the others in their order."""
    x = as_tensor(input)
    src = [int(s) % x.ndim for s in np.atleast_1d(source).tolist()]
    dst = [int(d) % x.ndim for d in np.atleast_1d(destination).tolist()]
    order = [n for n in range(x.ndim) if n not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return permute(x, order)


movedim = moveaxis


def broadcast_to(input: Any, shape: Sequence[int] | int) -> Tensor:
    """x at `shape` (an int is a 1-d shape; -1 keeps an extent, as PyTorch's)."""
    x = as_tensor(input)
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if -1 in shape:
        lead = len(shape) - x.ndim
        shape = tuple(x.shape[i - lead] if n == -1 else n for i, n in enumerate(shape))
    return x if shape == x.shape else P.broadcast_to(x, shape=shape)


@sequence_keyword("size")
def expand(input: Any, *sizes: Any) -> Tensor:
    """broadcast_to, with -1 keeping an extent."""
    x, sizes = as_tensor(input), shape_arg(sizes)
    lead = len(sizes) - x.ndim
    return broadcast_to(x, tuple(x.shape[i - lead] if d == -1 else d for i, d in enumerate(sizes)))


@pytorch_keywords
def squeeze(input: Any, dim: int | Sequence[int] | None = None) -> Tensor:
    """The size-1 dimensions removed (of `dim` only, if given; one of another size stays, as in
    PyTorch)."""
    x = as_tensor(input)
    shape = x._value.shape
    axes = dim_tuple("squeeze", dim, len(shape))
    out = reshape(x, tuple([d for i, d in enumerate(shape) if i not in axes or d != 1]))
    return viewing(x, out, lambda v: reshape(v, shape))


@pytorch_keywords
def unsqueeze(input: Any, dim: int) -> Tensor:
    """A size-1 dimension inserted at `dim`."""
    x = as_tensor(input)
    shape = x._value.shape
    axis = one_dim("unsqueeze", dim, len(shape) + 1)
    return viewing(x, P.reshape(x, shape=(*shape[:axis], 1, *shape[axis:])),
                   lambda v: reshape(v, shape))  # fmt: skip


def flatten(input: Any, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dimensions start_dim..end_dim merged into one."""
    x = as_tensor(input)
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = start_dim % x.ndim, end_dim % x.ndim
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for a "
                         f"tensor of shape {x.shape}")  # fmt: skip
    merged = math.prod(x.shape[start : end + 1])  # not -1: of no elements, that is any extent
    return reshape(x, x.shape[:start] + (merged,) + x.shape[end + 1 :])


@pytorch_keywords
def unflatten(input: Any, dim: int, sizes: Sequence[int]) -> Tensor:
    """Dimension `dim` split into `sizes` (one of them may be -1)."""
    x = as_tensor(input)
    axis = one_dim("unflatten", dim, x.ndim)
    out = reshape(x, x.shape[:axis] + tuple(sizes) + x.shape[axis + 1 :])
    return viewing(x, out, lambda v: reshape(v, x.shape))


def ravel(input: Any) -> Tensor:
    return reshape(input, (-1,))


def astype(input: Any, dtype: Any) -> Tensor:
    x = as_tensor(input)
    return x if np.dtype(dtype) == x._value.dtype else P.astype(x, dtype=np.dtype(dtype))


# --- indexing ----------------------------------------------------------------------------------


# the types of a basic index's items (ints, slices, None, ...): a view, and no position twice
BASIC_INDEX_TYPES = frozenset({int, slice, type(None), type(Ellipsis)})


def getitem(input: Any, index: Any) -> Tensor:
    """Indexing with ints, slices, None, ..., integer arrays (several) and boolean masks. Basic
    indexing (no arrays) gives a view, as NumPy's and PyTorch's: a write into it writes the
    indexed tensor too (`mutation.write_back`)."""
    x = as_tensor(input)
    for item in index if index.__class__ is tuple else (index,):
        if item.__class__ not in BASIC_INDEX_TYPES:
            break
    else:  # ints, slices, None and ...: the template as it is (the common index, first)
        template = index if index.__class__ is tuple else (index,)
        return viewing(x, P.getitem(x, template=template), index)
    x, index = bool_scalars(x, index)
    template, arrays = index_parts(index)
    out = P.getitem(x, *arrays, template=template)
    return out if arrays else viewing(x, out, index)


def mask_value(mask: Tensor) -> np.ndarray:
    """A concrete boolean mask's value. While tracing, a mask from before the trace (a module's
    buffer, a tensor the function closes over) is baked into the plan as the positions it
    selects: the plan holds only while the mask keeps that value (a guard; a new value traces
    again)."""
    value = mask.numpy()
    tracers = Listeners.tracers
    if tracers and mask._serial <= tracers[-1].start:
        baked = value.copy()
        tracers[-1].checks.append(lambda: np.array_equal(mask._value, baked))
    return value


def pytorch_index(index: Any) -> Any:
    """PyTorch's reading of an index for `t[index]` and `t[index] = v`: a uint8 tensor is a
    boolean mask (deprecated, with PyTorch's warning); NumPy's (`tracegrad.numpy.take`) reads
    it as integers. A list holding a sequence, a tensor, a slice, None or ... is the items of a
    tuple (`x[[[0, 1], [2, 3]]]` is `x[[0, 1], [2, 3]]`), as PyTorch still reads it, with its
    deprecation warning."""
    if isinstance(index, list) and _sequence_as_tuple(index):
        warn_user(
            "Using a non-tuple sequence for multidimensional indexing is deprecated and will be "
            "changed in pytorch 2.9; use x[tuple(seq)] instead of x[seq]."
        )
        index = tuple(index)
    if isinstance(index, list) and not index:  # no positions: an empty integer index
        index = np.zeros(0, np.int64)
    items = index if isinstance(index, tuple) else (index,)
    if not any(isinstance(i, Tensor | np.ndarray) and i.dtype == np.uint8 for i in items):
        return index
    warn_user("indexing with dtype torch.uint8 is now deprecated, please use a dtype "
              "torch.bool instead.")  # fmt: skip
    items = tuple(astype(i, np.bool_) if isinstance(i, Tensor | np.ndarray) and i.dtype == np.uint8
                  else i for i in items)  # fmt: skip
    return items if isinstance(index, tuple) else items[0]


def _sequence_as_tuple(index: list) -> bool:
    """PyTorch's (NumPy's former) rule for a list index: under 32 items, one of them a sequence,
    a tensor, a slice, None or Ellipsis."""
    return len(index) < 32 and any(
        isinstance(i, list | tuple | slice | Tensor | np.ndarray) or i is None or i is Ellipsis
        for i in index
    )


def tensor_getitem(self: Tensor, index: Any) -> Tensor:
    """`t[index]`, by PyTorch's reading of the index (`pytorch_index`)."""
    return getitem(self, pytorch_index(index))


def bool_value(item: Any) -> bool | None:
    """A bool scalar index's value (a Python or NumPy bool, a concrete 0-d mask), else None."""
    if isinstance(item, bool | np.bool_):
        return bool(item)
    if isinstance(item, Tensor | np.ndarray) and item.dtype == np.bool_ and item.ndim == 0:
        mask = as_tensor(item)
        return None if mask.is_symbolic else bool(mask_value(mask))
    return None


def bool_scalars(x: Tensor, index: Any) -> tuple[Tensor, Any]:
    """NumPy's and PyTorch's bool scalar in an index: a new axis of size 1 (True, which
    `index_parts` reads as None) or 0 (False: a new input axis, indexed by no positions)."""
    items = list(index) if isinstance(index, tuple) else [index]
    k = next((k for k, i in enumerate(items) if bool_value(i) is False), None)
    if k is None:
        return x, index
    used = [0 if i is None or i is Ellipsis or bool_value(i) is not None else
            as_tensor(i).ndim if isinstance(i, Tensor | np.ndarray) and i.dtype == np.bool_
            else 1 for i in items]  # fmt: skip
    before = sum(used[:k]) if Ellipsis not in items[:k] else x.ndim - sum(used[k + 1 :])
    items[k] = Tensor._of(np.zeros(0, np.int64))
    return bool_scalars(unsqueeze(x, before), tuple(items))


def index_parts(index: Any) -> tuple[tuple, list[Tensor]]:
    """An index as the getitem op takes it: a template of ints, slices, None, ... and "@" for
    each index array, and the integer index arrays (a boolean mask gives one per dimension)."""
    template, arrays = [], []
    for item in index if isinstance(index, tuple) else (index,):
        if isinstance(item, range):  # x[range(n), y]: an index array, as NumPy and PyTorch take it
            item = np.arange(item.start, item.stop, item.step)
        if bool_value(item):  # True: a new axis of size 1 (False: `bool_scalars`)
            item = None
        if isinstance(item, Tensor | np.ndarray | list):
            item = as_tensor(item)
            if item.dtype == np.bool_:
                if item.is_symbolic:
                    raise TraceError(
                        "indexing with a traced boolean mask gives a data-dependent shape; use "
                        "tracegrad.where(mask, x, 0) instead"
                    )
                parts = [Tensor._of(a) for a in np.nonzero(mask_value(item))]
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
    return tuple(template), arrays


def at(x: Tensor, dim: int, index: Any) -> Tensor:
    """x[..., index, ...] with `index` (an int, slice or index array) at axis `dim`."""
    return getitem(x, (slice(None),) * dim + (index,))


@pytorch_keywords
def select(input: Any, dim: int, index: int) -> Tensor:
    """The slice at `index` along `dim`, which goes away (PyTorch's; NumPy's select is
    `tracegrad.numpy.select`)."""
    x = as_tensor(input)
    return at(x, one_dim("select", dim, x.ndim), int(index))


@pytorch_keywords
def narrow(input: Any, dim: int, start: int, length: int) -> Tensor:
    x = as_tensor(input)
    d = one_dim("narrow", dim, x.ndim)
    start = int(start) % x.shape[d] if start < 0 else int(start)
    return at(x, d, slice(start, start + int(length)))


@pytorch_keywords
def index_select(input: Any, dim: int, index: Any) -> Tensor:
    """The slices at `index` (1-d, or 0-d: the dim keeps size 1, as PyTorch's) along `dim`."""
    x = as_tensor(input)
    return at(x, one_dim("index_select", dim, x.ndim), reshape(as_tensor(index), (-1,)))


@pytorch_keywords
def take_along_dim(input: Any, indices: Any, dim: int | None = None) -> Tensor:
    """input[..., indices, ...] with `indices` broadcast against input's other axes (None: both
    flattened). The gradient goes back to the positions taken."""
    x, idx = as_tensor(input), as_tensor(indices)
    if dim is None:
        return getitem(ravel(x), ravel(idx))
    return take_along(x, idx, one_dim("take_along_dim", dim, x.ndim), x.shape)


@pytorch_keywords
def gather(input: Any, dim: int, index: Any) -> Tensor:
    """out[i][j] = input[index[i][j]][j] (dim=0): the result has index's shape."""
    x, idx = as_tensor(input), as_tensor(index)
    if idx.ndim != x.ndim:
        raise ShapeError(f"gather: index {idx.shape} and input {x.shape} differ in dimensions")
    return take_along(x, idx, one_dim("gather", dim, x.ndim), idx.shape)


def take_along(x: Tensor, idx: Tensor, dim: int, extents: tuple[int, ...]) -> Tensor:
    grids = []
    for d in range(x.ndim):
        if d == dim:
            grids.append(idx)
        else:
            shape = [1] * x.ndim
            shape[d] = extents[d]
            grids.append(np.arange(extents[d]).reshape(shape))
    return getitem(x, tuple(grids))


# --- joining and products -----------------------------------------------------------------------


@pytorch_keywords
def cat(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """The tensors joined along an existing dimension. PyTorch's legacy empty tensor (shape
    (0,), `torch.tensor([])`, an accumulator's start) is skipped beside others; its dtype
    still counts in the result's."""
    xs = [as_tensor(x) for x in tensors]
    if not xs:
        raise ShapeError("cat: needs at least one tensor")
    kept = [x for x in xs if x._value.shape != (0,)] or xs
    out = P.concatenate(*kept, axis=one_dim("cat", dim, kept[0].ndim))
    return out if len(kept) == len(xs) else astype(out, result_type(*xs))


concatenate = concat = cat


@pytorch_keywords
def stack(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Tensors stacked along a new dimension; nested lists stack recursively."""
    xs = [stack(x) if isinstance(x, list | tuple) else as_tensor(x) for x in tensors]
    if not xs:
        raise ShapeError("stack: needs at least one tensor")
    if len({x._value.shape for x in xs}) > 1:
        raise ShapeError("stack: shapes " + ", ".join(str(x.shape) for x in xs) + " differ")
    axis = one_dim("stack", dim, xs[0].ndim + 1)
    return cat([unsqueeze(x, axis) for x in xs], axis)


def same_dtypes(op: str, *xs: Tensor) -> None:
    """PyTorch's products take operands of one dtype: a float64 batch into a float32 model
    raises rather than silently running the whole step in float64."""
    dtypes = [x._value.dtype for x in xs if x is not None]
    if dtypes.count(dtypes[0]) != len(dtypes):  # (no generator: every product asks)
        names = ", ".join(d.name for d in dtypes)
        raise ShapeError(
            f"{op}: operands of dtypes {names}; a product does not promote (as in PyTorch): "
            "cast the input (x.float()) or the model (model.double())"
        )


@pytorch_keywords
def matmul(input: Any, other: Any) -> Tensor:
    """The matrix product: 2-D, batched (broadcast) and 1-D operands, of one dtype (PyTorch's
    rule; `promoting_matmul` is NumPy's). A sparse operand multiplies by its entries
    (`frontend.sparse`)."""
    if _is_sparse(input):
        return input.matmul(other)
    if _is_sparse(other):
        return other.__rmatmul__(input)
    a, b = as_tensor(input), as_tensor(other)
    same_dtypes("matmul", a, b)
    return promoting_matmul(a, b)


def _is_sparse(x: Any) -> bool:
    """A sparse tensor (`frontend.sparse.SparseCOO`, which is not a Tensor)."""
    return not isinstance(x, Tensor) and getattr(x, "is_sparse", False) is True


def promoting_matmul(input: Any, other: Any) -> Tensor:
    """The matrix product with NumPy's promotion of mixed dtypes (`tracegrad.numpy.matmul`)."""
    a, b = as_tensor(input), as_tensor(other)
    sa, sb = a._value.shape, b._value.shape
    if len(sa) == 2 == len(sb) and sa[1] == sb[0]:  # two matrices: the op itself, first
        return P.matmul(a, b)
    if a.ndim == 0 or b.ndim == 0 or a._value.shape[-1] != b._value.shape[-2 if b.ndim > 1 else 0]:
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


@pytorch_keywords
def clamp(input: Any, min: Any = None, max: Any = None) -> Tensor:
    """Each element limited to [min, max] (either bound may be None)."""
    x = as_tensor(input)
    x = x if min is None else P.maximum(x, min)
    return x if max is None else P.minimum(x, max)


clip = clamp


def check_range(x: Any, lo: int, hi: int, what: str, allow: int | None = None) -> Tensor:
    """`x`, after checking that lo <= x < hi everywhere (or x == allow: an ignored label); else
    ValueError naming `what`, the bounds, an offending value and the caller's line. Traced,
    the check runs in the plan. Eagerly, labels in range (every step's) cost two reductions:
    the caller's line is looked up only to name it."""
    x = as_tensor(x)
    a = x._value
    if not Listeners.tracers and a.__class__ is np.ndarray and a.dtype.kind in "iu" and a.size:
        if np.minimum.reduce(a, axis=None) >= lo and np.maximum.reduce(a, axis=None) < hi:
            return x
    return P.check_range(x, lo=lo, hi=hi, allow=allow, what=what, where=user_location())


def _fresh(f: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`f` as users call it (a method, the top level): a view that changes nothing is a new
    tensor all the same, as PyTorch's (`alias`). Inside the library `f` may give `x` itself."""

    @functools.wraps(f)
    def fresh(input: Any, *args: Any, **kwargs: Any) -> Tensor:
        out = f(input, *args, **kwargs)
        return alias(out) if out is input else out

    return fresh


PUBLIC_VIEWS = {name: _fresh(globals()[name]) for name in (
    "reshape", "view", "permute", "broadcast_to", "expand", "squeeze", "transpose", "swapaxes",
    "swapdims", "moveaxis", "movedim", "narrow", "t", "unflatten")}  # fmt: skip

__all__ = [
    "broadcast_to", "cat", "clamp", "clip", "concat", "concatenate", "expand", "flatten",
    "gather", "index_select", "matmul", "moveaxis", "movedim", "narrow", "permute", "ravel",
    "reshape", "select", "squeeze", "stack", "swapaxes", "swapdims", "t", "take_along_dim",
    "transpose", "unflatten", "unsqueeze",
]  # fmt: skip

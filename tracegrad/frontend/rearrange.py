"""Rearranging with PyTorch's meanings: `split` by chunk size (or a list of sizes), `chunk`,
`unbind`; `flip(dims)`, `roll`, `rot90`; `tile` and `repeat_interleave` (NumPy's `repeat`);
diagonals and triangles; `where(cond)` and `nonzero`; stacking helpers. Each is slicing, index
arrays or a transpose of the op table's primitives, so none needs a VJP of its own."""

from __future__ import annotations

import builtins
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError, TraceError
from tracegrad.frontend.functions import (
    at,
    broadcast_to,
    cat,
    dim_tuple,
    getitem,
    index_select,
    mask_value,
    moveaxis,
    one_dim,
    pytorch_keywords,
    ravel,
    reshape,
    sequence_keyword,
    shape_arg,
    transpose,
    viewing,
)
from tracegrad.frontend.mutation import index_put
from tracegrad.frontend.promotion import is_number, promote_types, result_type
from tracegrad.frontend.reductions import sum
from tracegrad.frontend.tensor import Tensor, as_tensor

# --- splitting ---------------------------------------------------------------------------------


def _pieces(x: Tensor, d: int, sizes: Sequence[int]) -> tuple[Tensor, ...]:
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    return tuple(at(x, d, slice(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))


@pytorch_keywords(aliases=False)
def split(
    tensor: Any, split_size_or_sections: int | Sequence[int], dim: int = 0
) -> tuple[Tensor, ...]:
    """Chunks of `split_size` along `dim` (the last one smaller if it does not divide), or
    pieces of the listed sizes (PyTorch's; NumPy's split into n sections is `tensor_split`, or
    `tracegrad.numpy.split`)."""
    x = as_tensor(tensor)
    d = one_dim("split", dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, int | np.integer):
        size = int(split_size_or_sections)
        if size <= 0:
            raise ValueError(f"split: split_size must be positive, got {size}")
        sizes = [size] * (n // size) + ([n % size] if n % size or n == 0 else [])
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if builtins.sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} sum to {builtins.sum(sizes)}, but dimension "
                             f"{d} of {x.shape} has {n}")  # fmt: skip
    return _pieces(x, d, sizes)


@pytorch_keywords
def split_with_sizes(input: Any, split_sizes: Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of the listed sizes along `dim` (`split` with a list)."""
    return split(input, list(split_sizes), dim)


@pytorch_keywords
def chunk(input: Any, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """At most `chunks` pieces of ceil(n / chunks) along `dim` (so possibly fewer pieces)."""
    x = as_tensor(input)
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    n = x.shape[one_dim("chunk", dim, x.ndim)]
    return split(x, builtins.max(-(-n // chunks), 1), dim)


@pytorch_keywords
def tensor_split(input: Any, indices_or_sections: Any = None, dim: int = 0, *,
                 indices: Any = None, sections: Any = None,
                 tensor_indices_or_sections: Any = None) -> tuple[Tensor, ...]:  # fmt: skip
    """n nearly equal pieces (the first n % size one larger), or pieces between the listed
    indices, negative ones counted from the end as in slicing: NumPy's array_split. PyTorch's
    keywords name the argument by its kind (`indices=`, `sections=`)."""
    given = [a for a in (indices_or_sections, indices, sections, tensor_indices_or_sections)
             if a is not None]  # fmt: skip
    if len(given) != 1:
        raise TypeError("tensor_split: give one of indices_or_sections, indices, sections")
    indices_or_sections = given[0]
    if isinstance(indices_or_sections, Tensor):  # a 0-d count, or 1-d indices
        indices_or_sections = indices_or_sections.tolist()
    x = as_tensor(input)
    d = one_dim("tensor_split", dim, x.ndim)
    n = x.shape[d]
    if isinstance(indices_or_sections, int | np.integer):
        parts, extra = divmod(n, int(indices_or_sections))
        return _pieces(x, d, [parts + 1] * extra + [parts] * (int(indices_or_sections) - extra))
    at_ = [int(i) + n if int(i) < 0 else int(i) for i in indices_or_sections]
    bounds = [0, *(builtins.min(builtins.max(i, 0), n) for i in at_), n]
    return tuple(at(x, d, slice(lo, builtins.max(lo, hi)))
                 for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))  # fmt: skip


def _sections(op: str, x: Tensor, indices_or_sections: Any, d: int) -> tuple[Tensor, ...]:
    if isinstance(indices_or_sections, int | np.integer) and x.shape[d] % indices_or_sections:
        raise ShapeError(f"{op}: dimension {d} of {x.shape} does not split into "
                         f"{indices_or_sections} equal parts")  # fmt: skip
    return tensor_split(x, indices_or_sections, d)


def hsplit(input: Any, indices_or_sections: Any) -> tuple[Tensor, ...]:
    x = as_tensor(input)
    return _sections("hsplit", x, indices_or_sections, 1 if x.ndim > 1 else 0)


def vsplit(input: Any, indices_or_sections: Any) -> tuple[Tensor, ...]:
    return _sections("vsplit", as_tensor(input), indices_or_sections, 0)


def dsplit(input: Any, indices_or_sections: Any) -> tuple[Tensor, ...]:
    return _sections("dsplit", as_tensor(input), indices_or_sections, 2)


@pytorch_keywords
def unbind(input: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along `dim`, which goes away."""
    x = as_tensor(input)
    d = one_dim("unbind", dim, x.ndim)
    return tuple(at(x, d, i) for i in range(x.shape[d]))


# --- flips, rolls, repeats ---------------------------------------------------------------------


@pytorch_keywords
def flip(input: Any, dims: int | Sequence[int]) -> Tensor:
    """The order of elements reversed along each of `dims` (required, as in PyTorch)."""
    x = as_tensor(input)
    index = [slice(None)] * x.ndim
    for d in dim_tuple("flip", dims, x.ndim):
        index[d] = slice(None, None, -1)
    return P.positive(getitem(x, tuple(index)))  # a copy, as PyTorch's: not a reversed view


def fliplr(input: Any) -> Tensor:
    return flip(input, 1)


def flipud(input: Any) -> Tensor:
    return flip(input, 0)


@pytorch_keywords
def roll(
    input: Any, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None
) -> Tensor:
    """Elements shifted along `dims` (of the flattened tensor if None), wrapping around."""
    x = as_tensor(input)
    if dims is None:
        return reshape(roll(ravel(x), shifts, 0), x.shape)
    for s, d in zip(*np.broadcast_arrays(np.atleast_1d(shifts), np.atleast_1d(dims)), strict=True):
        d = one_dim("roll", int(d), x.ndim)
        x = at(x, d, np.roll(np.arange(x.shape[d]), int(s)))
    return x


@pytorch_keywords
def rot90(input: Any, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """k quarter turns from the first of `dims` towards the second."""
    x = as_tensor(input)
    a, b = dims
    k %= 4
    if k == 0:
        return P.positive(x)  # a copy, as PyTorch's
    if k == 2:
        return flip(x, (a, b))
    if k == 1:
        return transpose(flip(x, b), a, b)
    return flip(transpose(x, a, b), b)


@pytorch_keywords
def tile(input: Any, dims: int | Sequence[int]) -> Tensor:
    """`input` repeated as a whole `dims[i]` times along each dimension (NumPy's tile)."""
    x = as_tensor(input)
    reps = (dims,) if isinstance(dims, int) else tuple(dims)
    n = builtins.max(x.ndim, len(reps))
    reps = (1,) * (n - len(reps)) + reps
    x = reshape(x, (1,) * (n - x.ndim) + x.shape)
    spread = broadcast_to(
        reshape(x, tuple(v for d in x.shape for v in (1, d))),
        tuple(v for r, d in zip(reps, x.shape, strict=True) for v in (r, d)),
    )
    out = reshape(spread, tuple(r * d for r, d in zip(reps, x.shape, strict=True)))
    return P.positive(out) if builtins.all(r == 1 for r in reps) else out  # never a view


@sequence_keyword("repeats")
def repeat(input: Any, *sizes: Any) -> Tensor:
    """PyTorch's `x.repeat(2, 1)`: tiled, with at least as many sizes as dimensions (NumPy's
    element-wise repeat is `repeat_interleave`, or `tracegrad.numpy.repeat`)."""
    x, sizes = as_tensor(input), shape_arg(sizes)
    if len(sizes) < x.ndim:
        raise ShapeError(f"repeat: {len(sizes)} sizes for a tensor of {x.ndim} dimensions "
                         f"{x.shape}; NumPy's element-wise repeat is x.repeat_interleave(n, "
                         "dim)")  # fmt: skip
    return tile(x, sizes)


@pytorch_keywords
def repeat_interleave(input: Any, repeats: Any = None, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:  # fmt: skip
    """Each element repeated `repeats` times (an int, or one count per element) along `dim`, of
    the flattened tensor if None: NumPy's repeat. `repeat_interleave(counts)` alone repeats
    each position i counts[i] times, as PyTorch's."""
    if repeats is None:
        input, repeats = Tensor._of(np.arange(len(as_tensor(input)))), input
    x = as_tensor(input)
    if dim is None:
        x, dim = ravel(x), 0
    d = one_dim("repeat_interleave", dim, x.ndim)
    if isinstance(repeats, Tensor):
        if repeats.is_symbolic:
            raise TraceError("repeat_interleave: traced counts give a data-dependent shape")
        repeats = repeats.numpy()
    return at(x, d, np.repeat(np.arange(x.shape[d]), repeats))


# --- diagonals and triangles -------------------------------------------------------------------


@pytorch_keywords
def diagonal(input: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes, as a last dimension."""
    return _diagonal(input, offset, dim1, dim2)


def _diagonal(input: Any, offset: int, dim1: int, dim2: int) -> Tensor:
    x = moveaxis(as_tensor(input), (dim1, dim2), (-2, -1))
    rows, cols = x.shape[-2:]
    if offset >= 0:
        n = builtins.max(0, builtins.min(rows, cols - offset))
    else:
        n = builtins.max(0, builtins.min(rows + offset, cols))
    i = np.arange(n) + (0 if offset >= 0 else -offset)
    index = (Ellipsis, i, i + offset)
    return viewing(x, getitem(x, index), index)  # a view, as PyTorch's (`diagonal().zero_()`)


@pytorch_keywords
def diagflat(input: Any, offset: int = 0) -> Tensor:
    """The elements, flattened, on diagonal `offset` of a square matrix."""
    return diag(ravel(as_tensor(input)), offset)


@pytorch_keywords
def diag(input: Any, diagonal: int = 0) -> Tensor:
    """A 1-D input becomes a matrix with it on diagonal k; a 2-D one gives its diagonal k."""
    x = as_tensor(input)
    if x.ndim == 2:
        return P.positive(_diagonal(x, diagonal, 0, 1))  # a copy (`diagonal` is the view)
    if x.ndim != 1:
        raise ShapeError(f"diag: input must be 1-D or 2-D, got {x.shape}")
    n = x.shape[0] + abs(diagonal)
    i = np.arange(x.shape[0])
    rows, cols = (i, i + diagonal) if diagonal >= 0 else (i - diagonal, i)
    return P.scatter_add(x, rows, cols, shape=(n, n), template=("@", "@"))


def matrix_trace(input: Any) -> Tensor:
    """The sum of a matrix's diagonal (`x.trace()`; `tracegrad.trace` is the compiler)."""
    x = as_tensor(input)
    if x.ndim != 2:
        raise ShapeError(f"trace: expects a matrix, got {x.shape} (tracegrad.numpy.trace takes "
                         "axes)")  # fmt: skip
    return sum(diagonal(x), -1)


@pytorch_keywords
def triu(input: Any, diagonal: int = 0) -> Tensor:
    """The upper triangle, in the input's dtype (a bool mask stays bool)."""
    x = as_tensor(input)
    return P.where(np.triu(np.ones(x.shape[-2:], bool), diagonal), x, np.zeros((), x.dtype))


@pytorch_keywords
def tril(input: Any, diagonal: int = 0) -> Tensor:
    """The lower triangle, in the input's dtype."""
    x = as_tensor(input)
    return P.where(np.tril(np.ones(x.shape[-2:], bool), diagonal), x, np.zeros((), x.dtype))


@pytorch_keywords
def diag_embed(input: Any, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """input's last dimension laid on diagonal `offset` of new (dim1, dim2) planes of the
    result, zeros elsewhere (the inverse of `diagonal`): a product with the identity, padded to
    the offset."""
    x = as_tensor(input)
    m = x.shape[-1] if x.ndim else 1
    x = reshape(x, (1,)) if x.ndim == 0 else x
    square = reshape(x, x.shape[:-1] + (1, m)) * np.eye(m, dtype=np.bool_)
    k = builtins.abs(int(offset))
    widths = ((0, 0),) * (x.ndim - 1) + (((0, k), (k, 0)) if offset >= 0 else ((k, 0), (0, k)))
    out = P.pad(square, pad_width=widths, value=0) if k else square
    n = out.ndim
    a, b = one_dim("diag_embed", dim1, n), one_dim("diag_embed", dim2, n)
    if a == b:
        raise ShapeError(f"diag_embed: dim1 and dim2 are both {a}")
    return moveaxis(out, (n - 2, n - 1), (a, b))


def vander(x: Any, N: int | None = None, increasing: bool = False) -> Tensor:
    """The Vandermonde matrix of a 1-D x: columns x^(N-1), ..., x, 1 (x^0 first if
    increasing), N = len(x) by default; powers with constant exponents, so 0^0 = 1 and its
    gradient 0."""
    v = as_tensor(x)
    if v.ndim != 1:
        raise ShapeError(f"vander: x must be 1-D, got {v.shape}")
    n = v.shape[0] if N is None else int(N)
    powers = np.arange(n) if increasing else np.arange(n)[::-1].copy()
    return reshape(v, (-1, 1)) ** powers.astype(v.dtype if v.dtype.kind == "f" else np.int64)


def block_diag(*tensors: Any) -> Tensor:
    """The tensors (0-D, 1-D as a row, or 2-D) as blocks on the diagonal of one matrix, zeros
    elsewhere, of their promoted dtype."""
    xs = [as_tensor(t) for t in tensors]
    if builtins.any(x.ndim > 2 for x in xs):
        raise ShapeError("block_diag: the tensors must have at most 2 dimensions, got "
                         + ", ".join(str(x.shape) for x in xs))  # fmt: skip
    xs = [reshape(x, (1, x.size) if x.ndim < 2 else x.shape) for x in xs]
    if not xs:
        return Tensor._of(np.zeros((1, 0), np.float32))  # PyTorch's
    dtype = functools.reduce(promote_types, (x.dtype for x in xs))
    cols = builtins.sum(x.shape[1] for x in xs)
    rows, start = [], 0
    for x in xs:
        x = x if x.dtype == dtype else x.astype(dtype)
        width = ((0, 0), (start, cols - start - x.shape[1]))
        rows.append(P.pad(x, pad_width=width, value=0) if cols != x.shape[1] else x)
        start += x.shape[1]
    return cat(rows, 0)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D (or 0-D) tensors: each broadcast along the others' dimensions,
    "ij" (matrix) indexing by default, "xy" (Cartesian) swapping the first two; views, so the
    gradient sums back. `meshgrid(a, b)` and `meshgrid([a, b])` both work."""
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', not {indexing!r}")
    xs = [ravel(as_tensor(t)) for t in tensors]
    if builtins.any(as_tensor(t).ndim > 1 for t in tensors):
        raise ShapeError("meshgrid: expects 0-D or 1-D tensors")
    swap = indexing == "xy" and len(xs) > 1
    order = [1, 0, *range(2, len(xs))] if swap else list(range(len(xs)))
    shape = tuple(xs[i].shape[0] for i in order)
    grids = []
    for i, x in enumerate(xs):
        at_dim = order.index(i)
        spread = [1] * len(xs)
        spread[at_dim] = x.shape[0]
        grids.append(broadcast_to(reshape(x, tuple(spread)), shape))
    return tuple(grids)


def cartesian_prod(*tensors: Any) -> Tensor:
    """Every combination of the 1-D tensors' elements, as rows (itertools.product's order); one
    tensor is returned as it is."""
    if len(tensors) == 1:
        return as_tensor(tensors[0])
    grids = meshgrid(*tensors, indexing="ij")
    return cat([reshape(g, (-1, 1)) for g in grids], 1)


# --- selection ---------------------------------------------------------------------------------


@pytorch_keywords
def where(condition: Any, input: Any = None, other: Any = None) -> Any:
    """`input` where `condition` holds, else `other`; where(condition) alone is
    nonzero(condition, as_tuple=True). Two Python numbers take their own result type
    (`where(c, 1.0, 0.0)` is of the default float dtype), as PyTorch's."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if is_number(input) and is_number(other):
        dtype = result_type(input, other)
        input, other = Tensor._of(input, dtype), Tensor._of(other, dtype)
    return P.where(condition, input, other)


@pytorch_keywords
def nonzero(input: Any, *, as_tuple: bool = False) -> Any:
    """The indices of the nonzero elements: an (n, ndim) tensor, or one 1-D tensor per dim."""
    x = as_tensor(input)
    if x.is_symbolic:
        raise TraceError("nonzero/where(cond) give a data-dependent shape and cannot be traced; "
                         "use tracegrad.where(cond, x, y)")  # fmt: skip
    if x.ndim == 0 and not as_tuple:  # (1, 0) or (0, 0), as PyTorch's
        return Tensor._of(np.zeros((int(bool(x.numpy())), 0), np.int64))
    found = np.nonzero(np.atleast_1d(x.numpy()))
    if as_tuple:
        return tuple(Tensor._of(i) for i in found)
    return Tensor._of(np.stack(found, axis=1) if found else np.zeros((0, 0), np.int64))


def argwhere(input: Any) -> Tensor:
    """The (n, ndim) indices of the nonzero elements (`nonzero`'s; not traceable either)."""
    return nonzero(input)


@pytorch_keywords
def masked_select(input: Any, mask: Any) -> Tensor:
    """The elements of input where the (broadcast) mask holds, as a 1-D tensor; the gradient goes
    back to them. Its length depends on the mask: a traced mask is refused."""
    x, m = as_tensor(input), as_tensor(mask)
    shape = np.broadcast_shapes(x.shape, m.shape)
    if m.shape != shape and m.is_symbolic:
        m = broadcast_to(m, shape)
    elif m.shape != shape:  # a constant mask stays one (the index needs its values, guarded)
        m = Tensor._of(np.broadcast_to(mask_value(m), shape))
    return getitem(broadcast_to(x, shape), m)


# --- stacking ---------------------------------------------------------------------------------


def _atleast(x: Any, n: int) -> Tensor:
    x = as_tensor(x)
    if x.ndim >= n:
        return x
    if n == 3 and x.ndim == 2:
        return reshape(x, x.shape + (1,))
    if n == 3:
        return reshape(x, (1, x.size, 1))
    return reshape(x, (1,) * (n - x.ndim) + x.shape)


def _each(tensors: tuple, n: int) -> Any:
    """One tensor for one argument, else a tuple (also for one list of tensors)."""
    if len(tensors) == 1 and not isinstance(tensors[0], list | tuple):
        return _atleast(tensors[0], n)
    return tuple(_atleast(a, n) for a in (tensors[0] if len(tensors) == 1 else tensors))


def atleast_1d(*tensors: Any) -> Any:
    return _each(tensors, 1)


def atleast_2d(*tensors: Any) -> Any:
    return _each(tensors, 2)


def atleast_3d(*tensors: Any) -> Any:
    return _each(tensors, 3)


@pytorch_keywords
def hstack(tensors: Sequence[Any]) -> Tensor:
    xs = [_atleast(x, 1) for x in tensors]
    return cat(xs, 0 if xs[0].ndim == 1 else 1)


@pytorch_keywords
def vstack(tensors: Sequence[Any]) -> Tensor:
    return cat([_atleast(x, 2) for x in tensors], 0)


@pytorch_keywords
def dstack(tensors: Sequence[Any]) -> Tensor:
    return cat([_atleast(x, 3) for x in tensors], 2)


@pytorch_keywords
def column_stack(tensors: Sequence[Any]) -> Tensor:
    return cat([reshape(x, (-1, 1)) if as_tensor(x).ndim < 2 else x for x in tensors], 1)


def windows(input: Any, dimension: int, size: int, step: int) -> Tensor:
    """`Tensor.unfold`: every slice of `size` along `dimension`, `step` apart, the slices'
    elements in a new last dimension (sliding windows; `nn.functional.unfold` is im2col)."""
    x = as_tensor(input)
    d = one_dim("unfold", dimension, x.ndim) if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    if size > n or step <= 0:
        raise ShapeError(f"unfold: size {size} and step {step} along dimension {d} of {x.shape}")
    starts = np.arange(0, n - size + 1, step)
    idx = (starts[:, None] + np.arange(size)[None, :]).reshape(-1)
    picked = index_select(x, d, Tensor._of(idx)) if x.ndim else x.reshape(1)
    shape = (*x.shape[:d], len(starts), size, *x.shape[d + 1 :])
    return moveaxis(picked.reshape(shape), d + 1, -1)


def as_strided(input: Any, size: Sequence[int], stride: Sequence[int],
               storage_offset: int | None = None) -> Tensor:  # fmt: skip
    """PyTorch's `as_strided`, over the tensor's elements in row-major order (its `stride()`
    here): element i of the result is the element at storage_offset + sum(i_k * stride_k).
    A gather, differentiable (elements read twice sum their gradients), and a view, as
    PyTorch's: a write into it scatters back into the input (where strides overlap, the last
    write of an element wins)."""
    x = as_tensor(input)
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise ShapeError(f"as_strided: size {size} and stride {stride} differ in length")
    start = 0 if storage_offset is None else int(storage_offset) - x.storage_offset()
    flat = np.full((), start, np.int64)
    for k, (n, s) in enumerate(zip(size, stride, strict=True)):
        flat = flat + np.arange(n).reshape((n,) + (1,) * (len(size) - k - 1)) * s
    if flat.size and (flat.min() < 0 or flat.max() >= x.numel()):
        raise RuntimeError(f"as_strided: size {size}, stride {stride} and offset "
                           f"{storage_offset} reach outside the {x.numel()} elements of "
                           f"{x.shape}")  # fmt: skip
    picks = Tensor._of(np.broadcast_to(flat, size).copy())
    out = x.reshape(-1)[picks]
    flat_picks = picks.reshape(-1)
    return viewing(x, out, lambda v: index_put(x.reshape(-1), (flat_picks,),
                                               v.reshape(-1)).reshape(x.shape))  # fmt: skip


__all__ = [
    "argwhere", "as_strided", "atleast_1d", "atleast_2d", "atleast_3d", "block_diag",
    "cartesian_prod", "chunk", "column_stack", "diag", "diag_embed", "diagflat", "diagonal",
    "masked_select", "meshgrid",
    "vander", "dsplit", "dstack", "flip", "fliplr", "flipud", "hsplit", "hstack", "nonzero",
    "repeat_interleave", "roll", "rot90", "split", "split_with_sizes", "tensor_split", "tile",
    "tril", "triu", "unbind", "vsplit", "vstack", "where",
]  # fmt: skip

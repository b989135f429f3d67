"""Sparse COO tensors (PyTorch's `torch.sparse_coo` layout), as graph networks use them: an
adjacency built from its edges (`torch.sparse_coo_tensor(indices, values, size)`, the legacy
`torch.sparse.FloatTensor(...)`, `dense.to_sparse()`) and multiplied into dense features
(`torch.spmm`, `torch.sparse.mm`, `torch.mm`, `matmul`, `@`).

A `SparseCOO` holds the indices (sparse_dim x nnz, int64) and the values (nnz, *dense dims), a
tensor that autograd tracks. Its products are made of tracegrad ops, a gather of the dense
rows its entries read and an `index_add` of the products into the rows they write, so they
differentiate in the values and in the dense operand and trace into compiled steps; the
memory is the entries', not the dense matrix's. It is not a `Tensor`: the ops it has are the
ones here (`to_dense()` gives the rest)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core.errors import ShapeError
from tracegrad.frontend.functions import matrix_transpose, reshape
from tracegrad.frontend.mutation import index_add
from tracegrad.frontend.tensor import Size, Tensor, as_tensor


class layout:  # noqa: N801 (PyTorch's name)
    """PyTorch's tensor layouts, accepted where PyTorch takes one (`full_like(x, v,
    layout=torch.strided)`): a Tensor is strided (dense); a `SparseCOO` is sparse_coo."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


strided = layout("strided")
sparse_coo = layout("sparse_coo")


class SparseCOO:
    """A sparse tensor in coordinate form: entry k is `values[k]` at `indices[:, k]`;
    repeated coordinates add up (until `coalesce()` sums them)."""

    is_sparse = True
    layout_name = "sparse_coo"

    def __init__(self, indices: Tensor, values: Tensor, shape: tuple[int, ...],
                 coalesced: bool = False) -> None:  # fmt: skip
        self._index, self._data, self._shape = indices, values, tuple(int(n) for n in shape)
        self._coalesced = coalesced

    # --- what it is ---------------------------------------------------------------------------
    shape = property(lambda self: Size(self._shape))
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: len(self._shape))
    device = property(lambda self: self._data.device)
    requires_grad = property(lambda self: self._data.requires_grad)
    grad = property(lambda self: None)  # its gradient is its values' (`_values().grad`)

    layout = sparse_coo

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self._shape[dim]

    def dim(self) -> int:
        return self.ndim

    def sparse_dim(self) -> int:
        return self._index.shape[0]

    def dense_dim(self) -> int:
        return self.ndim - self.sparse_dim()

    def _nnz(self) -> int:
        return self._index.shape[1]

    def _indices(self) -> Tensor:
        return self._index

    def _values(self) -> Tensor:
        return self._data

    def indices(self) -> Tensor:
        self._require_coalesced("indices")
        return self._index

    def values(self) -> Tensor:
        self._require_coalesced("values")
        return self._data

    def _require_coalesced(self, what: str) -> None:
        if not self._coalesced:
            raise RuntimeError(f"Cannot get {what} on an uncoalesced tensor, please call "
                               ".coalesce() first")  # fmt: skip

    def is_coalesced(self) -> bool:
        return self._coalesced

    def requires_grad_(self, requires_grad: bool = True) -> SparseCOO:
        self._data.requires_grad_(requires_grad)
        return self

    def __repr__(self) -> str:
        return (f"tensor(indices={self._index!r},\n       values={self._data!r},\n       "
                f"size={self._shape}, nnz={self._nnz()}, layout=torch.sparse_coo)")  # fmt: skip

    # --- conversions --------------------------------------------------------------------------
    def _linear(self) -> Tensor:
        """Each entry's place in the sparse dimensions read as one flat index."""
        strides = np.cumprod((1, *self._shape[: self.sparse_dim()][::-1]))[:-1][::-1]
        return reshape(Tensor._of(strides.astype(np.int64).reshape(1, -1)) @ self._index, (-1,))

    def to_dense(self) -> Tensor:
        """The dense tensor (repeated coordinates added), differentiable in the values."""
        k = self.sparse_dim()
        flat_shape = (math.prod(self._shape[:k]), *self._shape[k:])
        zeros = Tensor._of(np.zeros(flat_shape, self.dtype))
        return reshape(index_add(zeros, 0, self._linear(), self._data), self._shape)

    def coalesce(self) -> SparseCOO:
        """Its coordinates sorted (row-major) and each once, the values of repeats added."""
        if self._coalesced:
            return self
        linear = np.asarray(self._linear().numpy())
        unique, slot = np.unique(linear, return_inverse=True)
        zeros = Tensor._of(np.zeros((len(unique), *self._data.shape[1:]), self.dtype))
        values = index_add(zeros, 0, Tensor._of(slot.astype(np.int64)), self._data)
        coords = np.stack(np.unravel_index(unique, self._shape[: self.sparse_dim()]))
        return SparseCOO(Tensor._of(coords.astype(np.int64).reshape(self.sparse_dim(), -1)),
                         values, self._shape, coalesced=True)  # fmt: skip

    def _with_values(self, values: Tensor) -> SparseCOO:
        """Other values at the same entries."""
        return SparseCOO(self._index, values, self._shape, self._coalesced)

    def to(self, *args: Any, **kwargs: Any) -> SparseCOO:
        return self._with_values(self._data.to(*args, **kwargs))

    def cpu(self) -> SparseCOO:
        return self

    def float(self) -> SparseCOO:
        return self._with_values(self._data.float())

    def double(self) -> SparseCOO:
        return self._with_values(self._data.double())

    def detach(self) -> SparseCOO:
        return self._with_values(self._data.detach())

    # --- arithmetic ---------------------------------------------------------------------------
    def t(self) -> SparseCOO:
        """The transpose of a sparse matrix."""
        if self.ndim != 2 or self.sparse_dim() != 2:
            raise ShapeError(f"t(): a sparse matrix (2 sparse dimensions), not {self.shape}")
        flipped = self._index[[1, 0]]
        return SparseCOO(flipped, self._data, self._shape[::-1])

    def transpose(self, dim0: int, dim1: int) -> SparseCOO:
        if sorted((dim0 % max(self.ndim, 1), dim1 % max(self.ndim, 1))) != [0, 1]:
            raise NotImplementedError("transpose of a sparse tensor: dims 0 and 1 only")
        return self.t()

    def matmul(self, other: Any) -> Tensor:
        """self (m, n, sparse) @ other (n, k) or (n,): each entry's value times the row of
        `other` it reads, added into the row it writes."""
        dense = as_tensor(other)
        if self.ndim != 2 or self.sparse_dim() != 2 or dense.ndim not in (1, 2):
            raise ShapeError(f"matmul: sparse {self.shape} @ {dense.shape}: a sparse matrix "
                             "times a dense matrix or vector")  # fmt: skip
        if dense.shape[0] != self._shape[1]:
            raise ShapeError(f"matmul: sparse {self.shape} @ {dense.shape}")
        rows, cols = self._index[0], self._index[1]
        picked = dense[cols]  # (nnz, k) or (nnz,)
        scaled = picked * (reshape(self._data, (-1, 1)) if dense.ndim == 2 else self._data)
        out = Tensor._of(np.zeros((self._shape[0], *dense.shape[1:]), scaled.dtype))
        return index_add(out, 0, rows, scaled)

    mm = __matmul__ = matmul

    def __rmatmul__(self, other: Any) -> Tensor:
        """other (k, m) @ self (m, n) = (self^T @ other^T)^T."""
        return matrix_transpose(self.t().matmul(matrix_transpose(as_tensor(other))))

    def __mul__(self, other: Any) -> SparseCOO:
        if isinstance(other, SparseCOO) or isinstance(other, Tensor) and other.ndim > 0:
            raise NotImplementedError("a sparse tensor times a tensor: to_dense() first")
        return self._with_values(self._data * other)

    __rmul__ = __mul__

    def __neg__(self) -> SparseCOO:
        return self * -1


def sparse_coo_tensor(
    indices: Any, values: Any, size: Any = None, *, dtype: Any = None, device: Any = None,
    requires_grad: bool = False, check_invariants: Any = None, is_coalesced: Any = None,
) -> SparseCOO:  # fmt: skip
    """PyTorch's `torch.sparse_coo_tensor`: `values` (nnz, *dense dims) at `indices`
    (sparse_dim, nnz); the size is the indices' largest + 1 where not given."""
    index = as_tensor(indices)
    if index.ndim != 2:
        raise ShapeError(f"sparse_coo_tensor: indices must be (sparse_dim, nnz), got {index.shape}")
    index = index.long()
    data = as_tensor(values) if dtype is None else as_tensor(values).to(dtype)
    if data.shape[:1] != index.shape[1:]:
        raise ShapeError(f"sparse_coo_tensor: {index.shape[1]} indices but values of shape "
                         f"{data.shape}")  # fmt: skip
    if size is None:
        top = np.asarray(index.numpy()).max(axis=1) + 1 if index.shape[1] else np.zeros(len(index))
        size = (*(int(n) for n in top), *data.shape[1:])
    size = tuple(int(n) for n in size)
    if len(size) != index.shape[0] + data.ndim - 1:
        raise ShapeError(f"sparse_coo_tensor: size {size} for {index.shape[0]} sparse and "
                         f"{data.ndim - 1} dense dimensions")  # fmt: skip
    if requires_grad:
        data.requires_grad_()
    return SparseCOO(index, data, size, bool(is_coalesced))


def to_sparse(x: Tensor, sparse_dim: int | None = None) -> SparseCOO:
    """`Tensor.to_sparse()`: its nonzero entries (of its first `sparse_dim` dimensions: rows
    with a nonzero entry), coalesced."""
    k = x.ndim if sparse_dim is None else int(sparse_dim)
    a = np.asarray(x.detach().numpy())
    nonzero = a.reshape(*a.shape[:k], -1).any(axis=-1) if k < a.ndim else a != 0
    coords = np.stack(np.nonzero(nonzero)).astype(np.int64).reshape(k, -1)
    return SparseCOO(Tensor._of(coords), x[tuple(Tensor._of(c) for c in coords)], x.shape,
                     coalesced=True)  # fmt: skip

"""`torch.sparse`: sparse COO tensors as graph networks use them (`tracegrad.frontend.sparse`:
an adjacency times dense features, differentiable in both): the legacy constructors
`torch.sparse.FloatTensor(indices, values, size)` and its dtypes, and `torch.sparse.mm`."""

from typing import Any

import numpy as np

from tracegrad.frontend.functions import matmul as mm
from tracegrad.frontend.sparse import SparseCOO, sparse_coo_tensor, to_sparse
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["DoubleTensor", "FloatTensor", "LongTensor", "mm", "sum"]


def _legacy(dtype: Any) -> Any:
    def construct(indices: Any, values: Any, size: Any = None) -> SparseCOO:
        return sparse_coo_tensor(indices, values, size, dtype=dtype)

    construct.__doc__ = f"PyTorch's legacy sparse constructor of {np.dtype(dtype).name} values."
    return construct


FloatTensor = _legacy(np.float32)
DoubleTensor = _legacy(np.float64)
LongTensor = _legacy(np.int64)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)


def sum(input: SparseCOO, dim: Any = None, dtype: Any = None) -> Any:  # noqa: A001 (PyTorch's)
    """The sum of a sparse tensor's entries: all of them (a 0-d tensor), or over `dim`: dense
    where every sparse dimension is summed, else sparse, as PyTorch's."""
    if dim is None:
        total = input._values().sum()
        return total if dtype is None else total.to(dtype)
    dims = {d % input.ndim for d in ((dim,) if isinstance(dim, int) else dim)}
    dense = input.to_dense().sum(dim=tuple(sorted(dims)))
    dense = dense if dtype is None else dense.to(dtype)
    kept = [d for d in range(input.sparse_dim()) if d not in dims]
    return dense if not kept else to_sparse(dense, len(kept))

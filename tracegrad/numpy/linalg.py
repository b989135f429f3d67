"""`tracegrad.numpy.linalg`: NumPy's `numpy.linalg` with its signatures (`axis=`, `keepdims=`,
`compute_uv=`), over the front end's `tracegrad.linalg` (PyTorch's spellings of the same
functions). NumPy's calls on tensors (`np.linalg.norm(t)`) dispatch here."""

from __future__ import annotations

from typing import Any

import numpy as _np

from tracegrad.frontend import functions, methods, rearrange
from tracegrad.frontend import linalg as _linalg
from tracegrad.frontend.tensor import Tensor
from tracegrad.numpy.arrays import asarray

__all__ = ["cholesky", "det", "eigh", "eigvalsh", "inv", "matrix_norm", "norm", "pinv", "qr",
           "slogdet", "solve", "svd", "vector_norm"]  # fmt: skip


def inv(a: Any) -> Tensor:
    return _linalg.inv(asarray(a))


def det(a: Any) -> Tensor:
    return _linalg.det(asarray(a))


def slogdet(a: Any) -> _linalg.SlogdetResult:
    """(sign, log|det|); the sign has no gradient."""
    return _linalg.slogdet(asarray(a))


def solve(a: Any, b: Any) -> Tensor:
    """x with a @ x = b; a 1-D b is one right-hand side (NumPy 2's rule)."""
    return _linalg.solve(asarray(a), asarray(b))


def cholesky(a: Any, *, upper: bool = False) -> Tensor:
    return _linalg.cholesky(asarray(a), upper=upper)


def eigh(a: Any, UPLO: str = "L") -> _linalg.EighResult:
    return _linalg.eigh(_triangle(asarray(a), UPLO))


def eigvalsh(a: Any, UPLO: str = "L") -> Tensor:
    return _linalg.eigvalsh(_triangle(asarray(a), UPLO))


def _triangle(a: Tensor, UPLO: str) -> Tensor:
    """The symmetric matrix NumPy's eigh reads from one triangle, so that the other triangle
    gets no gradient, as in NumPy (and HIPS autograd)."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"eigh: UPLO must be 'L' or 'U', not {UPLO!r}")
    part = rearrange.tril if UPLO == "L" else rearrange.triu
    return part(a) + functions.matrix_transpose(part(a, -1 if UPLO == "L" else 1))


def svd(
    a: Any, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False
) -> Any:
    """(U, S, Vh) (of the full SVD, U's extra columns and Vh's extra rows get no gradient), or
    the singular values with compute_uv=False."""
    a = asarray(a)
    return _linalg.svd(a, full_matrices) if compute_uv else _linalg.svdvals(a)


def qr(a: Any, mode: str = "reduced") -> Any:
    """(Q, R) ("reduced"; "complete", of a tall matrix without gradient), or R alone with
    mode="r" (NumPy's; PyTorch's "r" gives an empty Q beside it)."""
    if mode == "r":
        return _linalg.qr(asarray(a), "r").R
    return _linalg.qr(asarray(a), mode)


def pinv(a: Any, rcond: Any = None, hermitian: bool = False) -> Tensor:
    return _linalg.pinv(asarray(a), rtol=1e-15 if rcond is None else rcond)


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Vector p-norms over one axis, matrix norms ("fro", "nuc", 1, -1, 2, -2, inf, -inf) over
    two; the 2-norm of the flattened array when ord and axis are None."""
    return _linalg.norm(asarray(x), ord, axis, keepdims)


def vector_norm(x: Any, *, axis: Any = None, keepdims: bool = False, ord: float = 2) -> Tensor:
    return _linalg.vector_norm(asarray(x), ord, axis, keepdims)


def matrix_norm(x: Any, *, keepdims: bool = False, ord: Any = "fro") -> Tensor:
    return _linalg.matrix_norm(asarray(x), ord, (-2, -1), keepdims)


# np.linalg.<name>(tensor) dispatches here
methods.NUMPY_FUNCTIONS.update({getattr(_np.linalg, name): globals()[name] for name in __all__})

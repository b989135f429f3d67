"""`tracegrad.linalg`: PyTorch's `torch.linalg`, batched over leading dims. inv, det, slogdet,
solve, cholesky, eigh and pinv are records in the op table (their VJPs are the classical
matrix-calculus rules, written with tracegrad ops, so they also trace and nest); the norms are
compositions. NumPy's spellings (`axis=`, `compute_uv=`) are `tracegrad.numpy.linalg`."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend.functions import (
    matrix_transpose,
    permute,
    pytorch_keywords,
    reshape,
    squeeze,
    unsqueeze,
)
from tracegrad.frontend.products import cross3
from tracegrad.frontend.reductions import amax, amin, sum
from tracegrad.frontend.tensor import Tensor, as_tensor


def inv(A: Any) -> Tensor:
    return P.inv(as_tensor(A))


def inverse(input: Any) -> Tensor:
    """`torch.inverse`: `linalg.inv`."""
    return inv(input)


def pinverse(input: Any, rcond: float = 1e-15) -> Tensor:
    """`torch.pinverse`: `linalg.pinv`, whose singular values below 1e-15 times the largest count
    as zero (another `rcond` is refused)."""
    if rcond != 1e-15:
        raise ValueError(f"pinverse: only the default rcond=1e-15 is provided, got {rcond}")
    return pinv(input)


@pytorch_keywords
def matrix_power(A: Any, n: int) -> Tensor:
    """A @ A @ ... (n times) by repeated squaring, of (a batch of) square matrices: the identity
    for n = 0, powers of the inverse for n < 0."""
    a = as_tensor(A)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"matrix_power: expects (a batch of) square matrices, got {a.shape}")
    n = int(n)
    if n == 0:
        return Tensor._of(np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape).copy())
    if n < 0:
        a, n = inv(a), -n
    result = None
    while True:
        if n & 1:
            result = a if result is None else result @ a
        n >>= 1
        if not n:
            return result
        a = a @ a


@pytorch_keywords
def dist(input: Any, other: Any, p: float = 2) -> Tensor:
    """The p-norm of input - other (broadcast), over all elements."""
    return vector_norm(as_tensor(input) - other, p)


@pytorch_keywords
def renorm(input: Any, p: float, dim: int, maxnorm: float) -> Tensor:
    """Each slice along `dim` whose p-norm exceeds `maxnorm` scaled to norm `maxnorm` (by
    maxnorm / (norm + 1e-7), as PyTorch's); differentiable through the norm."""
    x = as_tensor(input)
    d = dim % max(x.ndim, 1)
    norm = vector_norm(x, p, tuple(i for i in range(x.ndim) if i != d), keepdim=True)
    return x * P.where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0).astype(x.dtype)


def det(A: Any) -> Tensor:
    return P.det(as_tensor(A))


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def slogdet(A: Any) -> SlogdetResult:
    """(sign, log|det|); the sign has no gradient."""
    a = as_tensor(A)
    return SlogdetResult(P.det_sign(a), P.logabsdet(a))


@pytorch_keywords
def solve(A: Any, B: Any, *, left: bool = True) -> Tensor:
    """X with A @ X = B (X @ A = B with `left=False`). With A on the left, B is a (batch of)
    vector(s) where it is 1-D or has A's shape but its last dim, as PyTorch's; else a (batch
    of) matrices."""
    a, b = as_tensor(A), as_tensor(B)
    vector = left and (b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1]))
    if not left:  # X A = B is A^T X^T = B^T
        a, b = matrix_transpose(a), matrix_transpose(b)
    if vector:
        return squeeze(P.solve(a, unsqueeze(b, -1)), -1)
    out = P.solve(a, b)
    return out if left else matrix_transpose(out)


def cholesky(A: Any, *, upper: bool = False) -> Tensor:
    lower = P.cholesky(as_tensor(A))
    return matrix_transpose(lower) if upper else lower


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


def eigh(A: Any, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices, read from the lower (or
    upper) triangle. The gradient is that of the symmetric matrix: it is symmetrized (for
    either triangle, as PyTorch's), and assumes distinct eigenvalues."""
    a = as_tensor(A)
    if UPLO == "U":  # the upper triangle is the transpose's lower one; a symmetric gradient
        a = matrix_transpose(a)  # stays itself through the transpose
    elif UPLO != "L":
        raise ValueError(f"eigh: UPLO must be 'L' or 'U', not {UPLO!r}")
    return EighResult(P.eigh_values(a), P.eigh_vectors(a))


def eigvalsh(A: Any, UPLO: str = "L") -> Tensor:
    return eigh(A, UPLO).eigenvalues


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


def svd(A: Any, full_matrices: bool = True) -> SVDResult:
    """(U, S, Vh). The full SVD of a non-square matrix (the default, as PyTorch's) is
    differentiable through its thin part: U's columns (Vh's rows) past min(m, n), a basis of a
    complement, have no gradient, as in PyTorch."""
    a = as_tensor(A)
    full = {"full": True} if full_matrices and a.shape[-1] != a.shape[-2] else {}
    return SVDResult(*(P.svd(a, part=p, **full) for p in ("u", "s", "vh")))


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


def qr(A: Any, mode: str = "reduced") -> QRResult:
    """(Q, R) with A = QR, Q's columns orthonormal and R upper triangular (LAPACK's signs, as
    NumPy's and PyTorch's): "reduced" (Q m x k, R k x n, k = min(m, n)), "complete" (Q m x m;
    of a tall matrix not differentiable, as PyTorch's: Q's last columns are any basis of a
    complement) or "r" (Q empty). Differentiable where R's first k columns are invertible."""
    a = as_tensor(A)
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete' or 'r', not {mode!r}")
    full = {"complete": True} if mode == "complete" and a.shape[-2] > a.shape[-1] else {}
    r = P.qr(a, part="r", **full)
    if mode == "r":
        return QRResult(Tensor._of(np.zeros((0,), r.dtype)), r)
    return QRResult(P.qr(a, part="q", **full), r)


class SVDTopResult(NamedTuple):
    U: Tensor
    S: Tensor
    V: Tensor


def svd_top(input: Any, some: bool = True, compute_uv: bool = True) -> SVDTopResult:
    """PyTorch's older `torch.svd`: (U, S, V), V not transposed; `some=False` is the full SVD
    (its extra columns without gradient, as `svd`); without `compute_uv`, U and V are zeros."""
    u, s, vh = svd(input, full_matrices=not some)
    if not compute_uv:
        return SVDTopResult(u * 0.0, s, vh * 0.0)
    return SVDTopResult(u, s, matrix_transpose(vh))


def multi_dot(tensors: Any) -> Tensor:
    """The product of a chain of matrices (the first may be a vector, as may the last), left to
    right."""
    xs = [as_tensor(t) for t in tensors]
    if len(xs) < 2:
        raise ValueError(f"multi_dot: expected at least 2 tensors, got {len(xs)}")
    if any(x.ndim != 2 for x in xs[1:-1]) or not all(x.ndim in (1, 2) for x in (xs[0], xs[-1])):
        raise ShapeError(f"multi_dot: 2-D tensors expected (1-D at the ends), got "
                         f"{[x.shape for x in xs]}")  # fmt: skip
    out = xs[0]
    for x in xs[1:]:
        out = out @ x
    return out


@pytorch_keywords
def vecdot(x: Any, y: Any, *, dim: int = -1) -> Tensor:
    """The dot product of vectors along `dim`, broadcast over the others."""
    return sum(as_tensor(x) * as_tensor(y), dim)


def diagonal(A: Any, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """`torch.linalg.diagonal`: the matrices' diagonals (the last two dims by default, unlike
    `torch.diagonal`'s first two)."""
    return as_tensor(A).diagonal(offset, dim1, dim2)


def svdvals(A: Any) -> Tensor:
    return P.svd(as_tensor(A), part="s")


def pinv(A: Any) -> Tensor:
    return P.pinv(as_tensor(A))


@pytorch_keywords
def cross(input: Any, other: Any, *, dim: int = -1) -> Tensor:
    a, b = as_tensor(input), as_tensor(other)
    if a.shape[dim] != 3 or b.shape[dim] != 3:
        raise ShapeError(f"linalg.cross: dimension {dim} of {a.shape} and {b.shape} must be 3")
    return cross3(a, b, dim)


@pytorch_keywords
def vector_norm(x: Any, ord: float = 2, dim: Any = None, keepdim: bool = False, *,
                dtype: Any = None) -> Tensor:  # fmt: skip
    """The p-norm of the elements over `dim` (all by default): ord 2, 1, inf, -inf, 0 or any p;
    computed in `dtype` if given."""
    x = as_tensor(x) if dtype is None else as_tensor(x).to(dtype)
    axes = tuple(range(x.ndim)) if dim is None else (dim,) if isinstance(dim, int) else dim
    axes = tuple(a % x.ndim for a in axes)
    a = P.abs(x)
    if ord == math.inf:
        return amax(a, axes, keepdim)
    if ord == -math.inf:
        return amin(a, axes, keepdim)
    if ord == 0:
        return sum((a != 0.0).astype(a.dtype), axes, keepdim)
    if ord == 1:
        return sum(a, axes, keepdim)
    if ord == 2:  # |x| ** 2 as x * x, one pass (a complex number's from its modulus)
        return _root(sum(a * a if x.dtype.kind == "c" else x * x, axes, keepdim), 2)
    return _root(sum(a ** float(ord), axes, keepdim), ord)


def _root(s: Tensor, p: float) -> Tensor:
    """s ** (1 / p), whose gradient is 0 where s is 0 (PyTorch's, for a norm of zeros), not the
    infinite derivative times zero (NaN) that clipping or normalizing a zero gradient would
    spread."""
    positive = s > 0.0
    safe = P.where(positive, s, 1.0)
    return P.where(positive, P.sqrt(safe) if p == 2 else safe ** (1.0 / p), 0.0)


@pytorch_keywords
def matrix_norm(A: Any, ord: Any = "fro", dim: tuple[int, int] = (-2, -1),
                keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # fmt: skip
    """Matrix norms over the two dims: "fro", "nuc", 1, -1, 2, -2, inf, -inf; computed in
    `dtype` if given."""
    x = as_tensor(A) if dtype is None else as_tensor(A).to(dtype)
    axes = tuple(a % x.ndim for a in dim)
    if len(axes) != 2:
        raise ShapeError(f"matrix_norm: dim {dim} must name two dimensions of {x.shape}")
    if ord == "fro":
        return _root(sum(x * x, axes, keepdim), 2)
    if ord in (1, -1, math.inf, -math.inf):
        summed, other = (axes[0], axes[1]) if ord in (1, -1) else (axes[1], axes[0])
        inner = sum(P.abs(x), summed, keepdim=True)
        out = (amax if ord > 0 else amin)(inner, other, keepdim=True)
        return out if keepdim else squeeze(out, axes)
    if ord in (2, -2, "nuc"):
        rest = [a for a in range(x.ndim) if a not in axes]
        sv = svdvals(permute(x, [*rest, *axes]))
        out = sum(sv, -1) if ord == "nuc" else (amax if ord == 2 else amin)(sv, -1)
        kept = tuple(1 if a in axes else d for a, d in enumerate(x.shape))
        return reshape(out, kept) if keepdim else out
    raise ValueError(f"matrix_norm: invalid ord {ord!r}")


@pytorch_keywords
def norm(A: Any, ord: Any = None, dim: Any = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:  # fmt: skip
    """A vector norm over one dim (or of the flattened tensor when ord and dim are None), a
    matrix norm over two (or of a 2-D tensor when only ord is given); computed in `dtype` if
    given."""
    x = as_tensor(A) if dtype is None else as_tensor(A).to(dtype)
    if dim is None and ord is None:
        return vector_norm(x, 2, None, keepdim)
    if dim is None:
        if x.ndim not in (1, 2):
            raise ShapeError(f"norm: with ord={ord!r} and no dim the input must be 1-D or 2-D, "
                             f"got {x.shape}")  # fmt: skip
        dim = tuple(range(x.ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dims) == 1:
        return vector_norm(x, 2 if ord is None else ord, dims, keepdim)
    return matrix_norm(x, "fro" if ord is None else ord, dims, keepdim)


# --- PyTorch's top-level spellings (torch.det, torch.logdet, torch.cdist, ...) ------------------


def logdet(input: Any) -> Tensor:
    """log det(A): nan where det < 0, -inf where it is 0 (PyTorch's); the gradient is
    inv(A)^T, as log|det|'s."""
    sign, logabs = slogdet(input)
    return P.where(sign < 0.0, math.nan, logabs)


@pytorch_keywords
def cholesky_top(input: Any, upper: bool = False) -> Tensor:
    """PyTorch's deprecated `torch.cholesky(A, upper=False)` (upper positional)."""
    return cholesky(input, upper=upper)


EUCLID_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                "donot_use_mm_for_euclid_dist")  # fmt: skip
MM_ABOVE = 25  # rows: PyTorch's default mode multiplies matrices past this, else subtracts


def cdist(x1: Any, x2: Any, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:  # fmt: skip
    """The p-norm distance between each row of x1 (..., P, M) and each row of x2 (..., R, M):
    (..., P, R). Euclidean distances of many rows are |a|^2 + |b|^2 - 2 a.b, one matrix
    product (PyTorch's default mode, and as exact as PyTorch's); else the norm of the
    differences, whose gradient at a zero distance is 0, as PyTorch's."""
    a, b = as_tensor(x1), as_tensor(x2)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"cdist: expects (..., P, M) and (..., R, M), got {a.shape}, {b.shape}")
    if compute_mode not in EUCLID_MODES:
        raise ValueError(f"cdist: compute_mode must be one of {EUCLID_MODES}")
    if p < 0:
        raise ValueError(f"cdist: p must be non-negative, got {p}")
    many = a.shape[-2] > MM_ABOVE or b.shape[-2] > MM_ABOVE
    if p == 2 and (compute_mode == EUCLID_MODES[1] or compute_mode == EUCLID_MODES[0] and many):
        squares = (sum(a * a, -1, keepdim=True) + matrix_transpose(sum(b * b, -1, keepdim=True))
                   - 2.0 * (a @ matrix_transpose(b)))  # fmt: skip
        return _root(P.maximum(squares, 0.0), 2)
    diff = unsqueeze(a, -2) - unsqueeze(b, -3)
    return vector_norm(diff, p, -1)


__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matrix_norm",
           "matrix_power", "multi_dot", "norm", "pinv", "qr", "slogdet", "solve", "svd",
           "svdvals", "vecdot", "vector_norm"]  # fmt: skip

"""`tracegrad.linalg`: PyTorch's `torch.linalg`, batched over leading dims. inv, det, slogdet,
solve, cholesky, eigh, eig and pinv are records in the op table (their VJPs are the classical
matrix-calculus rules, written with tracegrad ops, so they also trace and nest); the norms are
compositions. NumPy's spellings (`axis=`, `compute_uv=`) are `tracegrad.numpy.linalg`."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import LinAlgError, ShapeError
from tracegrad.frontend.elementwise import conj
from tracegrad.frontend.functions import (
    cat,
    expand,
    matrix_transpose,
    movedim,
    permute,
    pytorch_keywords,
    reshape,
    squeeze,
    unsqueeze,
)
from tracegrad.frontend.products import cross3
from tracegrad.frontend.rearrange import tril, triu
from tracegrad.frontend.reductions import amax, amin, cumprod, sum
from tracegrad.frontend.tensor import Listeners, Tensor, as_tensor


def inv(A: Any) -> Tensor:
    return P.inv(as_tensor(A))


def matrix_exp(A: Any) -> Tensor:
    """The matrix exponential of each square matrix (scaling and squaring, Pade degree 13),
    differentiable twice and more (its gradient is itself, of a block matrix)."""
    return P.matrix_exp(as_tensor(A))


def inverse(input: Any) -> Tensor:
    """`torch.inverse`: `linalg.inv`."""
    return inv(input)


@pytorch_keywords
def pinverse(input: Any, rcond: float = 1e-15) -> Tensor:
    """`torch.pinverse`: `linalg.pinv` with singular values at most `rcond` times the largest
    counting as zero."""
    return pinv(input, rtol=rcond)


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


def _square(name: str, a: Tensor) -> Tensor:
    """a, if it is a (batch of) square matrices; else PyTorch's error."""
    if a.ndim < 2:
        raise ShapeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name}: A must be batches of square matrices, but they are "
                         f"{a.shape[-2]} by {a.shape[-1]} matrices")  # fmt: skip
    return a


class EigResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


def eig(A: Any) -> EigResult:
    """The eigenvalues and eigenvectors (columns of norm 1) of general square matrices: complex
    (complex64 of float32, complex128 of float64), also of real matrices, in LAPACK's order,
    as PyTorch's. Each eigenvector is determined up to a phase (LAPACK makes its largest
    component real). Differentiable (twice and more) by PyTorch's rule, for distinct
    eigenvalues, in losses that do not depend on the phases (which raise on backward, as
    PyTorch's); a real matrix's gradient is the real part."""
    a = _square("linalg.eig", as_tensor(A))
    return EigResult(P.eig(a, part="values"), P.eig(a, part="vectors"))


def eigvals(A: Any) -> Tensor:
    """The eigenvalues of general square matrices, complex (see `eig`)."""
    return P.eig(_square("linalg.eigvals", as_tensor(A)), part="values")


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


def qr_top(input: Any, some: bool = True) -> QRResult:
    """PyTorch's older `torch.qr`: `linalg.qr`, reduced, or complete with `some=False`."""
    return qr(input, "reduced" if some else "complete")


class SVDTopResult(NamedTuple):
    U: Tensor
    S: Tensor
    V: Tensor


def svd_top(input: Any, some: bool = True, compute_uv: bool = True) -> SVDTopResult:
    """PyTorch's older `torch.svd` and `Tensor.svd`: (U, S, V), V not transposed; `some=False`
    is the full SVD (its extra columns without gradient, as `svd`); without `compute_uv`, only
    the singular values, U and V zeros of shapes (m, m) and (n, n) whatever `some`, as
    PyTorch's."""
    a = as_tensor(input)
    if not compute_uv:
        (m, n), batch = a.shape[-2:], a.shape[:-2]
        dtype = a.dtype if a.dtype.kind in "fc" else np.dtype(np.float64)
        zeros = [Tensor._of(np.zeros((*batch, k, k), dtype)) for k in (m, n)]
        return SVDTopResult(zeros[0], svdvals(a), zeros[1])
    u, s, vh = svd(a, full_matrices=not some)
    return SVDTopResult(u, s, matrix_transpose(vh))


def svd_lowrank(A: Any, q: int | None = 6, niter: int = 2, M: Any = None) -> SVDTopResult:
    """PyTorch's `svd_lowrank`: (U, S, V), the `q` largest singular values of A (or A - M) and
    their vectors. Exact here; PyTorch's is randomized (`niter` power iterations), an
    approximation of these."""
    a = as_tensor(A) if M is None else as_tensor(A) - as_tensor(M)
    q = min(a.shape[-2:]) if q is None else q
    u, s, v = svd_top(a)
    return SVDTopResult(u[..., :q], s[..., :q], v[..., :q])


def pca_lowrank(A: Any, q: int | None = None, center: bool = True,
                niter: int = 2) -> SVDTopResult:  # fmt: skip
    """PyTorch's `pca_lowrank`: `svd_lowrank` of A with its columns' means taken away
    (`center`); q min(6, m, n) if not given."""
    a = as_tensor(A)
    q = min(6, *a.shape[-2:]) if q is None else q
    return svd_lowrank(a - a.mean(dim=-2, keepdim=True) if center else a, q)


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


@pytorch_keywords
def pinv(A: Any, *, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> Tensor:
    """The pseudo-inverse: singular values at most `rtol` times the largest count as zero, by
    default eps * max(m, n), as PyTorch's (NumPy's 1e-15 kept float32's noise). `hermitian`
    changes nothing (the SVD serves symmetric matrices); `atol` is not provided."""
    a = as_tensor(A)
    if atol is not None:
        raise NotImplementedError("linalg.pinv: atol= is not provided by tracegrad (rtol= is)")
    return P.pinv(a, rcond=_rtol(a) if rtol is None else float(rtol))


def _rtol(a: Tensor) -> float:
    """PyTorch's default tolerance of small singular values, relative to the largest."""
    dtype = a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)
    return float(np.finfo(dtype).eps) * max(a.shape[-2:])


@pytorch_keywords
def matrix_rank(A: Any, *, atol: Any = None, rtol: Any = None, hermitian: bool = False,
                tol: Any = None) -> Tensor:  # fmt: skip
    """How many singular values exceed max(atol, rtol * the largest) (int64; `tol` is atol):
    rtol by default eps * max(m, n) without atol, 0 with it, as PyTorch's."""
    a = as_tensor(A)
    atol = tol if atol is None else atol
    if rtol is None:
        rtol = 0.0 if atol is not None else _rtol(a)
    s = svdvals(a.detach())
    bound = P.maximum(amax(s, -1, keepdim=True) * rtol, 0.0 if atol is None else atol)
    return sum(s > bound, -1)


@pytorch_keywords
def solve_triangular(A: Any, B: Any, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> Tensor:  # fmt: skip
    """X with A X = B (X A = B with `left=False`), A read from its upper or lower triangle (its
    diagonal taken as ones with `unitriangular`), which alone gets a gradient, as PyTorch's."""
    a = as_tensor(A)
    part = triu if upper else tril
    if unitriangular:
        a = part(a, 1 if upper else -1) + Tensor._of(np.eye(a.shape[-1], dtype=a.dtype))
    else:
        a = part(a)
    b = as_tensor(B)
    if left:
        return P.solve(a, b)
    return matrix_transpose(P.solve(matrix_transpose(a), matrix_transpose(b)))


class TriangularSolveResult(NamedTuple):
    solution: Tensor
    cloned_coefficient: Tensor


@pytorch_keywords
def triangular_solve(b: Any, A: Any, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> TriangularSolveResult:  # fmt: skip
    """PyTorch's older `torch.triangular_solve(b, A)`: (X with op(A) X = b, A), op(A) = A^T with
    `transpose`."""
    a = as_tensor(A)
    t = matrix_transpose(a) if transpose else a
    x = solve_triangular(t, b, upper=upper != transpose, unitriangular=unitriangular)
    return TriangularSolveResult(x, P.positive(a))


class LstsqResult(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


@pytorch_keywords
def lstsq(A: Any, B: Any, rcond: Any = None, *, driver: str | None = None) -> LstsqResult:
    """The least-squares solution of A X = B (the least-norm one where A is wide or
    rank-deficient): pinv(A) B, differentiable. As PyTorch's CPU drivers: `rank` from "gelsy"
    (the default), "gelsd" and "gelss"; `singular_values` from "gelsd" and "gelss"; `residuals`
    (the squared residual of each column) where A is tall and of full rank, from any driver but
    "gelsy"; the others are empty."""
    a, b = as_tensor(A), as_tensor(B)
    if driver not in (None, "gelsy", "gelsd", "gelss", "gels"):
        raise ValueError(f"lstsq: driver must be 'gels', 'gelsy', 'gelsd' or 'gelss', not "
                         f"{driver!r}")  # fmt: skip
    driver = driver or "gelsy"
    vector = b.ndim == a.ndim - 1  # B (*, m): a batch of vectors, as PyTorch's
    b = unsqueeze(b, -1) if vector else b
    m, n = a.shape[-2:]
    rtol = _rtol(a) if rcond is None else float(rcond)
    x = pinv(a, rtol=rtol) @ b
    empty = Tensor._of(np.zeros((0,), a.dtype))
    rank = matrix_rank(a, rtol=rtol) if driver != "gels" else Tensor._of(np.zeros((0,), np.int64))
    values = svdvals(a.detach()) if driver in ("gelsd", "gelss") else empty
    residuals = empty
    if driver != "gelsy" and m > n and bool((rank == n).all()):
        residuals = sum((a @ x - b) ** 2, -2)
    return LstsqResult(squeeze(x, -1) if vector else x, residuals, rank, values)


class InvExResult(NamedTuple):
    inverse: Tensor
    info: Tensor


class CholeskyExResult(NamedTuple):
    L: Tensor
    info: Tensor


class SolveExResult(NamedTuple):
    result: Tensor
    info: Tensor


def _no_errors(a: Tensor) -> Tensor:
    """`info` of a factorization that succeeded: zeros, one per matrix (int32)."""
    return Tensor._of(np.zeros(a.shape[:-2], np.int32))


@pytorch_keywords
def inv_ex(A: Any, *, check_errors: bool = False) -> InvExResult:
    """(inv(A), info): info is zeros; a singular matrix raises (PyTorch's reports it in info)."""
    a = as_tensor(A)
    return InvExResult(inv(a), _no_errors(a))


@pytorch_keywords
def cholesky_ex(A: Any, *, upper: bool = False, check_errors: bool = False) -> CholeskyExResult:
    """(cholesky(A), info), info zeros where A is positive definite. Eagerly, a matrix that is
    not gives the order of its first leading minor that is not (PyTorch's info) and a factor of
    nans, unless `check_errors`; inside a traced step it raises."""
    a = as_tensor(A)
    try:
        return CholeskyExResult(cholesky(a, upper=upper), _no_errors(a))
    except np.linalg.LinAlgError:
        if check_errors or Listeners.tracers:
            raise
    value = a.numpy()
    flat = value.reshape(-1, *value.shape[-2:])
    info = np.array([_first_bad_minor(m) for m in flat], np.int32).reshape(value.shape[:-2])
    factors = np.full_like(flat, np.nan)
    for k, matrix in enumerate(flat):
        if info.flat[k] == 0:
            factors[k] = np.linalg.cholesky(matrix)
    factors = factors.reshape(value.shape)
    factors = np.swapaxes(factors, -1, -2) if upper else factors
    return CholeskyExResult(Tensor._of(factors), Tensor._of(info))


def _first_bad_minor(matrix: np.ndarray) -> int:
    for k in range(1, matrix.shape[-1] + 1):
        try:
            np.linalg.cholesky(matrix[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return 0


@pytorch_keywords
def solve_ex(A: Any, B: Any, *, left: bool = True, check_errors: bool = False) -> SolveExResult:
    """(solve(A, B), info): info is zeros; a singular A raises (PyTorch's reports it in info)."""
    a = as_tensor(A)
    return SolveExResult(solve(a, B, left=left), _no_errors(a))


def matmul(input: Any, other: Any) -> Tensor:
    """`torch.linalg.matmul`: `torch.matmul`."""
    return as_tensor(input) @ other


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
    spread; a nan stays nan (a norm over a nan is nan, which clipping's checks look for)."""
    zero = s == 0.0
    safe = P.where(zero, 1.0, s)
    return P.where(zero, 0.0, P.sqrt(safe) if p == 2 else safe ** (1.0 / p))


@pytorch_keywords
def matrix_norm(A: Any, ord: Any = "fro", dim: tuple[int, int] = (-2, -1),
                keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # fmt: skip
    """Matrix norms over the two dims: "fro", "nuc", 1, -1, 2, -2, inf, -inf; computed in
    `dtype` if given."""
    x = as_tensor(A) if dtype is None else as_tensor(A).to(dtype)
    axes = tuple(a % x.ndim for a in dim)
    if len(axes) != 2:
        raise ShapeError(f"matrix_norm: dim {dim} must name two dimensions of {x.shape}")
    if ord == "fro":  # |x| ** 2 as x * x, a complex number's from its modulus
        y = P.abs(x) if x.dtype.kind == "c" else x
        return _root(sum(y * y, axes, keepdim), 2)
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


_COND_ORDERS = (None, 2, -2, "fro", "nuc", math.inf, -math.inf, 1, -1)


@pytorch_keywords
def cond(A: Any, p: Any = None) -> Tensor:
    """The condition number of (a batch of) matrices in the norm `p`, as PyTorch's: by the
    singular values for None (2), -2 and "nuc" (any shape for the first two); else
    norm(A) norm(inv(A)), inf where A is singular (eagerly; in a traced step a singular matrix
    raises). Real, also of complex matrices; differentiable (where PyTorch's gradient of the
    norms by the inverse fails, this one is the composition's)."""
    a = as_tensor(A)
    if a.ndim < 2:
        raise ShapeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if isinstance(p, bool) or not any(p is q or p == q for q in _COND_ORDERS):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    if a.size == 0:  # PyTorch's: zeros, one per matrix
        dtype = a.dtype if a.dtype.kind in "fc" else np.dtype(np.float64)
        return Tensor._of(np.zeros(a.shape[:-2], np.empty(0, dtype).real.dtype))
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero matrix's 0 / 0, as PyTorch's
        if p is None or p in (2, -2):
            s = svdvals(a)  # descending
            return s[..., -1] / s[..., 0] if p == -2 else s[..., 0] / s[..., -1]
        _square(f"linalg.cond(ord={p})", a)
        if p == "nuc":  # the nuclear norms of A and of its inverse
            s = svdvals(a)
            return sum(s, -1) * sum(1.0 / s, -1)
        inverse, singular = _inverse_where_invertible(a)
        out = matrix_norm(a, p) * matrix_norm(inverse, p)
        out = P.where(out != out, math.inf, out)  # PyTorch's nan_to_num
        return out if singular is None else P.where(Tensor._of(singular), math.inf, out)


def _inverse_where_invertible(a: Tensor) -> tuple[Tensor, np.ndarray | None]:
    """(inv(A), None); eagerly, where some of the matrices are singular, the inverse with those
    taken as the identity, and where they are (a bool per matrix)."""
    try:
        return inv(a), None
    except LinAlgError:
        if Listeners.tracers:
            raise
    value = np.asarray(a.detach().numpy())
    singular = np.zeros(value.shape[:-2], bool)
    for k in np.ndindex(singular.shape):
        try:
            np.linalg.inv(value[k])
        except np.linalg.LinAlgError:
            singular[k] = True
    eye = np.eye(a.shape[-1], dtype=value.dtype)
    return inv(P.where(Tensor._of(singular[..., None, None]), eye, a)), singular


@pytorch_keywords
def vander(x: Any, *, N: int | None = None) -> Tensor:
    """`torch.linalg.vander`: x^0, x^1, ..., x^(N-1) as the columns of (..., n, N), N = n by
    default, by running products (as PyTorch's, so the values round alike); integers give
    int64. Unlike `torch.vander`, powers increase and x may be a batch."""
    v = as_tensor(x)
    if v.dtype.kind not in "fciu" or v.dtype.kind == "f" and v.dtype.itemsize < 4:
        name = {"bool": "Bool", "float16": "Half"}.get(v.dtype.name, v.dtype.name)
        raise RuntimeError("linalg.vander supports floating point, complex, and integer "
                           f"tensors, but got {name}")  # fmt: skip
    v = unsqueeze(v, -1) if v.ndim == 0 else v
    v = v.astype(np.int64) if v.dtype.kind in "iu" else v
    n = v.shape[-1] if N is None else int(N)
    if n <= 1:
        raise RuntimeError("N must be greater than 1.")
    powers = cumprod(expand(unsqueeze(v, -1), (*v.shape, n - 1)), -1)
    ones = Tensor._of(np.ones((*v.shape, 1), powers.dtype))
    return cat([ones, powers], -1)


@pytorch_keywords
def tensorinv(A: Any, ind: int = 2) -> Tensor:
    """The inverse of A read as a square matrix, rows its first `ind` dims and columns the
    rest: of shape A.shape[ind:] + A.shape[:ind], so that tensordot(inverse, A, ind) is the
    identity. Differentiable (`inv` of a reshape)."""
    a = as_tensor(A)
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, columns = a.shape[:ind], a.shape[ind:]
    if math.prod(columns) != math.prod(rows):
        raise ShapeError("Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                         f"prod(self.shape[:ind]), but got {math.prod(columns)} != "
                         f"{math.prod(rows)}")  # fmt: skip
    k = math.prod(rows)
    return reshape(inv(reshape(a, (k, k))), (*columns, *rows))


@pytorch_keywords
def tensorsolve(A: Any, B: Any, dims: Any = None) -> Tensor:
    """X with tensordot(A, X, X.ndim) = B: A read as a square matrix, rows its first B.ndim dims
    and columns the rest (after moving `dims` of A to the end), X of A's last shape.
    Differentiable (`solve` of reshapes)."""
    a, b = as_tensor(A), as_tensor(B)
    if dims is not None:
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        a = movedim(a, dims, tuple(range(a.ndim - len(dims), a.ndim)))
    shape = a.shape[b.ndim :]
    if math.prod(shape) != b.size:
        raise ShapeError("Expected self to satisfy the requirement prod(self.shape[other.ndim:]) "
                         f"== prod(self.shape[:other.ndim]), but got {math.prod(shape)} != "
                         f"{b.size}")  # fmt: skip
    k = math.prod(shape)
    return reshape(P.solve(reshape(a, (k, k)), reshape(b, (k, 1))), shape)


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


@pytorch_keywords
def cholesky_solve(B: Any, L: Any, upper: bool = False) -> Tensor:
    """X with A X = B, A = L L^H given its Cholesky factor L (U^H U with `upper`): two solves by
    the factor, whose other triangle is not read. The gradient is PyTorch's, that of
    (L L^H)^-1 B in the whole of L (-(G X^H + X G^H) L, G the gradient of B)."""
    factor = as_tensor(L)
    part = (triu if upper else tril)(factor)
    part = factor - (factor - part).detach()  # the triangle's value, the whole's gradient
    lower = matrix_transpose(part.conj()) if upper else part
    return P.solve(matrix_transpose(lower.conj()), P.solve(lower, as_tensor(B)))


@pytorch_keywords
def cholesky_inverse(L: Any, upper: bool = False) -> Tensor:
    """inv(A), A = L L^H given its Cholesky factor L (U^H U with `upper`)."""
    factor = as_tensor(L)
    eye = Tensor._of(np.broadcast_to(np.eye(factor.shape[-1], dtype=factor.dtype), factor.shape))
    return cholesky_solve(eye, factor, upper)


def adjoint(input: Any) -> Tensor:
    """The conjugate transpose of the last two axes (`x.mH`; `x.mT` for real tensors)."""
    return matrix_transpose(conj(input))


class GeqrfResult(NamedTuple):
    a: Tensor
    tau: Tensor


def geqrf(input: Any) -> GeqrfResult:
    """LAPACK's QR in Householder form (PyTorch's `torch.geqrf`; not differentiable, as
    PyTorch's): R on and above the diagonal, the reflectors' vectors below it, and their scales
    `tau`; `householder_product(a, tau)` is Q."""
    a = np.asarray(as_tensor(input).detach().numpy())
    if a.ndim < 2:
        raise ShapeError(f"geqrf: expected a matrix or a batch of them, got shape {a.shape}")
    (m, n), lead = a.shape[-2:], a.shape[:-2]
    flat = a.reshape(-1, m, n)
    raws = [np.linalg.qr(x, mode="raw") for x in flat]  # (h, tau), h transposed
    h = np.stack([r[0].T for r in raws]) if raws else np.zeros_like(flat)
    tau = np.stack([r[1] for r in raws]) if raws else np.zeros((0, min(m, n)), a.dtype)
    return GeqrfResult(Tensor._of(h.reshape(a.shape).astype(a.dtype)),
                       Tensor._of(tau.reshape(*lead, min(m, n)).astype(a.dtype)))  # fmt: skip


@pytorch_keywords
def householder_product(A: Any, tau: Any) -> Tensor:
    """The first n columns of H_1 H_2 ... H_k (PyTorch's `linalg.householder_product`, LAPACK's
    orgqr), H_i = I - tau_i v_i v_i^H, v_i the i-th column of A (m x n) below the diagonal
    with 1 on it. Applied to the m x n identity from the right end, O(k m n); made of tracegrad
    ops, so it differentiates in A and tau and traces."""
    a, t = as_tensor(A), as_tensor(tau)
    (m, n), k = a.shape[-2:], t.shape[-1] if t.ndim else -1
    if a.ndim < 2 or not m >= n >= k >= 0 or t.shape[:-1] != a.shape[:-2]:
        raise ShapeError(f"householder_product: A of shape {a.shape} (m >= n) and tau of shape "
                         f"{t.shape} (k <= n, A's batch) do not fit")  # fmt: skip
    eye = np.eye(m, n, dtype=a.dtype)
    v = tril(a, -1) + Tensor._of(eye)
    q = Tensor._of(np.broadcast_to(eye, a.shape).copy())
    for i in reversed(range(k)):  # q = H_i q
        vi = v[..., :, i : i + 1]
        q = q - vi * unsqueeze(unsqueeze(t[..., i], -1), -1) @ (adjoint(vi) @ q)
    return q


class LUFactorResult(NamedTuple):
    LU: Tensor
    pivots: Tensor


class LUFactorExResult(NamedTuple):
    LU: Tensor
    pivots: Tensor
    info: Tensor


class LUResult(NamedTuple):
    P: Tensor
    L: Tensor
    U: Tensor


def _lu(a: Tensor, pivot: bool) -> tuple[Tensor, Tensor, np.ndarray]:
    """(L (..., m, k), U (..., k, n), the rows of A in the order of L U) by Gaussian elimination
    with partial pivoting, k = min(m, n): each step's pivot is the column's largest magnitude
    (its first, on a tie, as LAPACK's getrf), chosen on the values; the elimination is made of
    tracegrad ops, so L and U differentiate in A. A zero pivot leaves a zero column of L (a
    singular matrix), as getrf does."""
    if a.ndim < 2:
        raise ShapeError(f"lu: expected a matrix or a batch of them, got shape {a.shape}")
    from tracegrad.frontend.functions import cat, take_along_dim

    (m, n), lead = a.shape[-2:], a.shape[:-2]
    k = min(m, n)
    order = np.broadcast_to(np.arange(m), (*lead, m)).copy()
    rows, columns = a, []
    for j in range(k):
        if pivot:
            magnitude = np.abs(rows[..., j:, j].detach().numpy())
            best = j + np.argmax(magnitude, axis=-1) if m > j else np.zeros(lead, int)
            swap = np.broadcast_to(np.arange(m), (*lead, m)).copy()
            np.put_along_axis(swap, best[..., None], j, axis=-1)
            np.put_along_axis(swap, np.full((*lead, 1), j), best[..., None], axis=-1)
            order = np.take_along_axis(order, swap, axis=-1)
            rows = take_along_dim(rows, Tensor._of(swap[..., None]), dim=-2)
            columns = [take_along_dim(c, Tensor._of(swap[..., None]), dim=-2) for c in columns]
        head = rows[..., j : j + 1, j : j + 1]
        safe = P.where(head == 0, 1.0, head)
        factor = P.where(head == 0, 0.0, rows[..., j + 1 :, j : j + 1] / safe)
        below = rows[..., j + 1 :, :] - factor * rows[..., j : j + 1, :]
        rows = cat([rows[..., : j + 1, :], below], dim=-2)
        columns.append(cat([Tensor._of(np.zeros((*lead, j + 1, 1), a.dtype)), factor], dim=-2))
    eye = Tensor._of(np.eye(m, k, dtype=a.dtype))
    L = (cat(columns, dim=-1) if columns else Tensor._of(np.zeros((*lead, m, 0), a.dtype))) + eye
    return L, triu(rows[..., :k, :]), order


def _permutation(order: np.ndarray, dtype: np.dtype) -> Tensor:
    """P with P[order[i], i] = 1: A = P L U where the rows of L U are A's in `order`."""
    m = order.shape[-1]
    p = np.zeros((*order.shape, m), dtype)
    np.put_along_axis(p, order[..., :, None], 1, axis=-1)
    return Tensor._of(np.swapaxes(p, -1, -2).copy())


def _pivots(order: np.ndarray, k: int) -> np.ndarray:
    """LAPACK's pivots (1-based, int32: row j was swapped with row pivots[j] at step j) of the
    row order `order` reached by such swaps."""
    lead, m = order.shape[:-1], order.shape[-1]
    flat, pivots = order.reshape(-1, m), np.zeros((int(np.prod(lead, dtype=int)), k), np.int32)
    for b, target in enumerate(flat):
        current, where = list(range(m)), list(range(m))  # where[r]: the place of row r
        for j in range(k):
            i = where[target[j]]
            pivots[b, j] = i + 1
            current[j], current[i] = current[i], current[j]
            where[current[j]], where[current[i]] = j, i
    return pivots.reshape(*lead, k)


def _order(pivots: np.ndarray, m: int) -> np.ndarray:
    """The row order LAPACK's `pivots` make of range(m)."""
    lead, k = pivots.shape[:-1], pivots.shape[-1]
    flat = pivots.reshape(-1, k) - 1
    order = np.broadcast_to(np.arange(m), (flat.shape[0], m)).copy()
    for j in range(k):
        i = flat[:, j]
        rows = np.arange(flat.shape[0])
        order[rows, j], order[rows, i] = order[rows, i], order[rows, j].copy()
    return order.reshape(*lead, m)


def lu(A: Any, *, pivot: bool = True) -> LUResult:
    """`torch.linalg.lu`: P, L, U with A = P L U, L unit lower triangular (m x k), U upper
    triangular (k x n); differentiable in A (`_lu`). Not in a traced step: the pivots are
    chosen on the values."""
    a = as_tensor(A)
    L, U, order = _lu(a, pivot)
    return LUResult(_permutation(order, a.dtype), L, U)


def lu_factor(A: Any, *, pivot: bool = True) -> LUFactorResult:
    """`torch.linalg.lu_factor`: L and U in one matrix (L's unit diagonal left out) and LAPACK's
    pivots."""
    LU, pivots, _ = lu_factor_ex(A, pivot=pivot)
    return LUFactorResult(LU, pivots)


def lu_factor_ex(A: Any, *, pivot: bool = True, check_errors: bool = False) -> LUFactorExResult:
    """`lu_factor` and LAPACK's info: 0, or the first zero pivot's place (1-based) of a
    singular matrix (an error with `check_errors`)."""
    a = as_tensor(A)
    L, U, order = _lu(a, pivot)
    (m, n), k = a.shape[-2:], min(a.shape[-2:])
    packed = _zero_padded(tril(L, -1), 0, n - k) + _zero_padded(U, m - k, 0)
    diagonal_u = np.diagonal(U.detach().numpy(), axis1=-2, axis2=-1)
    zero = diagonal_u == 0
    info = np.where(zero.any(-1), zero.argmax(-1) + 1, 0).astype(np.int32)
    if check_errors and info.any():
        raise RuntimeError(f"linalg.lu_factor_ex: U[{int(info.max()) - 1}, "
                           f"{int(info.max()) - 1}] is zero, singular U")  # fmt: skip
    return LUFactorExResult(packed, Tensor._of(_pivots(order, k)), Tensor._of(info))


def _zero_padded(x: Tensor, rows: int, columns: int) -> Tensor:
    """x with `rows` zero rows below it and `columns` zero columns to its right."""
    from tracegrad.frontend.functions import cat

    if rows:
        x = cat([x, Tensor._of(np.zeros((*x.shape[:-2], rows, x.shape[-1]), x.dtype))], dim=-2)
    if columns:
        x = cat([x, Tensor._of(np.zeros((*x.shape[:-1], columns), x.dtype))], dim=-1)
    return x


def lu_unpack(LU_data: Any, LU_pivots: Any, unpack_data: bool = True,
              unpack_pivots: bool = True) -> LUResult:  # fmt: skip
    """P, L, U from `lu_factor`'s packed form (empty tensors for the parts not unpacked)."""
    lu_, pivots = as_tensor(LU_data), as_tensor(LU_pivots)
    m, k = lu_.shape[-2], min(lu_.shape[-2:])
    empty = Tensor._of(np.zeros((0,), lu_.dtype))
    L = U = Pm = empty
    if unpack_data:
        L = tril(lu_, -1)[..., :, :k] + Tensor._of(np.eye(m, k, dtype=lu_.dtype))
        U = triu(lu_[..., :k, :])
    if unpack_pivots:
        Pm = _permutation(_order(np.asarray(pivots.numpy()), m), lu_.dtype)
    return LUResult(Pm, L, U)


def lu_solve(LU: Any, pivots: Any, B: Any, *, left: bool = True, adjoint: bool = False) -> Tensor:
    """`torch.linalg.lu_solve`: X with A X = B (A^H X = B with `adjoint`; X A = B with
    `left=False`) from A's `lu_factor`."""
    Pm, L, U = lu_unpack(LU, pivots)
    b = as_tensor(B)
    h = lambda x: conj(matrix_transpose(x))  # noqa: E731 (`adjoint`, which the flag hides)
    if not left:  # X A = B: A^H X^H = B^H
        return h(lu_solve(LU, pivots, h(b), adjoint=not adjoint))
    if adjoint:  # A^H = U^H L^H P^T
        y = solve_triangular(h(U), b, upper=False)
        return Pm @ solve_triangular(h(L), y, upper=True, unitriangular=True)
    y = solve_triangular(L, matrix_transpose(Pm) @ b, upper=False, unitriangular=True)
    return solve_triangular(U, y, upper=True)


def lu_top(A: Any, pivot: bool = True, get_infos: bool = False) -> tuple:
    """`torch.lu` and `Tensor.lu` (PyTorch's older spelling of `linalg.lu_factor_ex`): the
    packed LU and pivots, and the infos with `get_infos`."""
    LU, pivots, info = lu_factor_ex(A, pivot=pivot)
    return (LU, pivots, info) if get_infos else (LU, pivots)


@pytorch_keywords
def lu_solve_top(b: Any, LU_data: Any, LU_pivots: Any) -> Tensor:
    """`torch.lu_solve(b, LU_data, LU_pivots)`, PyTorch's older argument order."""
    return lu_solve(LU_data, LU_pivots, b)


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


__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eig",
           "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "inv_ex", "lstsq", "lu",
           "lu_factor", "lu_factor_ex", "lu_solve", "matmul", "matrix_exp",
           "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr",
           "slogdet", "solve", "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv",
           "tensorsolve", "vander", "vecdot", "vector_norm"]  # fmt: skip

"""`tracegrad.linalg`: NumPy's `numpy.linalg` functions with their signatures, batched over
leading axes. inv, det, slogdet, solve, cholesky, eigh and pinv are records in the op table
(their VJPs are the classical matrix-calculus rules, written with tracegrad ops, so they also
trace and nest); norm is a composition."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend import functions as api
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = ["cholesky", "det", "eigh", "eigvalsh", "inv", "norm", "pinv", "slogdet", "solve", "svd"]


def inv(a: Any) -> Tensor:
    return P.inv(as_tensor(a))


def det(a: Any) -> Tensor:
    return P.det(as_tensor(a))


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def slogdet(a: Any) -> SlogdetResult:
    """(sign, log|det|); the sign has no gradient."""
    a = as_tensor(a)
    return SlogdetResult(P.det_sign(a), P.logabsdet(a))


def solve(a: Any, b: Any) -> Tensor:
    """x with a @ x = b; a 1-D b is one right-hand side (NumPy 2's rule)."""
    a, b = as_tensor(a), as_tensor(b)
    if b.ndim == 1:
        out = P.solve(a, api.reshape(b, (-1, 1)))
        return api.reshape(out, out.shape[:-1])
    return P.solve(a, b)


def cholesky(a: Any) -> Tensor:
    return P.cholesky(as_tensor(a))


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


def eigh(a: Any, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices. The gradient is that of
    the symmetric matrix: it is symmetrized, and assumes distinct eigenvalues."""
    if UPLO != "L":
        raise NotImplementedError("eigh: only UPLO='L'")
    a = as_tensor(a)
    return EighResult(P.eigh_values(a), P.eigh_vectors(a))


def eigvalsh(a: Any) -> Tensor:
    return P.eigh_values(as_tensor(a))


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """The thin SVD (U, S, Vh) (full_matrices=False; the full one has no unique gradient), or
    the singular values with compute_uv=False."""
    a = as_tensor(a)
    if not compute_uv:
        return P.svd(a, part="s")
    if full_matrices and a.shape[-1] != a.shape[-2]:
        raise NotImplementedError("svd: only full_matrices=False (or square matrices)")
    return SVDResult(*(P.svd(a, part=p) for p in ("u", "s", "vh")))


def pinv(a: Any) -> Tensor:
    return P.pinv(as_tensor(a))


@api.torch_names
def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """NumPy's norm: vector p-norms (ord None/2, 1, inf, -inf, 0, any p) over one axis, and
    matrix norms ("fro", "nuc", 1, -1, 2, -2, inf, -inf) over two."""
    x = as_tensor(x)
    if axis is None and (ord is None or x.ndim == 1):
        axes = tuple(range(x.ndim))
        if ord is not None:
            return _vector_norm(x, ord, axes, keepdims)
        return P.sqrt(api.sum(x * x, axes, keepdims))
    axes = (axis,) if isinstance(axis, int) else tuple(range(x.ndim)) if axis is None else axis
    axes = tuple(a % x.ndim for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, 2 if ord is None else ord, axes, keepdims)
    if len(axes) != 2:
        raise ShapeError(f"norm: axis {axis} must name one or two axes of {x.shape}")
    if ord in (None, "fro"):
        return P.sqrt(api.sum(x * x, axes, keepdims))
    if ord in (1, -1, math.inf, -math.inf):
        summed, other = (axes[0], axes[1]) if ord in (1, -1) else (axes[1], axes[0])
        inner = api.sum(P.abs(x), summed, keepdims=True)
        pick = api.max if ord > 0 else api.min
        out = pick(inner, other, keepdims=True)
        return out if keepdims else api.squeeze(out, axes)
    if ord in (2, -2, "nuc"):
        sv = svd(_last_two(x, axes), compute_uv=False)
        out = api.sum(sv, -1) if ord == "nuc" else (api.max if ord == 2 else api.min)(sv, -1)
        kept = tuple(1 if a in axes else d for a, d in enumerate(x.shape))
        return api.reshape(out, kept) if keepdims else out
    raise ValueError(f"norm: invalid ord {ord!r} for matrices")


def _last_two(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    rest = [a for a in range(x.ndim) if a not in axes]
    return api.transpose(x, [*rest, *axes])


def _vector_norm(x: Tensor, ord: Any, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    a = P.abs(x)
    if ord == math.inf:
        return api.max(a, axes, keepdims)
    if ord == -math.inf:
        return api.min(a, axes, keepdims)
    if ord == 0:
        return api.sum((a != 0.0).astype(x.dtype), axes, keepdims)
    if ord == 1:
        return api.sum(a, axes, keepdims)
    if ord == 2:
        return P.sqrt(api.sum(x * x, axes, keepdims))
    return api.sum(a ** float(ord), axes, keepdims) ** (1.0 / ord)


# np.linalg.<name>(tensor) dispatches here
api._FUNCTIONS.update({getattr(np.linalg, name): globals()[name] for name in __all__})

"""Contractions and linear algebra: matrix products, einsum, and numpy.linalg's functions
(batched over leading axes)."""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable

import numpy as np

from tracegrad.core.errors import LinAlgError
from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, Primitive


def _matmul_rule(a, b):
    mismatch = ValueError(f"{a.shape} @ {b.shape}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise mismatch
    try:
        batch = shapes.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise mismatch from None
    return (*batch, a.shape[-2], b.shape[-1]), shapes.result_type(a.dtype, b.dtype)


def _matmul_grad_b(g, out, a, b):
    """A stack of rows times one matrix (every Linear on (N, T, D)): one GEMM over all rows, not
    one per stack member and a sum: OpenBLAS wakes its threads for every call, and one large
    product runs at a higher rate than many small ones."""
    a = conjugated(a)
    if b.ndim == 2 and a.ndim > 2:
        a = reshape(a, shape=(math.prod(a.shape[:-1]), a.shape[-1]))
        g = reshape(g, shape=(a.shape[0], g.shape[-1]))
    elif not (b.ndim == 2 == a.ndim):
        return sum_to(matmul(mT(a), g), b.shape)
    if _column_major(b):  # `x @ W.T`: (g.T @ x).T, so that W's gradient is laid out as W is
        return mT(matmul(mT(g), a))
    return matmul(mT(a), g)


def _column_major(x) -> bool:
    """An eager matrix stored by columns (the `W.T` view of a row-major weight). A gradient
    given its input's layout is what PyTorch's autograd promises: an optimizer's update of a
    parameter and a gradient laid out differently walks one of them across rows, several
    times slower than the product that saved the transpose. Traced values have no layout."""
    if getattr(x, "is_symbolic", True):  # traced, or only a shape and dtype (not saved)
        return False
    flags = x.numpy().flags
    return flags.f_contiguous and not flags.c_contiguous


# complex operands: g @ b^H and a^H @ g (PyTorch's convention)
matmul = Primitive("matmul", np.matmul, _matmul_rule,
                   (lambda g, out, a, b: sum_to(matmul(g, mT(conjugated(b))), a.shape),
                    _matmul_grad_b),
                   "in", kind=Kind.CONTRACTION, complex_grad=True)  # fmt: skip


def _linear_rule(x, w, *b):
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"input {x.shape} and weight {w.shape}; expected (..., in_features) "
                         "and (out_features, in_features)")  # fmt: skip
    shape = (*x.shape[:-1], w.shape[0])
    try:
        shape = shapes.broadcast_shapes(shape, b[0].shape) if b else shape
    except ValueError:
        raise ValueError(f"bias {b[0].shape} for results of shape {shape}") from None
    return shape, shapes.result_type(x.dtype, w.dtype, *(v.dtype for v in b))


def _linear(x, w, *b):
    """x @ w.T (+ b): a stack of rows as one GEMM (NumPy's matmul runs one per matrix of the
    stack), the bias added in place where it does not broadcast the result."""
    rows = x.reshape(-1, x.shape[-1]) if x.ndim > 2 else x
    y = np.matmul(rows, w.T)
    y = y.reshape(*x.shape[:-1], w.shape[0]) if x.ndim > 2 else y
    if not b:
        return y
    bias = b[0].shape  # a row of the outputs' width first: np.broadcast_shapes costs microseconds
    in_place = bias in ((y.shape[-1],), ()) or np.broadcast_shapes(y.shape, bias) == y.shape
    return np.add(y, b[0], out=y) if in_place else y + b[0]


def _linear_vjp(i, g, out, x, w, *b):
    """The input's and the weight's cotangents as single GEMMs over all rows; the weight's laid
    out as the weight is, which its optimizer's update then walks in order."""
    if i == 2:
        return sum_to(g, b[0].shape)
    rows = g if g.ndim == 2 else reshape(g, shape=(math.prod(g.shape[:-1]), g.shape[-1]))
    if i == 0:
        dx = matmul(rows, w)
        return dx if x.ndim == 2 else reshape(dx, shape=x.shape)
    xs = x if x.ndim == 2 else reshape(x, shape=(rows.shape[0], x.shape[-1]))
    return matmul(mT(rows), xs)


def _linear_parts(x, w, *b):
    y = x @ w.T
    return y + b[0] if b else y


# PyTorch's nn.functional.linear: one op eagerly (one tape node, two or three products back),
# traced its parts, a transposed view, a product and a sum, which the fuser joins
linear = Primitive("linear", _linear, _linear_rule, _linear_vjp, "in", kind=Kind.CONTRACTION,
                   raises=False, decompose=_linear_parts)  # fmt: skip


def _einsum_parts(spec: str) -> tuple[list[str], str]:
    ins, out = spec.split("->")
    return ins.split(","), out


def _einsum_rule(*xs, spec):
    ins, out = _einsum_parts(spec)
    sizes: dict[str, int] = {}
    for subs, x in zip(ins, xs, strict=True):
        if len(subs) != x.ndim:
            raise ValueError(f"einsum '{spec}': operand of shape {x.shape} for '{subs}'")
        for c, d in zip(subs, x.shape, strict=True):
            if sizes.setdefault(c, d) != d:
                raise ValueError(f"einsum '{spec}': index '{c}' is {sizes[c]} and {d}")
    return tuple(sizes[c] for c in out), np.result_type(*(x.dtype for x in xs))


def _einsum_vjp(i, g, out, *xs, spec):
    """The gradient of operand i: the cotangent contracted with the other operands; an index
    only operand i has (summed away alone) comes back by broadcasting."""
    ins, result = _einsum_parts(spec)
    mine = ins[i]
    if len(set(mine)) != len(mine):
        raise NotImplementedError(f"einsum '{spec}': no gradient through a repeated index")
    others = ins[:i] + ins[i + 1 :]
    known = set(result) | set("".join(others))
    kept = "".join(c for c in mine if c in known)
    rest = [conjugated(x) for x in (*xs[:i], *xs[i + 1 :])]
    gi = einsum(g, *rest, spec=",".join([result, *others]) + "->" + kept)
    if kept == mine:
        return gi
    gi = reshaped(gi, tuple(d if c in known else 1 for c, d in zip(mine, xs[i].shape, strict=True)))
    return broadcast_to(gi, shape=xs[i].shape)


einsum = Primitive("einsum", lambda *xs, spec: np.einsum(spec, *xs, optimize=len(xs) > 2),
                   _einsum_rule, _einsum_vjp, "in", kind=Kind.CONTRACTION,
                   complex_grad=True)  # fmt: skip


def _square_rule(x):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"expected (..., n, n) square matrices, got {x.shape}")
    return x.shape, shapes.floating(x)[1]


def _det_rule(x):
    return x.shape[:-2], _square_rule(x)[1]


def _solve_rule(a, b):
    _square_rule(a)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: a {a.shape} and b {b.shape}")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, *b.shape[-2:]), np.result_type(a.dtype, b.dtype)


def _matrices(g):
    """A batch of numbers as a batch of 1x1 matrices, to scale matrices."""
    return reshaped(g, (*g.shape, 1, 1))


def _eigh_vectors_vjp(g, out, x):
    """v (F * v^T g) v^T, F_ij = 1 / (w_j - w_i) off the diagonal; symmetrized (x is read as a
    symmetric matrix)."""
    w = eigh_values(x)
    n = x.shape[-1]
    off = np.ones((n, n), x.dtype) - np.eye(n, dtype=x.dtype)
    wi = reshaped(w, (*w.shape, 1))
    gap = mT(wi) - wi + np.eye(n, dtype=x.dtype)
    inner = matmul(mT(out), g) * off / gap
    return _symmetric(matmul(matmul(out, inner), mT(out)))


def _symmetric(a):
    return (a + mT(a)) * 0.5


def _cholesky_vjp(g, out, x):
    """Murray's rule: L^-T phi(L^T g) L^-1, symmetrized; phi keeps the lower triangle with the
    diagonal halved."""
    n = x.shape[-1]
    phi = np.tril(np.ones((n, n), out.dtype)) - 0.5 * np.eye(n, dtype=out.dtype)
    li = inv(out)
    return _symmetric(matmul(matmul(mT(li), matmul(mT(out), g) * phi), li))


def _pinv_vjp(g, out, x, rcond=1e-15):
    """From Golub and Pereyra's differential of the pseudo-inverse P of A:
    dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P."""
    m, n = x.shape[-2:]
    eye_m, eye_n = np.eye(m, dtype=out.dtype), np.eye(n, dtype=out.dtype)
    pt, gt = mT(out), mT(g)
    return (
        -matmul(matmul(pt, g), pt)
        + matmul(matmul(eye_m - matmul(x, out), gt), matmul(out, pt))
        + matmul(matmul(pt, out), matmul(gt, eye_n - matmul(out, x)))
    )


def _svd_rule(x, part, full=False):
    m, n = x.shape[-2:]
    k, batch, dtype = builtins.min(m, n), x.shape[:-2], shapes.floating(x)[1]
    u, vh = (*batch, m, m if full else k), (*batch, n if full else k, n)
    if part == "s":  # real, also of complex matrices
        return (*batch, k), shapes.real_dtype(dtype)
    return {"u": u, "vh": vh}[part], dtype


def _svd(x, part, full=False):
    u, s, vh = np.linalg.svd(x, full_matrices=full)
    return {"u": u, "s": s, "vh": vh}[part]


def _svd_vjp(g, out, x, part, full=False):
    """Townsend's rules (2016) for the thin SVD x = U S V^T, one output's share at a time;
    F_ij = 1 / (s_j^2 - s_i^2) off the diagonal (distinct singular values assumed). Of the full
    SVD, U's columns (Vh's rows) past the k-th, a basis of a complement, get no gradient, as in
    PyTorch."""
    u, s, vh = (svd(x, part=p, full=full) for p in ("u", "s", "vh"))
    if full:
        k, lead = s.shape[-1], (slice(None),) * (x.ndim - 2)
        cols, rows = (*lead, slice(None), slice(0, k)), (*lead, slice(0, k), slice(None))
        u, vh = getitem(u, template=cols), getitem(vh, template=rows)
        g = g if part == "s" else getitem(g, template=cols if part == "u" else rows)
    v = mT(vh)
    if part == "s":
        return matmul(u * reshaped(g, (*g.shape[:-1], 1, g.shape[-1])), vh)
    k = s.shape[-1]
    s_row = reshaped(s, (*s.shape[:-1], 1, k))
    s2 = s_row * s_row
    off = np.ones((k, k), x.dtype) - np.eye(k, dtype=x.dtype)
    f = off / (s2 - mT(s2) + np.eye(k, dtype=x.dtype))
    if part == "u":
        j = f * (matmul(mT(u), g) - matmul(mT(g), u))
        rest = g - matmul(u, matmul(mT(u), g))
        return matmul(matmul(u, j) * s_row + rest / s_row, vh)
    gv = mT(g)
    j = f * (matmul(vh, gv) - matmul(mT(gv), v))
    rest = mT(gv) - matmul(matmul(mT(gv), v), vh)
    return matmul(u, matmul(j, vh) * mT(s_row) + rest / mT(s_row))


def _qr_rule(x, part, complete=False):
    m, n = x.shape[-2:]
    k, batch, dtype = builtins.min(m, n), x.shape[:-2], shapes.floating(x)[1]
    k = m if complete else k
    return {"q": (*batch, m, k), "r": (*batch, k, n)}[part], dtype


def _qr(x, part, complete=False):
    q, r = np.linalg.qr(x, mode="complete" if complete else "reduced")
    return {"q": q, "r": r}[part]


def _tall_qr_grad(q, r, gq, gr):
    """The cotangent of A = QR with m >= n (R square, invertible), given Q's and R's (None for
    none): (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q, copyltu(M) = tril(M) + tril(M, -1)^T
    (Liao, Liu, Wang and Xiang, 2019; PyTorch's and JAX's rule)."""
    k = r.shape[-1]
    lower, strict = np.tril(np.ones((k, k), r.dtype)), np.tril(np.ones((k, k), r.dtype), -1)
    terms = ([matmul(r, mT(gr))] if gr is not None else []) + (
        [-matmul(mT(gq), q)] if gq is not None else [])  # fmt: skip
    m = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    b = matmul(q, m * lower + mT(m * strict))
    b = b if gq is None else gq + b
    return mT(solve(r, mT(b)))  # b R^-T


def _qr_vjp(g, out, x, part, complete=False):
    """One output's share (Q's or R's) of the cotangent of the reduced QR. A wide matrix
    [X | Y] = Q [U | V] is X = QU, Y = QV: Y's cotangent is Q gV, X's the square rule's with
    Q's cotangent gQ + Y gV^T (Liao et al.'s split). The complete QR of a tall matrix has none
    (Q's last columns are any basis of a complement), as PyTorch's."""
    if complete and x.shape[-2] > x.shape[-1]:
        raise NotImplementedError(
            f"qr: mode='complete' of a tall matrix {x.shape} is not differentiable (as in "
            "PyTorch); use mode='reduced'"
        )
    q, r = (qr(x, part=p) for p in ("q", "r"))
    gq, gr = (g, None) if part == "q" else (None, g)
    m, n = x.shape[-2:]
    if m >= n:
        return _tall_qr_grad(q, r, gq, gr)
    left = (slice(None),) * (x.ndim - 1)
    u = getitem(r, template=(*left, slice(0, m)))
    if gr is None:
        widths = ((0, 0),) * (x.ndim - 1) + ((0, n - m),)  # Y's share is Q gV = 0
        return pad(_tall_qr_grad(q, u, gq, None), pad_width=widths, value=0)
    gu, gv = getitem(gr, template=(*left, slice(0, m))), getitem(gr, template=(*left, slice(m, n)))
    y = getitem(x, template=(*left, slice(m, n)))
    gx = _tall_qr_grad(q, u, matmul(y, mT(gv)), gu)
    return concatenate(gx, matmul(q, gv), axis=x.ndim - 1)


def _lapack(f: Callable, name: str, why: Callable | None = None) -> Callable:
    """f, raising `LinAlgError` (PyTorch's `torch.linalg.LinAlgError`) where LAPACK fails, with
    PyTorch's message: `why(matrix)`, the reason a matrix fails (None where it does not), of the
    first matrix of the batch that fails; else NumPy's reason."""

    def impl(x, *args, **attrs):
        try:
            return f(x, *args, **attrs)
        except np.linalg.LinAlgError as e:
            raise LinAlgError(f"{name}: {_failure(np.asarray(x), why) or e}") from None

    impl.__doc__ = f"{f.__name__}, raising LinAlgError as PyTorch's {name}."
    return impl


def _failure(x: np.ndarray, why: Callable | None) -> str | None:
    """Why the first failing matrix of x fails, naming its place in a batch as PyTorch does."""
    if why is None or x.ndim < 2:
        return None
    for b, matrix in enumerate(x.reshape(-1, *x.shape[-2:])):
        reason = why(matrix)
        if reason is not None:
            return f"(Batch element {b}): {reason}" if x.ndim > 2 else reason
    return None


def _singular(matrix: np.ndarray) -> bool:
    try:
        np.linalg.inv(matrix)
    except np.linalg.LinAlgError:
        return True
    return False


def _zero_pivot(matrix: np.ndarray) -> int | None:
    """The first zero pivot (1-based) of Gaussian elimination with partial pivoting, as LAPACK's
    getrf reports it; None where rounding left none exactly zero."""
    a = matrix.astype(np.result_type(matrix.dtype, np.float64))
    for j in range(a.shape[-1]):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        if a[p, j] == 0:
            return j + 1
        a[[j, p]] = a[[p, j]]
        a[j + 1 :] -= np.outer(a[j + 1 :, j] / a[j, j], a[j])
    return None


def _not_invertible(matrix: np.ndarray) -> str | None:
    if not _singular(matrix):
        return None
    k = _zero_pivot(matrix)
    start = f"The diagonal element {k} is zero, the inversion" if k else "The inversion"
    return f"{start} could not be completed because the input matrix is singular."


def _not_positive_definite(matrix: np.ndarray) -> str | None:
    for k in range(1, matrix.shape[-1] + 1):
        try:
            np.linalg.cholesky(matrix[:k, :k])
        except np.linalg.LinAlgError:
            return ("The factorization could not be completed because the input is not "
                    f"positive-definite (the leading minor of order {k} is not "
                    "positive-definite).")  # fmt: skip
    return None


inv = Primitive("inv", _lapack(np.linalg.inv, "linalg.inv", _not_invertible), _square_rule,
                (lambda g, out, x: -matmul(matmul(mT(out), g), mT(out)),), "out")  # fmt: skip


def _cofactors(x):
    """det(x) inv(x)^T, det's derivative, also at a singular matrix (PyTorch's; inv raised):
    there from the SVD x = U S V^T, det(U V^T) U diag(prod of the s_j, j != i) V^T."""
    try:
        return np.linalg.det(x)[..., None, None] * np.swapaxes(np.linalg.inv(x), -1, -2)
    except np.linalg.LinAlgError:
        pass
    u, s, vt = np.linalg.svd(x)
    others = np.stack([np.prod(np.delete(s, i, -1), -1) for i in range(s.shape[-1])], -1)
    sign = np.linalg.det(u) * np.linalg.det(vt)
    return sign[..., None, None] * np.matmul(u * others[..., None, :], vt)


def _cofactors_vjp(g, out, x):
    """d(det(A) M) = <G, M> C - C G^T M, M = inv(A)^T, C the cofactors (a second derivative at a
    singular matrix raises, as inv)."""
    m = mT(inv(x))
    return sum_to(g * m, (*x.shape[:-2], 1, 1)) * out - matmul(matmul(out, mT(g)), m)


cofactors = Primitive("cofactors", _cofactors, _square_rule, (_cofactors_vjp,), "in+out")
det = Primitive("det", np.linalg.det, _det_rule,
                (lambda g, out, x: _matrices(g) * cofactors(x),), "in", raises=False)  # fmt: skip
logabsdet = Primitive("logabsdet", lambda x: np.linalg.slogdet(x)[1], _det_rule,
                      (lambda g, out, x: _matrices(g) * mT(inv(x)),), "in",
                      raises=False)  # fmt: skip
det_sign = Primitive("det_sign", lambda x: np.linalg.slogdet(x)[0], _det_rule, raises=False)


def _solve_failure(matrix: np.ndarray) -> str | None:
    return "The solver failed because the input matrix is singular." if _singular(matrix) else None


# complex operands: -A^-H g X^H and A^-H g (PyTorch's convention)
solve = Primitive("solve", _lapack(np.linalg.solve, "torch.linalg.solve", _solve_failure),
                  _solve_rule,
                  (lambda g, out, a, b:
                   sum_to(-matmul(solve(mT(conjugated(a)), g), mT(conjugated(out))), a.shape),
                   lambda g, out, a, b: sum_to(solve(mT(conjugated(a)), g), b.shape)),
                  "in+out", complex_grad=True)  # fmt: skip
cholesky = Primitive("cholesky",
                     _lapack(np.linalg.cholesky, "linalg.cholesky", _not_positive_definite),
                     _square_rule, (_cholesky_vjp,), "out")  # fmt: skip


def _eigh_values_vjp(g, out, x):
    """v diag(g) v^T, symmetrized."""
    v = eigh_vectors(x)
    return _symmetric(matmul(v * reshaped(g, (*g.shape[:-1], 1, g.shape[-1])), mT(v)))


# Higham's scaling and squaring with the degree-13 Pade approximant (SIAM J. Matrix Anal. Appl.
# 26(4), 2005): its coefficients, and the 1-norm up to which it needs no scaling
_PADE_13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
            129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
            40840800.0, 960960.0, 16380.0, 182.0, 1.0)  # fmt: skip
_THETA_13 = 5.371920351148152


def _matrix_exp(x: np.ndarray) -> np.ndarray:
    """exp of each square matrix, in float64 (complex128) whatever x's precision: one scaling
    for the batch, by its largest 1-norm."""
    a = x.astype(np.result_type(x.dtype, np.float64))
    norm = float(np.abs(a).sum(-2).max()) if a.size else 0.0
    squarings = max(0, math.ceil(math.log2(norm / _THETA_13))) if norm > _THETA_13 else 0
    a = a / 2.0**squarings
    b, eye = _PADE_13, np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2
             + b[1] * eye)  # fmt: skip
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = np.linalg.solve(v - u, v + u) if a.size else a
    for _ in range(squarings):
        r = r @ r
    return r.astype(x.dtype)


def _matrix_exp_vjp(g, out, x):
    """The Frechet derivative of exp at A^H applied to g: the upper right block of
    exp([[A^H, g], [0, A^H]]) (Mathias 1996), by this op again, so it differentiates twice."""
    n, last = x.shape[-1], x.ndim - 1
    ah = mT(conjugated(x))
    top = concatenate(ah, g, axis=last)
    widths = ((0, 0),) * (x.ndim - 2) + ((0, 0), (n, 0))
    block = concatenate(top, pad(ah, pad_width=widths, value=0), axis=last - 1)
    whole = matrix_exp(block)
    left = (slice(None),) * (x.ndim - 2)
    return getitem(whole, template=(*left, slice(0, n), slice(n, 2 * n)))


matrix_exp = Primitive("matrix_exp", _matrix_exp, _square_rule, (_matrix_exp_vjp,), "in",
                       complex_grad=True)  # fmt: skip
eigh_values = Primitive("eigh_values", _lapack(np.linalg.eigvalsh, "linalg.eigh"),
                        lambda x: (x.shape[:-1], _square_rule(x)[1]), (_eigh_values_vjp,),
                        "in")  # fmt: skip
eigh_vectors = Primitive("eigh_vectors", _lapack(lambda x: np.linalg.eigh(x)[1], "linalg.eigh"),
                         _square_rule,
                         (_eigh_vectors_vjp,), "in+out")  # fmt: skip
svd = Primitive("svd", _lapack(_svd, "linalg.svd"), _svd_rule, (_svd_vjp,), "in")
qr = Primitive("qr", _lapack(_qr, "linalg.qr"), _qr_rule, (_qr_vjp,), "in")
pinv = Primitive("pinv", _lapack(np.linalg.pinv, "linalg.pinv"),
                 lambda x, rcond=1e-15: ((*x.shape[:-2], x.shape[-1], x.shape[-2]),
                                         shapes.floating(x)[1]),
                 (_pinv_vjp,), "in+out")  # fmt: skip


def _eig_rule(x, part):
    shape, dtype = _square_rule(x)
    return (shape[:-1] if part == "values" else shape), shapes.complex_dtype(dtype)


def _eig(x, part):
    """The eigenvalues or the eigenvectors (columns, of norm 1, as LAPACK's geev gives them)
    of general square matrices, complex also of real ones (PyTorch's). Both parts come from the
    same geev call, so they pair up in the same order."""
    w, v = np.linalg.eig(x)
    return (w if part == "values" else v).astype(_eig_rule(x, part)[1], copy=False)


def _eig_values_vjp(g, out, x, part):
    """PyTorch's `linalg_eig_backward` of the eigenvalues: V^-H diag(gL) V^H; of a real
    matrix, its real part (the cotangent of a real input)."""
    v = eig(x, part="vectors")
    vh = mT(conj(v))
    gx = solve(vh, reshaped(g, (*g.shape, 1)) * vh)
    return real(gx) if x.dtype.kind != "c" else gx


def _eig_vectors_vjp(g, out, x, part):
    """PyTorch's `linalg_eig_backward` of the eigenvectors V (L the eigenvalues):
    V^-H ((V^H gV - V^H V diag(re diag(V^H gV))) / E*) V^H, E_ij = L_j - L_i off the diagonal,
    whose diagonal is 0 here (PyTorch's puts the eigenvalues' cotangent there, which their own
    rule adds). Each eigenvector is determined up to a phase only: a loss that depends on the
    phases (imaginary diagonal of V^H gV) raises, as PyTorch's."""
    v, w = out, eig(x, part="values")
    n = x.shape[-1]
    eye = np.eye(n, dtype=out.dtype)
    vh = mT(conj(v))
    vhgv = matmul(vh, g)
    _check_gauge(vhgv, eye)
    scaled = matmul(v, real(vhgv) * eye.real)  # V diag(re diag(V^H gV))
    wc = conj(w)
    gap = reshaped(wc, (*w.shape[:-1], 1, n)) - reshaped(wc, (*w.shape, 1)) + eye
    inner = (vhgv - matmul(vh, scaled)) / gap * (1.0 - eye.real)
    gx = solve(vh, matmul(inner, vh))
    return real(gx) if x.dtype.kind != "c" else gx


def _check_gauge(vhgv, eye) -> None:
    """Eagerly, PyTorch's check that a loss does not depend on the eigenvectors' phases."""
    if getattr(vhgv, "is_symbolic", True):
        return
    diagonal = np.diagonal(np.asarray(vhgv.numpy()), axis1=-2, axis2=-1).imag
    if not np.allclose(diagonal, 0.0, rtol=1e-2, atol=1e-2):
        raise RuntimeError(
            "linalg_eig_backward: The eigenvectors in the complex case are specified up to "
            "multiplication by e^{i phi}. The specified loss function depends on this quantity, "
            "so it is ill-defined."
        )


def _eig_vjp(g, out, x, part):
    return (_eig_values_vjp if part == "values" else _eig_vectors_vjp)(g, out, x, part)


eig = Primitive("eig", _lapack(_eig, "linalg.eig"), _eig_rule, (_eig_vjp,), "in+out",
                complex_grad=True)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import conj, conjugated, real  # noqa: E402
from tracegrad.core.ops.views import (  # noqa: E402
    broadcast_to,
    concatenate,
    getitem,
    mT,
    pad,
    reshape,
    reshaped,
    sum_to,
)

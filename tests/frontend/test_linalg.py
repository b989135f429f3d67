"""PyTorch's top-level linear algebra spellings (det, logdet, slogdet, the deprecated cholesky
with `upper` positional) and cdist (p = 2 by a matrix product or by differences, any p):
values and gradients against PyTorch in float64 where installed, else against NumPy and
finite differences; a zero distance's gradient is 0; traced against eager."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad, on_pytorch, traced_matches_eager
from tracegrad.compiler import lowering

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(13)
SQ = R.standard_normal((2, 3, 3))
SPD = SQ @ SQ.transpose(0, 2, 1) + np.eye(3)
X1, X2 = R.standard_normal((2, 6, 4)), R.standard_normal((2, 5, 4))
MANY = R.standard_normal((30, 3))  # past 25 rows: the matrix product's mode
LOW, RHS = np.linalg.cholesky(SPD), R.standard_normal((2, 3, 2))  # a factor, right-hand sides

CASES = {  # name: (call given the library, arrays)
    "det": (lambda lib, a: lib.det(a), [SQ]),
    "logdet": (lambda lib, a: lib.logdet(a), [SPD]),
    "logdet method": (lambda lib, a: a.logdet(), [SPD]),
    "slogdet sign": (lambda lib, a: lib.slogdet(a)[0], [SQ]),
    "slogdet log": (lambda lib, a: lib.slogdet(a).logabsdet, [SQ]),
    "cholesky": (lambda lib, a: lib.cholesky(a), [SPD]),
    "cholesky upper": (lambda lib, a: lib.cholesky(a, True), [SPD]),
    "cholesky_solve": (lambda lib, b, f: lib.cholesky_solve(b, f), [RHS, LOW]),
    "cholesky_solve upper": (lambda lib, b, f: lib.cholesky_solve(b, f, True),
                             [RHS, LOW.transpose(0, 2, 1)]),
    "cholesky_solve method": (lambda lib, b, f: b.cholesky_solve(f), [RHS, LOW]),
    "cholesky_inverse": (lambda lib, f: lib.cholesky_inverse(f), [LOW]),
    "matrix_exp": (lambda lib, a: lib.linalg.matrix_exp(a), [SQ]),
    "matrix_exp scaled": (lambda lib, a: lib.matrix_exp(3.0 * a), [SQ]),  # squarings
    "matrix_exp method": (lambda lib, a: a.matrix_exp(), [SQ * 0.1]),
    "linalg.qr": (lambda lib, a: lib.stack(list(lib.linalg.qr(a))), [SQ]),
    "linalg.qr tall": (lambda lib, a: lib.linalg.qr(a).Q @ lib.linalg.qr(a).R.exp(), [X1]),
    "linalg.qr wide q": (lambda lib, a: lib.linalg.qr(a.mT)[0], [X1]),
    "linalg.qr wide r": (lambda lib, a: lib.linalg.qr(a.mT, "complete")[1], [X1]),
    "cdist": (lambda lib, a, b: lib.cdist(a, b), [X1, X2]),
    "cdist many": (lambda lib, a, b: lib.cdist(a, b), [MANY, MANY[:7] + 0.1]),
    "cdist mm": (lambda lib, a, b: lib.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
                 [X1, X2]),
    "cdist no mm": (lambda lib, a, b: lib.cdist(a, b, 2.0, "donot_use_mm_for_euclid_dist"),
                    [MANY, MANY[:4] + 0.2]),
    "cdist p=1": (lambda lib, a, b: lib.cdist(a, b, p=1), [X1, X2]),
    "cdist p=3": (lambda lib, a, b: lib.cdist(a, b, 3.0), [X1, X2]),
    "cdist p=0.5": (lambda lib, a, b: lib.cdist(a, b, 0.5), [X1, X2]),
    "cdist p=inf": (lambda lib, a, b: lib.cdist(a, b, math.inf), [X1, X2]),
    "cdist broadcast": (lambda lib, a, b: lib.cdist(a, b[0]), [X1, X2]),
}  # fmt: skip


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_match_torch(name):
    call, arrays = CASES[name]
    ours = [ttorch.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    b = on_pytorch(lambda: call(torch, *theirs))  # its cholesky is deprecated
    a = call(ttorch, *ours)
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
    if "sign" in name:  # no gradient (PyTorch's is zeros)
        return
    c = R.standard_normal(a.shape)
    (a * c).sum().backward()
    (b * torch.tensor(c)).sum().backward()
    for x, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-10)


# cholesky reads one triangle, and its gradient is that of the symmetric matrix (as PyTorch's),
# which finite differences of single elements do not see
@pytest.mark.parametrize("name", [n for n in CASES if "sign" not in n and "chol" not in n])
def test_gradients_match_finite_differences(name):
    call, arrays = CASES[name]
    check_grad(lambda *xs: call(tg, *xs), *arrays, tol=1e-5)


def test_cholesky_solve_solves_by_the_factor_with_the_gradients_of_the_solution():
    """A X = B from A's Cholesky factor: the solution, inv(A), and through the factor of
    a a^T + I (a true function of a) gradients against finite differences; the factor's other
    triangle is not read."""
    a = SPD + 0.0
    np.testing.assert_allclose(tg.cholesky_solve(tg.tensor(RHS), tg.tensor(LOW)).numpy(),
                               np.linalg.solve(a, RHS), rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(tg.cholesky_inverse(tg.tensor(LOW[0])).numpy(),
                               np.linalg.inv(a[0]), rtol=1e-12)  # fmt: skip
    garbage = LOW + np.triu(R.standard_normal(LOW.shape), 1)
    np.testing.assert_allclose(tg.cholesky_solve(tg.tensor(RHS), tg.tensor(garbage)).numpy(),
                               np.linalg.solve(a, RHS), rtol=1e-12)  # fmt: skip
    eye = np.eye(3)

    def solve(m, b):
        factor = tg.linalg.cholesky(m @ m.mT + tg.tensor(eye))
        return tg.cholesky_solve(b, factor) + tg.cholesky_inverse(factor).sum(-1, keepdim=True)

    check_grad(solve, SQ, RHS)


def test_matrix_exp_known_values_second_derivatives_and_traced():
    """exp of a rotation generator is the rotation, of a diagonal the exponentials; the gradient
    is the op again (of a block matrix), so second derivatives check by finite differences; a
    traced step gives eager's values and gradients."""
    t = 0.7
    rotation = tg.linalg.matrix_exp(tg.tensor(np.array([[0.0, -t], [t, 0.0]]))).numpy()
    np.testing.assert_allclose(rotation, [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]],
                               rtol=1e-14, atol=1e-15)  # fmt: skip
    big = np.diag([30.0, -2.0, 0.5])  # past the Pade approximant's range: squarings
    np.testing.assert_allclose(tg.linalg.matrix_exp(tg.tensor(big)).numpy(),
                               np.diag(np.exp([30.0, -2.0, 0.5])), rtol=1e-13)  # fmt: skip
    assert tg.linalg.matrix_exp(tg.tensor(SQ.astype(np.float32))).dtype == np.float32
    check_grad(
        lambda a: tg.autograd.grad(tg.linalg.matrix_exp(a.requires_grad_()).sum(), a,
                                   create_graph=True)[0],
        SQ[0],
    )  # fmt: skip
    traced_matches_eager(tg.linalg.matrix_exp, SQ, backend="numpy")


def test_the_gradient_of_det_at_a_singular_matrix_is_its_cofactor_matrix():
    """det is a polynomial: at a singular matrix its gradient is the cofactor matrix (0 at rank
    n - 2), where det * inv(A)^T raised; second derivatives too (the cofactors' rule)."""
    rank_2 = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]
    rank_1 = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 6.0, 9.0]]
    check_grad(tg.det, np.array([rank_2, rank_1, SQ[0]]))
    check_grad(tg.det, np.array([[1.0, 2.0], [2.0, 4.0]]))
    check_grad(tg.det, np.array([[0.0]]))
    check_grad(
        lambda a: tg.autograd.grad(tg.det(a.requires_grad_()).sum(), a, create_graph=True)[0], SQ
    )


def test_values_without_torch():
    np.testing.assert_allclose(tg.det(tg.tensor(SQ)).numpy(), np.linalg.det(SQ))
    np.testing.assert_allclose(tg.logdet(tg.tensor(SPD)).numpy(), np.linalg.slogdet(SPD)[1])
    flipped = tg.tensor(SPD[0] * np.array([[-1.0], [1.0], [1.0]]))  # det < 0: nan, as PyTorch
    assert math.isnan(tg.logdet(flipped).item())
    assert tg.logdet(tg.tensor(np.zeros((2, 2)))).item() == -math.inf
    np.testing.assert_allclose(tg.cholesky(tg.tensor(SPD), True).numpy(),
                               np.linalg.cholesky(SPD).transpose(0, 2, 1))  # fmt: skip
    want = np.linalg.norm(X1[:, :, None] - X2[:, None], axis=-1)
    for mode in ("use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
        got = tg.cdist(tg.tensor(X1), tg.tensor(X2), compute_mode=mode).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12)
    want = np.abs(X1[:, :, None] - X2[:, None]).max(-1)
    np.testing.assert_allclose(tg.cdist(tg.tensor(X1), tg.tensor(X2), math.inf).numpy(), want)
    with pytest.raises(tg.ShapeError, match="cdist"):
        tg.cdist(tg.tensor(X1), tg.tensor(X2[..., :3]))


def test_qr_without_torch():
    for a in (X1, X1.transpose(0, 2, 1), SQ):
        q, r = tg.linalg.qr(tg.tensor(a))
        k = min(a.shape[-2:])
        eye = np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k))
        np.testing.assert_allclose((q.mT @ q).numpy(), eye, atol=1e-14)
        np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-14)
        assert np.array_equal(r.numpy(), np.triu(r.numpy()))
        np.testing.assert_allclose(r.numpy(), np.linalg.qr(a)[1], atol=1e-14)  # LAPACK's signs
    assert tg.linalg.qr(tg.tensor(SQ), mode="r").Q.shape == (0,)
    x = tg.tensor(X1, requires_grad=True)
    with pytest.raises(NotImplementedError, match="complete"):  # its values: below
        tg.linalg.qr(x, mode="complete").Q.sum().backward()
    assert ttorch.linalg.qr is tg.linalg.qr


@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"])
def test_a_zero_distance_has_a_zero_gradient(mode):
    x = tg.tensor(MANY[:4], requires_grad=True)
    tg.cdist(x, x, compute_mode=mode).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    d = MANY[:4, None] - MANY[None, :4]
    n = np.linalg.norm(d, axis=-1)
    want = 2 * (d / np.where(n > 0, n, 1)[..., None]).sum(1)  # x_i in rows and in columns
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(a, b, s):
        q, r = tg.linalg.qr(a.mT)
        return (tg.cdist(a, b).sum(-1) + tg.cdist(a, b, 1.0, "donot_use_mm_for_euclid_dist")
                .sum(-1) + tg.logdet(s @ s.mT + 1.0).unsqueeze(-1) + (q.sum(-2) * r.sum(-1))
                .sum(-1, keepdim=True))  # fmt: skip

    traced_matches_eager(f, X1, X2, SQ, backend=backend)


def test_pytorchs_older_svd_and_the_chain_and_vector_products():
    """`torch.svd` (U, S, V with V not transposed), `linalg.multi_dot`, `linalg.vecdot` and
    `linalg.diagonal` (the last two dims), which PyTorch code calls."""
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5)
    u, s, v = tg.svd(tg.tensor(a))
    np.testing.assert_allclose((u.numpy() * s.numpy()) @ v.numpy().T, a, atol=1e-12)
    assert u.shape == (4, 3) and v.shape == (3, 3) and ttorch.svd is tg.svd
    assert not tg.svd(tg.tensor(a), compute_uv=False).U.numpy().any()
    chain = tg.linalg.multi_dot([tg.tensor(a), tg.tensor(b), tg.tensor(c)])
    np.testing.assert_allclose(chain.numpy(), a @ b @ c)
    check_grad(lambda x, y, z: tg.linalg.multi_dot([x, y, z]), a, b, c)
    x, y = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(tg.linalg.vecdot(tg.tensor(x), tg.tensor(y)).numpy(),
                               (x * y).sum(-1))  # fmt: skip
    check_grad(lambda p, q: tg.linalg.vecdot(p, q, dim=0), y, y[::-1].copy())
    np.testing.assert_array_equal(tg.linalg.diagonal(tg.tensor(x)).numpy(),
                                  np.diagonal(x, axis1=-2, axis2=-1))  # fmt: skip


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_gradient_is_symmetric_for_either_triangle(uplo):
    """PyTorch's gradient of eigh is V (dL) V^T whichever triangle was read; the upper one's
    was the triangle's own (the off-diagonal doubled, the lower triangle zero)."""
    a = R.standard_normal((3, 3))
    w = np.array([0.5, -1.0, 2.0])
    x = tg.tensor(a, requires_grad=True)
    (tg.linalg.eigvalsh(x, UPLO=uplo) * tg.tensor(w)).sum().backward()
    v = np.linalg.eigh(a, UPLO=uplo)[1]
    np.testing.assert_allclose(x.grad.numpy(), (v * w) @ v.T, atol=1e-12)
    x.grad = None
    values, vectors = tg.linalg.eigh(x, UPLO=uplo)
    np.testing.assert_allclose(values.numpy(), np.linalg.eigvalsh(a, UPLO=uplo), atol=1e-12)
    (vectors[:, 0] ** 2).sum().backward()  # a unit vector: no gradient, in any triangle
    np.testing.assert_allclose(x.grad.numpy(), 0, atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 3)])
def test_full_svd_of_non_square_matrices_is_differentiable_through_its_thin_part(shape):
    """`torch.linalg.svd(A)` is the full SVD by default (it raised for a non-square A): U is
    m x m and Vh n x n, orthogonal; their extra columns and rows get no gradient, as in PyTorch,
    so a loss of the thin part has the thin SVD's gradient."""
    a = R.standard_normal(shape)
    m, n = shape[-2:]
    k = min(m, n)
    x = tg.tensor(a, requires_grad=True)
    u, s, vh = tg.linalg.svd(x)
    assert u.shape == (*shape[:-2], m, m) and vh.shape == (*shape[:-2], n, n)
    np.testing.assert_allclose(u.numpy() @ u.numpy().swapaxes(-1, -2),
                               np.broadcast_to(np.eye(m), u.shape), atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(vh.numpy().swapaxes(-1, -2) @ vh.numpy(),
                               np.broadcast_to(np.eye(n), vh.shape), atol=1e-12)  # fmt: skip
    thin = u.numpy()[..., :k] * s.numpy()[..., None, :] @ vh.numpy()[..., :k, :]
    np.testing.assert_allclose(thin, a, atol=1e-12)
    c_u, c_v = R.standard_normal(u.shape), R.standard_normal(vh.shape)
    ((u * tg.tensor(c_u)).sum() + (vh * tg.tensor(c_v)).sum() + s.sum()).backward()
    y = tg.tensor(a, requires_grad=True)
    ut, st, vht = tg.linalg.svd(y, full_matrices=False)
    signs_u = np.sign(np.sum(u.numpy()[..., :k] * ut.numpy(), axis=-2, keepdims=True))
    signs_v = np.swapaxes(signs_u, -1, -2)  # a column of U flips with its row of Vh
    loss = (ut * tg.tensor(c_u[..., :k] * signs_u)).sum() + st.sum()
    (loss + (vht * tg.tensor(c_v[..., :k, :] * signs_v)).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), atol=1e-10)


def test_complete_qr_of_a_tall_matrix_has_values_and_refuses_a_gradient():
    a = R.standard_normal((5, 3))
    x = tg.tensor(a, requires_grad=True)
    q, r = tg.linalg.qr(x, mode="complete")
    assert q.shape == (5, 5) and r.shape == (5, 3)
    np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=1e-12)
    np.testing.assert_allclose(q.numpy().T @ q.numpy(), np.eye(5), atol=1e-12)
    with pytest.raises(NotImplementedError, match="complete.*not differentiable"):
        q.sum().backward()


def test_solve_takes_batches_of_vectors_and_the_right_side():
    """PyTorch's rules: B of A's shape but its last dim is a batch of vectors (it raised), and
    `left=False` solves X A = B (it was refused)."""
    a = SQ + 3 * np.eye(3)
    b = R.standard_normal((2, 3))
    out = tg.linalg.solve(tg.tensor(a), tg.tensor(b))
    np.testing.assert_allclose(out.numpy(), np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-12)
    c = R.standard_normal((2, 4, 3))
    out = tg.linalg.solve(tg.tensor(a), tg.tensor(c), left=False)
    np.testing.assert_allclose(out.numpy() @ a, c, rtol=1e-12, atol=1e-12)
    check_grad(lambda x, y: tg.linalg.solve(x, y), a, b)
    check_grad(lambda x, y: tg.linalg.solve(x, y, left=False), a, c)


def test_norms_take_dtype():
    """`vector_norm(x, dtype=torch.float64)` computes in that dtype (a TypeError before)."""
    a = R.standard_normal((3, 4)).astype(np.float32)
    x = tg.tensor(a, requires_grad=True)
    wide = a.astype(np.float64)
    for fn, want in ((tg.linalg.vector_norm, np.linalg.norm(wide)),
                     (tg.linalg.matrix_norm, np.linalg.norm(wide)),
                     (tg.linalg.norm, np.linalg.norm(wide))):  # fmt: skip
        out = fn(x, dtype=np.float64)
        assert out.dtype == np.float64
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-15)
    tg.linalg.vector_norm(x, 3, dim=(0, 1), dtype=np.float64).backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(
        x.grad.numpy(), wide * np.abs(wide) / np.sum(np.abs(wide) ** 3) ** (2 / 3), rtol=1e-6
    )


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_reads_one_triangle(upper, left, unit):
    a = R.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    b = R.standard_normal((2, 3, 4) if left else (2, 4, 3))
    t = np.triu(a) if upper else np.tril(a)
    if unit:
        t = t - t * np.eye(3) + np.eye(3)
    out = tg.linalg.solve_triangular(tg.tensor(a), tg.tensor(b), upper=upper, left=left,
                                     unitriangular=unit)  # fmt: skip
    np.testing.assert_allclose(t @ out.numpy() if left else out.numpy() @ t, b, atol=1e-12)

    def f(x, y):
        return tg.linalg.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit)

    check_grad(f, a, b)  # the other triangle (and a unit diagonal) gets no gradient
    x = tg.tensor(a, requires_grad=True)
    f(x, tg.tensor(b)).sum().backward()
    ignored = np.tril(np.ones((3, 3)), -1 if not unit else 0) if upper else np.triu(
        np.ones((3, 3)), 1 if not unit else 0)  # fmt: skip
    assert np.all(x.grad.numpy() * ignored == 0)


def test_lstsq_matrix_rank_and_pinv_tolerances():
    a, b = R.standard_normal((5, 3)), R.standard_normal((5, 2))
    result = tg.linalg.lstsq(tg.tensor(a), tg.tensor(b), driver="gelsd")
    want, residuals, rank, values = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(result.solution.numpy(), want, atol=1e-12)
    np.testing.assert_allclose(result.residuals.numpy(), residuals, atol=1e-12)
    assert int(result.rank) == rank and np.allclose(result.singular_values.numpy(), values)
    default = tg.linalg.lstsq(tg.tensor(a), tg.tensor(b[:, 0]))  # gelsy; B a vector
    np.testing.assert_allclose(default.solution.numpy(), want[:, 0], atol=1e-12)
    assert default.residuals.shape == (0,) and default.singular_values.shape == (0,)
    check_grad(lambda x, y: tg.linalg.lstsq(x, y).solution, a, b)
    d = tg.tensor(np.diag([3.0, 1.0, 0.4, 1e-16]))
    assert tg.linalg.matrix_rank(d).item() == 3 and tg.linalg.matrix_rank(d).dtype == np.int64
    assert tg.linalg.matrix_rank(d, atol=0.5).item() == 2
    assert tg.linalg.matrix_rank(d, rtol=0.2).item() == 2
    # float32's default tolerance is eps * max(m, n), as PyTorch's: 1e-7 is noise there
    small = tg.tensor(np.diag([1.0, 1e-7, 0.5]).astype(np.float32))
    np.testing.assert_allclose(tg.linalg.pinv(small).numpy(), np.diag([1.0, 0.0, 2.0]), rtol=1e-6)
    np.testing.assert_allclose(tg.pinverse(d, rcond=0.2).numpy(), np.diag([1 / 3, 1.0, 0, 0]))


def test_the_ex_functions_report_info():
    spd = tg.tensor(SPD)
    out = tg.linalg.cholesky_ex(spd)
    np.testing.assert_allclose(out.L.numpy(), np.linalg.cholesky(SPD), rtol=1e-12)
    assert out.info.numpy().tolist() == [0, 0] and out.info.dtype == np.int32
    bad = SPD.copy()
    bad[1, 2, 2] = -10.0  # the third leading minor of the second matrix is not positive
    out = tg.linalg.cholesky_ex(tg.tensor(bad))
    assert out.info.numpy().tolist() == [0, 3] and np.isnan(out.L.numpy()[1]).all()
    with pytest.raises(np.linalg.LinAlgError):
        tg.linalg.cholesky_ex(tg.tensor(bad), check_errors=True)
    np.testing.assert_allclose(tg.linalg.inv_ex(spd).inverse.numpy(), np.linalg.inv(SPD))
    v = R.standard_normal((2, 3))
    got = tg.linalg.solve_ex(spd, tg.tensor(v)).result.numpy()
    np.testing.assert_allclose(got, np.linalg.solve(SPD, v[..., None])[..., 0], rtol=1e-10)
    np.testing.assert_allclose(tg.linalg.matmul(spd, spd).numpy(), SPD @ SPD)


def test_torch_qr_is_the_older_spelling():
    q, r = tg.qr(tg.tensor(X1[0]), some=False)
    want_q, want_r = np.linalg.qr(X1[0], mode="complete")
    np.testing.assert_allclose(q.numpy(), want_q, atol=1e-14)
    np.testing.assert_allclose(r.numpy(), want_r, atol=1e-14)
    assert tg.qr(tg.tensor(X1[0])).Q.shape == (6, 4) and ttorch.qr is tg.qr

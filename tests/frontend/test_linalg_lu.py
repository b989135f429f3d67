"""LU factorization (`linalg.lu`, `lu_factor`, `lu_factor_ex`, `lu_unpack`, `lu_solve`, and
PyTorch's older `torch.lu`, `Tensor.lu`, `torch.lu_solve`): against SciPy's LAPACK (the same
partial pivoting: the same pivots), the factors' shapes and triangles, A = P L U, solves against
NumPy's, a singular matrix's info, and L and U's gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch
from tests.conftest import check_grad

SHAPES = [(4, 4), (5, 3), (3, 5), (1, 1), (2, 3, 3)]


def matrix(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_factors_rebuild_the_matrix(shape):
    a = matrix(shape)
    p, lower, upper = (t.numpy() for t in tg.linalg.lu(tg.tensor(a)))
    m, n = shape[-2:]
    k = min(m, n)
    assert lower.shape == (*shape[:-2], m, k) and upper.shape == (*shape[:-2], k, n)
    np.testing.assert_allclose(p @ lower @ upper, a, atol=1e-14)
    np.testing.assert_array_equal(np.tril(lower, -1) + np.eye(m, k), lower)
    np.testing.assert_array_equal(np.triu(upper), upper)
    np.testing.assert_array_equal(np.sort(p, axis=-1)[..., -1], np.ones(p.shape[:-1]))
    assert np.all(np.abs(np.tril(lower, -1)) <= 1)  # partial pivoting: multipliers at most 1


@pytest.mark.parametrize("shape", SHAPES)
def test_the_same_factors_and_pivots_as_lapack(shape):
    linalg = pytest.importorskip("scipy.linalg")
    a = matrix(shape, seed=1)
    LU, pivots = tg.linalg.lu_factor(tg.tensor(a))
    p, lower, upper = tg.linalg.lu(tg.tensor(a))
    assert pivots.dtype == np.int32
    for i in np.ndindex(shape[:-2]):
        want_p, want_l, want_u = linalg.lu(a[i])
        np.testing.assert_allclose(p.numpy()[i], want_p)
        np.testing.assert_allclose(lower.numpy()[i], want_l, atol=1e-14)
        np.testing.assert_allclose(upper.numpy()[i], want_u, atol=1e-14)
        if shape[-1] == shape[-2]:
            want_lu, want_pivots = linalg.lu_factor(a[i])
            np.testing.assert_allclose(LU.numpy()[i], want_lu, atol=1e-14)
            np.testing.assert_array_equal(pivots.numpy()[i], want_pivots + 1)  # 1-based


@pytest.mark.parametrize("shape", SHAPES)
def test_unpacking_the_packed_form(shape):
    a = tg.tensor(matrix(shape, seed=2))
    unpacked = tg.lu_unpack(*tg.linalg.lu_factor(a))
    for got, want in zip(unpacked, tg.linalg.lu(a), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-15)
    p, lower, upper = torch.lu_unpack(*a.lu())  # nflib's Invertible1x1Conv
    np.testing.assert_allclose((p @ lower @ upper).numpy(), a.numpy(), atol=1e-14)


def test_solves():
    a, b = matrix((4, 4), seed=3), matrix((4, 2), seed=4)
    LU, pivots = tg.linalg.lu_factor(tg.tensor(a))
    solve = tg.linalg.lu_solve
    np.testing.assert_allclose(solve(LU, pivots, tg.tensor(b)).numpy(), np.linalg.solve(a, b))
    np.testing.assert_allclose(solve(LU, pivots, tg.tensor(b), adjoint=True).numpy(),
                               np.linalg.solve(a.T, b))  # fmt: skip
    np.testing.assert_allclose(solve(LU, pivots, tg.tensor(b.T), left=False).numpy(),
                               b.T @ np.linalg.inv(a))  # fmt: skip
    np.testing.assert_allclose(torch.lu_solve(tg.tensor(b), LU, pivots).numpy(),
                               np.linalg.solve(a, b))  # fmt: skip
    np.testing.assert_allclose(tg.tensor(b).lu_solve(LU, pivots).numpy(), np.linalg.solve(a, b))


def test_a_singular_matrix_says_where():
    a = tg.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=tg.float64)
    LU, pivots, info = tg.linalg.lu_factor_ex(a)
    assert int(info) == 2 and float(LU[1, 1]) == 0
    _, _, infos = torch.lu(a, get_infos=True)
    assert int(infos) == 2
    with pytest.raises(RuntimeError, match="singular"):
        tg.linalg.lu_factor_ex(a, check_errors=True)


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4)])
def test_gradients_of_the_factors(shape):
    a = matrix(shape, seed=5)
    check_grad(lambda x: tg.linalg.lu(x).L, a)
    check_grad(lambda x: tg.linalg.lu(x).U, a)
    check_grad(lambda x: tg.linalg.lu_factor(x).LU, a)

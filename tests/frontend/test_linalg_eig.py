"""`linalg.eig` and `linalg.eigvals` of general (real and complex) matrices: complex results of
PyTorch's dtypes, the eigenpairs against PyTorch's (the eigenvectors up to each column's phase)
and A V = V diag(w); gradients of losses that do not depend on the phases against finite
differences and PyTorch's, and PyTorch's error for a loss that does."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad, traced_matches_eager
from tracegrad.compiler import lowering

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(7)
REAL = R.standard_normal((2, 4, 4))  # complex pairs among the eigenvalues, distinct
COMPLEX = R.standard_normal((3, 3)) + 1j * R.standard_normal((3, 3))
SYMMETRIC_PART = REAL[0] + REAL[0].T  # real eigenvalues: real eigenvectors from LAPACK
W = R.standard_normal((4, 4))  # a weight per element of |V|^2


def _pairs(w_ours, v_ours, w_theirs, v_theirs, tol):
    """Each of our eigenvalues has one of theirs within tol, and our eigenvector is theirs up
    to a phase (|<v, u>| = 1, both of norm 1)."""
    for k in np.ndindex(w_ours.shape[:-1]):
        for j, value in enumerate(w_ours[k]):
            i = int(np.argmin(np.abs(w_theirs[k] - value)))
            assert abs(w_theirs[k][i] - value) <= tol * max(1.0, abs(value))
            overlap = abs(np.vdot(v_theirs[k][:, i], v_ours[k][:, j]))
            assert abs(overlap - 1.0) <= tol


@pytest.mark.parametrize("array", [REAL, REAL[0], COMPLEX, SYMMETRIC_PART],
                         ids=["real batch", "real", "complex", "real eigenvalues"])  # fmt: skip
def test_eigenpairs_satisfy_their_equation(array):
    w, v = tg.linalg.eig(tg.tensor(array))
    want = np.complex128
    assert w.dtype == want and v.dtype == want
    assert w.shape == array.shape[:-1] and v.shape == array.shape
    a, wn, vn = array.astype(np.complex128), w.numpy(), v.numpy()
    np.testing.assert_allclose(a @ vn, vn * wn[..., None, :], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(vn, axis=-2), 1.0, atol=1e-14)
    np.testing.assert_array_equal(tg.linalg.eigvals(tg.tensor(array)).numpy(), wn)


def test_float32_gives_complex64():
    w, v = tg.linalg.eig(tg.tensor(REAL[0], dtype=tg.float32))
    assert w.dtype == np.complex64 and v.dtype == np.complex64
    assert tg.linalg.eigvals(tg.tensor(COMPLEX.astype(np.complex64))).dtype == np.complex64
    np.testing.assert_allclose(w.numpy(), np.linalg.eigvals(REAL[0]), rtol=1e-5)


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.complex64])
def test_values_match_torch(dtype):
    array = (REAL if np.dtype(dtype).kind == "f" else COMPLEX).astype(dtype)
    w, v = ttorch.linalg.eig(ttorch.tensor(array))
    tw, tv = torch.linalg.eig(torch.tensor(array))
    assert str(w.dtype) == str(tw.dtype) and w.shape == tuple(tw.shape)
    tol = 1e-12 if dtype in (np.float64, np.complex128) else 1e-5
    _pairs(w.numpy(), v.numpy(), tw.numpy(), tv.numpy(), tol)
    ours = ttorch.linalg.eigvals(ttorch.tensor(array)).numpy()
    theirs = torch.linalg.eigvals(torch.tensor(array)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)  # LAPACK's order, both
    assert type(ttorch.linalg.eig(ttorch.tensor(array)))._fields == ("eigenvalues", "eigenvectors")


def _weights(lib, v, row=None):
    n = v.shape[-1]
    return lib.tensor(W[:n, :n] if row is None else W[row, :n])


LOSSES = {  # gauge invariant: unchanged by V -> V diag(e^{i phi})
    "eigenvalues": lambda lib, w, v: (w * w.conj()).real.sum() + (w.real * w.imag).sum(),
    "|V|^2": lambda lib, w, v: ((v * v.conj()).real * _weights(lib, v)).sum(),
    "both": lambda lib, w, v: (w.real**3).sum() + (v.abs() ** 2 * _weights(lib, v)).sum(),
    "V diag(c) V^H": lambda lib, w, v: (
        ((v * _weights(lib, v, 0)) @ v.mH).real.sum()
        + ((v * _weights(lib, v, 1)) @ v.mH).imag.sum()
    ),
}


@needs_torch
@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("array", [REAL, COMPLEX], ids=["real", "complex"])
def test_gradients_match_torch(name, array):
    loss = LOSSES[name]
    a = ttorch.tensor(array, requires_grad=True)
    loss(ttorch, *ttorch.linalg.eig(a)).backward()
    t = torch.tensor(array, requires_grad=True)
    loss(torch, *torch.linalg.eig(t)).backward()
    assert a.grad.dtype == a.dtype
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("array", [REAL[1], COMPLEX], ids=["real", "complex"])
def test_gradients_match_finite_differences(name, array):
    check_grad(lambda a: LOSSES[name](tg, *tg.linalg.eig(a)), array, tol=1e-6)


@pytest.mark.parametrize("array", [REAL[0], COMPLEX], ids=["real", "complex"])
def test_complex_results_gradients_match_finite_differences(array):
    check_grad(tg.linalg.eigvals, array, tol=1e-6)  # eigenvalues' own cotangents
    n = array.shape[-1]
    c = np.linspace(0.5, 2.0, n)
    check_grad(lambda a: (lambda v: (v * tg.tensor(c)) @ v.mH)(tg.linalg.eig(a)[1]), array,
               tol=1e-6)  # fmt: skip


SECOND_ORDER = [n for n in LOSSES if n != "both"]  # |V|'s second derivative: abs of complex


@pytest.mark.parametrize("name", SECOND_ORDER)
@pytest.mark.parametrize("array", [REAL[1], COMPLEX], ids=["real", "complex"])
def test_second_derivatives_match_finite_differences(name, array):
    def gradient(a):
        loss = LOSSES[name](tg, *tg.linalg.eig(a.requires_grad_()))
        return tg.autograd.grad(loss, a, create_graph=True)[0]

    check_grad(gradient, array, tol=1e-5)


@needs_torch
@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_derivatives_match_torch(name):
    c = np.cos(np.arange(COMPLEX.size)).reshape(COMPLEX.shape)
    grads = []
    for lib in (ttorch, torch):
        a = lib.tensor(COMPLEX, requires_grad=True)
        g = lib.autograd.grad(LOSSES[name](lib, *lib.linalg.eig(a)), a, create_graph=True)[0]
        (g * lib.tensor(c)).real.sum().backward()
        grads.append(a.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-10, atol=1e-10)


def test_solve_with_complex_operands_differentiates():
    """The rule's solves by V^H: complex matrices, by PyTorch's convention."""
    a = R.standard_normal((3, 3)) + 3.0 * np.eye(3)
    b = R.standard_normal((3, 2)) + 1j * R.standard_normal((3, 2))
    check_grad(tg.linalg.solve, a, b)
    check_grad(tg.linalg.solve, a + 1j * R.standard_normal((3, 3)), b)
    check_grad(tg.linalg.solve, a + 1j * R.standard_normal((3, 3)), b.real)


def test_a_loss_of_the_phases_raises_as_torch():
    a = tg.tensor(REAL[0], requires_grad=True)
    w, v = tg.linalg.eig(a)
    with pytest.raises(RuntimeError, match=r"specified up to multiplication by e\^\{i phi\}"):
        v.real.sum().backward()


def test_shapes_are_checked_as_torch():
    with pytest.raises(RuntimeError, match="A must be batches of square matrices, but they are "
                       "2 by 3 matrices"):  # fmt: skip
        tg.linalg.eig(tg.ones(2, 3))
    with pytest.raises(RuntimeError, match="must have at least 2 dimensions"):
        tg.linalg.eigvals(tg.ones(3))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    traced_matches_eager(lambda a: LOSSES["both"](tg, *tg.linalg.eig(a)), REAL, backend=backend)

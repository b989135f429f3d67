"""PyTorch's `torch.linalg` names built from other ops: `cond` (every norm, singular matrices
as inf), `vander` (running products), `tensorinv` and `tensorsolve` (reshapes around `inv` and
`solve`), and `LinAlgError`, which singular and indefinite matrices raise with PyTorch's
messages. Values against PyTorch's in float64 and float32, gradients against finite
differences (and PyTorch's where its own backward runs), traced against eager."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad, traced_matches_eager

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(3)
SQ = R.standard_normal((2, 3, 3)) + 2.0 * np.eye(3)
WIDE = R.standard_normal((2, 3, 4))
SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])
BATCH = np.stack([np.eye(2), SINGULAR])  # the second singular
ORDERS = [None, 2, -2, "fro", "nuc", math.inf, -math.inf, 1, -1]
X = R.standard_normal((2, 4))
T4 = R.standard_normal((2, 3, 6)) + np.eye(6).reshape(2, 3, 6)  # square as (6, 6)
B2 = R.standard_normal((2, 3))

CASES = {  # name: (call given the library, arrays)
    **{f"cond {p}": (lambda lib, a, p=p: lib.linalg.cond(a, p), [SQ]) for p in ORDERS},
    "cond wide": (lambda lib, a: lib.linalg.cond(a), [WIDE]),
    "cond -2 wide": (lambda lib, a: lib.linalg.cond(a, -2), [WIDE]),
    "vander": (lambda lib, x: lib.linalg.vander(x), [X]),
    "vander N": (lambda lib, x: lib.linalg.vander(x[0], N=6), [X]),
    "vander zeros": (lambda lib, x: lib.linalg.vander(x * 0.0, N=3), [X]),
    "tensorinv": (lambda lib, a: lib.linalg.tensorinv(a.reshape(2, 3, 3, 2)), [T4]),
    "tensorinv ind=1": (lambda lib, a: lib.linalg.tensorinv(a.reshape(6, 2, 3), ind=1), [T4]),
    "tensorsolve": (lambda lib, a, b: lib.linalg.tensorsolve(a, b), [T4, B2]),
    "tensorsolve dims": (lambda lib, a, b: lib.linalg.tensorsolve(a.permute(2, 0, 1), b, (0,)),
                         [T4, B2]),
}  # fmt: skip
# PyTorch's gradient of the norms by the inverse fails its own in-place check
TORCH_BACKWARD_FAILS = {f"cond {p}" for p in ("fro", math.inf, -math.inf, 1, -1)}


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_match_torch(name):
    call, arrays = CASES[name]
    ours = [ttorch.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    a, b = call(ttorch, *ours), call(torch, *theirs)
    assert a.shape == tuple(b.shape) and str(a.dtype) == str(b.dtype)
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
    if name in TORCH_BACKWARD_FAILS:
        return
    c = R.standard_normal(a.shape)
    (a * ttorch.tensor(c)).sum().backward()
    (b * torch.tensor(c)).sum().backward()
    for x, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-10)


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_float32_values_match_torch(name):
    call, arrays = CASES[name]
    a = call(ttorch, *[ttorch.tensor(x, dtype=ttorch.float32) for x in arrays])
    b = call(torch, *[torch.tensor(x, dtype=torch.float32) for x in arrays])
    assert a.dtype == np.float32 and str(a.dtype) == str(b.dtype)
    if name.startswith("vander"):  # the same running products, rounded alike
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_gradients_match_finite_differences(name):
    call, arrays = CASES[name]
    check_grad(lambda *xs: call(tg, *xs), *arrays, tol=1e-6)


@needs_torch
@pytest.mark.parametrize("p", ORDERS)
def test_cond_of_singular_and_complex_matrices_as_torch(p):
    for array in (SINGULAR, np.zeros((2, 2)), BATCH, SQ[0] + 1j * SQ[1]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a zero matrix's 0 / 0 is nan, without a warning
            got = tg.linalg.cond(tg.tensor(array), p)
        want = torch.linalg.cond(torch.tensor(array), p)
        assert str(got.dtype) == str(want.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_cond_edges():
    assert tg.linalg.cond(tg.zeros(2, 0, 0), 1).tolist() == [0.0, 0.0]
    assert tg.linalg.cond(tg.zeros(0, 3)).dtype == np.float32
    with pytest.raises(RuntimeError, match="invalid norm type: 3"):
        tg.linalg.cond(tg.tensor(SQ), 3)
    with pytest.raises(RuntimeError, match=r"cond\(ord=1\): A must be batches of square"):
        tg.linalg.cond(tg.tensor(WIDE), 1)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        tg.linalg.cond(tg.ones(3))


def test_vander_dtypes_and_errors():
    got = tg.linalg.vander(tg.tensor([2, 3], dtype=tg.int32), N=4)
    assert got.dtype == np.int64 and got.tolist() == [[1, 2, 4, 8], [1, 3, 9, 27]]
    assert tg.linalg.vander(tg.tensor([2, 3], dtype=tg.uint8)).dtype == np.int64
    z = tg.linalg.vander(tg.tensor([1 + 1j, 2.0], dtype=tg.complex64))
    assert z.dtype == np.complex64 and z.numpy()[0].tolist() == [1, 1 + 1j]
    assert tg.linalg.vander(tg.tensor(2.0), N=3).tolist() == [[1.0, 2.0, 4.0]]
    with pytest.raises(RuntimeError, match="but got Bool"):
        tg.linalg.vander(tg.tensor([True]))
    with pytest.raises(RuntimeError, match="N must be greater than 1"):
        tg.linalg.vander(tg.tensor([1.0, 2.0]), N=1)
    with pytest.raises(TypeError):
        tg.linalg.vander(tg.tensor([1.0, 2.0]), 3)  # N is keyword-only, as PyTorch's


def test_tensor_shapes_are_checked_as_torch():
    with pytest.raises(RuntimeError, match="strictly positive integer for 'ind', but got 0"):
        tg.linalg.tensorinv(tg.tensor(T4), ind=0)
    with pytest.raises(RuntimeError, match=r"prod\(self.shape\[ind:\]\) == "
                       r"prod\(self.shape\[:ind\]\), but got 18 != 2"):  # fmt: skip
        tg.linalg.tensorinv(tg.tensor(T4), ind=1)
    with pytest.raises(RuntimeError, match="but got 5 != 6"):
        tg.linalg.tensorsolve(tg.ones(2, 3, 5), tg.ones(2, 3))
    with pytest.raises(tg.linalg.LinAlgError, match="singular"):
        tg.linalg.tensorinv(tg.tensor(SINGULAR.reshape(2, 2, 1)), ind=1)
    x = tg.tensor(T4)
    product = tg.tensordot(tg.linalg.tensorinv(x.reshape(6, 2, 3), 1), x.reshape(6, 2, 3), 1)
    np.testing.assert_allclose(product.reshape(6, 6).numpy(), np.eye(6), atol=1e-12)


SINGULAR_CALLS = {
    "inv": lambda lib, a: lib.linalg.inv(a),
    "inv batch": lambda lib, a: lib.linalg.inv(lib.stack([lib.eye(2, dtype=a.dtype), a])),
    "inverse": lambda lib, a: lib.inverse(a),
    "solve": lambda lib, a: lib.linalg.solve(a, lib.ones(2, dtype=a.dtype)),
    "solve batch": lambda lib, a: lib.linalg.solve(lib.stack([a, a]),
                                                   lib.ones(2, 2, 1, dtype=a.dtype)),
    "cholesky": lambda lib, a: lib.linalg.cholesky(a - lib.eye(2, dtype=a.dtype)),
    "cholesky batch": lambda lib, a: lib.linalg.cholesky(lib.stack([lib.eye(2, dtype=a.dtype), a])),
    "cholesky_ex check": lambda lib, a: lib.linalg.cholesky_ex(-a, check_errors=True),
}  # fmt: skip


@pytest.mark.parametrize("name", SINGULAR_CALLS)
def test_singular_matrices_raise_linalg_error(name):
    with pytest.raises(ttorch.linalg.LinAlgError) as raised:
        SINGULAR_CALLS[name](ttorch, ttorch.tensor(SINGULAR))
    assert isinstance(raised.value, RuntimeError)  # PyTorch's
    assert isinstance(raised.value, np.linalg.LinAlgError)  # what NumPy code catches
    assert ttorch._C._LinAlgError is ttorch.linalg.LinAlgError is tg.linalg.LinAlgError
    if torch is not None:
        with pytest.raises(torch.linalg.LinAlgError) as want:
            SINGULAR_CALLS[name](torch, torch.tensor(SINGULAR))
        expected = str(want.value).replace("linalg.cholesky_ex", "linalg.cholesky")
        assert str(raised.value) == expected


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend):
    def f(a, x, t, b):
        return (tg.linalg.cond(a, 1).sum() + tg.linalg.cond(a).sum()
                + tg.linalg.vander(x, N=3).sum() + tg.linalg.tensorsolve(t, b).sum()
                + tg.linalg.tensorinv(t.reshape(6, 2, 3), 1).sum())  # fmt: skip

    traced_matches_eager(f, SQ, X, T4, B2, backend=backend)

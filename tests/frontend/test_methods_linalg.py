"""Tensor's linear algebra methods under PyTorch's older names: `svd` (U, S, V with `some` and
`compute_uv`), `qr` (`some`), `triangular_solve` (self the right-hand side), `ger`, and the
in-place `renorm_`: values, shapes and field names against PyTorch's, gradients against finite
differences."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad, on_pytorch

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(5)
TALL = R.standard_normal((2, 5, 3))
TRI = np.triu(R.standard_normal((2, 3, 3))) + 3.0 * np.eye(3)
RHS = R.standard_normal((2, 3, 2))
ROWS = R.standard_normal((4, 3))

CASES = {  # name: (call given the library, arrays); tuples' parts compared one by one
    "svd": (lambda lib, a: a.svd(), [TALL]),
    "svd some=False": (lambda lib, a: a.svd(some=False), [TALL]),
    "svd wide": (lambda lib, a: a.mT.svd(), [TALL]),
    "svd compute_uv=False": (lambda lib, a: a.svd(compute_uv=False), [TALL]),
    "svd compute_uv=False some=False": (lambda lib, a: a.svd(False, False), [TALL[0].T]),
    "qr": (lambda lib, a: a.qr(), [TALL]),
    "qr some=False": (lambda lib, a: a[0].mT.qr(some=False), [TALL]),
    "qr some=False tall": (lambda lib, a: a[0].qr(some=False), [TALL]),
    "triangular_solve": (lambda lib, b, a: b.triangular_solve(a), [RHS, TRI]),
    "triangular_solve lower transpose": (
        lambda lib, b, a: b.triangular_solve(a, upper=False, transpose=True),
        [RHS, np.swapaxes(TRI, -1, -2)]),
    "triangular_solve unitriangular": (
        lambda lib, b, a: b.triangular_solve(a, True, False, True), [RHS, TRI]),
    "ger": (lambda lib, x, y: x.ger(y), [ROWS[0], ROWS[1]]),
}  # fmt: skip
FIELDS = {"svd": ("U", "S", "V"), "qr": ("Q", "R"),
          "triangular_solve": ("solution", "cloned_coefficient")}  # fmt: skip


def _parts(result):
    return list(result) if isinstance(result, tuple) else [result]


def _signs(name, parts):
    """The singular vectors' (Q's and R's rows') signs, fixed: LAPACK's may differ between
    builds, the products not."""
    if not name.startswith(("svd", "qr")) or "compute_uv=False" in name:
        return parts
    if name.startswith("svd"):
        u, s, v = parts
        k = s.shape[-1]
        sign = np.sign(u[..., :1, :k])
        return [u[..., :k] * sign, s, v[..., :k] * sign]
    q, r = parts
    k = min(r.shape[-2:])  # Q's columns past k: any basis of a complement
    sign = np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    return [q[..., :k] * sign, r[..., :k, :] * np.swapaxes(sign, -1, -2)]


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_match_torch(name):
    call, arrays = CASES[name]
    ours = _parts(call(ttorch, *[ttorch.tensor(a) for a in arrays]))
    result = on_pytorch(lambda: call(torch, *[torch.tensor(a) for a in arrays]))
    theirs = _parts(result)
    kind = name.split()[0]
    if kind in FIELDS:
        assert type(call(ttorch, *[ttorch.tensor(a) for a in arrays]))._fields == FIELDS[kind]
    assert [tuple(t.shape) for t in ours] == [tuple(t.shape) for t in theirs]
    got = _signs(name, [t.numpy() for t in ours])
    want = _signs(name, [t.numpy() for t in theirs])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in CASES if n != "qr some=False tall"])  # as PyTorch's
def test_gradients_match_finite_differences(name):
    call, arrays = CASES[name]

    def product(*xs):  # free of the signs: U S V^T, Q R; the solution and its copy of A
        parts = _parts(call(tg, *xs))
        if name.startswith("svd") and "compute_uv=False" in name:
            return parts[1]
        if name.startswith("svd"):
            u, s, v = parts
            k = s.shape[-1]
            return (u[..., :k] * s.unsqueeze(-2)) @ v[..., :k].mT
        if name.startswith("qr"):
            return parts[0] @ parts[1]
        return parts[0] + parts[1].sum() if len(parts) == 2 else parts[0]

    check_grad(product, *arrays, tol=1e-6)


def test_svd_without_uv_gives_zeros_and_the_singular_values():
    u, s, v = tg.tensor(TALL).svd(compute_uv=False)
    assert u.shape == (2, 5, 5) and v.shape == (2, 3, 3)
    assert not u.numpy().any() and not v.numpy().any()
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(TALL, compute_uv=False), rtol=1e-12)


def test_triangular_solve_reads_one_triangle_and_copies_the_matrix():
    a = tg.tensor(TRI + np.tril(np.ones((3, 3)), -1))  # the lower triangle is not read
    x, copy = tg.tensor(RHS).triangular_solve(a)
    np.testing.assert_allclose(TRI @ x.numpy(), RHS, atol=1e-12)
    assert copy is not a and np.array_equal(copy.numpy(), a.numpy())


@needs_torch
def test_renorm_in_place_as_torch():
    t = ttorch.tensor(ROWS)
    version = t._version[0]
    assert t.renorm_(2, 0, 1.0) is t and t._version[0] > version
    want = torch.tensor(ROWS).renorm_(2, 0, 1.0).numpy()
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-12)
    w = ttorch.tensor(ROWS, requires_grad=True)
    with pytest.raises(RuntimeError, match="in place"):
        w.renorm_(2, 0, 1.0)
    t = ttorch.tensor(ROWS)
    t.renorm_(p=1, dim=1, maxnorm=0.5)
    np.testing.assert_allclose(t.numpy(), torch.tensor(ROWS).renorm(1, 1, 0.5).numpy(),
                               rtol=1e-12)  # fmt: skip

"""The products added to a tensor (addmm, addmv, addr, baddbmm, addbmm): values and gradients
against PyTorch in float64 where installed, else against NumPy and finite differences; beta = 0
ignores the input (its nan does not spread); a traced step against the eager one."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, traced_matches_eager
from tracegrad.compiler import lowering

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(9)
IN, M1, M2 = R.standard_normal((3, 5)), R.standard_normal((3, 4)), R.standard_normal((4, 5))
V4, V3 = R.standard_normal(4), R.standard_normal(3)
B1, B2, BIN = R.standard_normal((2, 3, 4)), R.standard_normal((2, 4, 5)), R.standard_normal(5)

CASES = {  # name: (call given the library, arrays, NumPy's value of the default call)
    "addmm": (lambda lib, i, a, b: lib.addmm(i, a, b), [IN, M1, M2], IN + M1 @ M2),
    "addmm scaled": (lambda lib, i, a, b: lib.addmm(i, a, b, beta=0.5, alpha=-2.0),
                     [IN, M1, M2], 0.5 * IN - 2 * M1 @ M2),
    "addmm broadcast": (lambda lib, i, a, b: i.addmm(a, b, alpha=3), [IN[0], M1, M2],
                        IN[0] + 3 * M1 @ M2),
    "addmv": (lambda lib, i, a, v: lib.addmv(i, a, v, beta=2), [V3, M1, V4], 2 * V3 + M1 @ V4),
    "addr": (lambda lib, i, a, b: lib.addr(i, a, b, alpha=0.5), [M1, V3, V4],
             M1 + 0.5 * np.outer(V3, V4)),
    "baddbmm": (lambda lib, i, a, b: lib.baddbmm(i, a, b, alpha=0.25), [BIN, B1, B2],
                BIN + 0.25 * B1 @ B2),
    "baddbmm method": (lambda lib, i, a, b: i.baddbmm(a, b, beta=-1), [B1 @ B2, B1, B2],
                       np.zeros((2, 3, 5))),
    "addbmm": (lambda lib, i, a, b: lib.addbmm(i, a, b, beta=0.1), [IN, B1, B2],
               0.1 * IN + (B1 @ B2).sum(0)),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_values_match_numpy_and_gradients_finite_differences(name):
    call, arrays, want = CASES[name]
    np.testing.assert_allclose(call(tg, *map(tg.tensor, arrays)).numpy(), want, atol=1e-13)
    check_grad(lambda *xs: call(tg, *xs), *arrays)


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_match_torch(name):
    call, arrays, _ = CASES[name]
    ours = [tg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    a, b = call(tg, *ours), call(torch, *theirs)
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-13, atol=1e-13)
    c = R.standard_normal(a.shape)
    (a * c).sum().backward()
    (b * torch.tensor(c)).sum().backward()
    for x, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-13, atol=1e-13)


def test_beta_zero_ignores_the_input_and_ranks_are_checked():
    nan = tg.tensor(np.full((3, 5), math.nan))
    out = tg.addmm(nan, tg.tensor(M1), tg.tensor(M2), beta=0)
    np.testing.assert_allclose(out.numpy(), M1 @ M2)
    with pytest.raises(tg.ShapeError, match="baddbmm"):
        tg.baddbmm(tg.tensor(IN), tg.tensor(M1), tg.tensor(M2))
    with pytest.raises(tg.ShapeError, match="addmv"):
        tg.addmv(tg.tensor(V3), tg.tensor(M1), tg.tensor(M2))
    with pytest.raises(tg.ShapeError, match="matmul"):  # one dtype, as PyTorch's products
        tg.addmm(tg.tensor(IN), tg.tensor(M1), tg.tensor(M2).float())


def test_einsum_takes_one_dtype_and_numpys_promotes():
    """As PyTorch's: a float32 codebook against float64 features raises (vector-quantize-
    pytorch's LFQ ran silently in float64 where PyTorch refuses); NumPy's einsum promotes."""
    import tracegrad.numpy as tnp

    a, b = tg.tensor(M1), tg.tensor(M2).float()
    with pytest.raises(tg.ShapeError, match="einsum: operands of dtypes float64, float32"):
        tg.einsum("ij,jk->ik", a, b)
    with pytest.raises(tg.ShapeError, match="einsum"):
        tg.einsum(a, [0, 1], b, [1, 2], [0, 2])
    assert tg.einsum("ij,jk->ik", a.float(), b).dtype == np.float32
    assert tnp.einsum("ij,jk->ik", a, b).dtype == np.float64


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(i, a, b, b1, b2):
        return (tg.addmm(i, a, b, beta=0.5) + tg.addbmm(i, b1, b2, alpha=2.0)
                + tg.baddbmm(i[0], b1, b2).sum(0))  # fmt: skip

    traced_matches_eager(f, IN, M1, M2, B1, B2, backend=backend)

"""meshgrid, cartesian_prod, block_diag and diag_embed: values against PyTorch in float64 where
installed, else against NumPy; gradients (they are views, pads and products of the op table's)
against finite differences; a traced step against the eager one."""

from __future__ import annotations

import itertools

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

R = np.random.default_rng(5)
A, B, C = R.standard_normal(3), R.standard_normal(4), R.standard_normal(2)
M = R.standard_normal((2, 3, 4))

CASES = {  # name: (call given the library, arrays)
    "meshgrid ij": (lambda lib, a, b, c: lib.stack(lib.meshgrid(a, b, c, indexing="ij")),
                    [A, B, C]),
    "meshgrid xy": (lambda lib, a, b, c: lib.stack(lib.meshgrid(a, b, c, indexing="xy")),
                    [A, B, C]),
    "meshgrid list": (lambda lib, a, b: lib.stack(lib.meshgrid([a, b], indexing="ij")), [A, B]),
    "meshgrid one": (lambda lib, a: lib.meshgrid(a, indexing="xy")[0], [A]),
    "cartesian_prod": (lambda lib, a, b, c: lib.cartesian_prod(a, b, c), [A, B, C]),
    "cartesian_prod one": (lambda lib, a: lib.cartesian_prod(a), [A]),
    "block_diag": (lambda lib, m, a, c: lib.block_diag(m[0], a, c[0], m[1, :2, :1]), [M, A, C]),
    "diag_embed": (lambda lib, m: lib.diag_embed(m), [M]),
    "diag_embed offset": (lambda lib, m: lib.diag_embed(m, 2), [M]),
    "diag_embed below": (lambda lib, m: lib.diag_embed(m, -1, 0, 2), [M]),
    "diag_embed dims": (lambda lib, m: lib.diag_embed(m, 1, dim1=-1, dim2=1), [M]),
    "diag_embed method": (lambda lib, m: m[0].diag_embed(-1), [M]),
    "masked_select": (lambda lib, m: lib.masked_select(m, m[0] > 0), [M]),
    "masked_select method": (lambda lib, m: m[0].masked_select(lib.tensor([[True], [False],
                                                                          [True]])), [M]),
    "vander": (lambda lib, a: lib.vander(a), [A]),
    "vander N increasing": (lambda lib, a: lib.vander(a, N=5, increasing=True), [A]),
}  # fmt: skip


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_match_torch(name):
    call, arrays = CASES[name]
    ours = [tg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    a, b = call(tg, *ours), call(torch, *theirs)
    np.testing.assert_array_equal(a.numpy(), b.detach().numpy())
    if name.startswith("vander"):  # PyTorch 2's vander fails its own backward (in-place cumprod)
        return
    c = R.standard_normal(a.shape)
    (a * c).sum().backward()
    (b * torch.tensor(c)).sum().backward()
    for x, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("name", CASES)
def test_gradients_match_finite_differences(name):
    call, arrays = CASES[name]
    check_grad(lambda *xs: call(tg, *xs), *arrays)


def test_values_without_torch():
    x, y = tg.meshgrid(tg.tensor(A), tg.tensor(B))  # "ij" without asking, and no warning
    want = np.meshgrid(A, B, indexing="ij")
    np.testing.assert_array_equal(x.numpy(), want[0])
    np.testing.assert_array_equal(y.numpy(), want[1])
    x, y = tg.meshgrid(tg.tensor(A), tg.tensor(B), indexing="xy")
    assert x.shape == (4, 3) and np.array_equal(x.numpy(), np.meshgrid(A, B)[0])
    rows = tg.cartesian_prod(tg.tensor([1, 2]), tg.tensor([3, 4, 5])).tolist()
    assert rows == [list(p) for p in itertools.product([1, 2], [3, 4, 5])]
    blocks = tg.block_diag(tg.tensor([[1, 2]]), tg.tensor(3), tg.tensor([[4.5], [6.0]]))
    assert blocks.tolist() == [[1, 2, 0, 0], [0, 0, 3, 0], [0, 0, 0, 4.5], [0, 0, 0, 6]]
    assert blocks.dtype == tg.float32  # PyTorch's promotion of int64 and float32 blocks
    embedded = tg.diag_embed(tg.tensor(M))
    np.testing.assert_array_equal(embedded.numpy(), M[..., None] * np.eye(4))
    assert tg.diag_embed(tg.tensor([1, 2]), 1).tolist() == [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    assert tg.diag_embed(tg.tensor([1, 2]), -1).tolist() == [[0, 0, 0], [1, 0, 0], [0, 2, 0]]
    np.testing.assert_array_equal(tg.diagonal(tg.diag_embed(tg.tensor(M), 1), 1, -2, -1).numpy(), M)
    assert tg.vander(tg.tensor([0, 2, 3])).tolist() == np.vander([0, 2, 3]).tolist()
    np.testing.assert_array_equal(tg.vander(tg.tensor(A), 4, True).numpy(), np.vander(A, 4, True))
    x = tg.tensor([[0, 3], [2, 0]])
    assert tg.argwhere(x).tolist() == [[0, 1], [1, 0]] and x.argwhere().shape == (2, 2)
    assert tg.argwhere(tg.tensor(5)).shape == (1, 0) and tg.argwhere(tg.tensor(0)).shape == (0, 0)
    with pytest.raises(tg.TraceError, match="data-dependent"):
        tg.trace(lambda m, x: tg.masked_select(x, m > 0))(tg.tensor(A), tg.tensor(A))
    with pytest.raises(tg.TraceError, match="data-dependent"):
        tg.trace(tg.argwhere)(tg.tensor(A))
    with pytest.raises(ValueError, match="indexing"):
        tg.meshgrid(tg.tensor(A), indexing="ji")
    with pytest.raises(tg.ShapeError, match="at most 2"):
        tg.block_diag(tg.tensor(M))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(a, b, m):
        grid = tg.stack(tg.meshgrid(a, b, indexing="xy")).sum() * tg.cartesian_prod(a, b).sum()
        blocks = tg.block_diag(m[0], a).sum(0)
        return tg.diag_embed(m, 1).sum((0, 1)) + grid + blocks[:5]

    traced_matches_eager(f, A, B, M, backend=backend)


def test_as_strided_reads_the_elements_its_strides_name_and_sums_gradients():
    a = np.arange(12.0)
    picked = np.arange(3)[:, None] * 2 + np.arange(4)[None, :] + 1  # rows overlap
    out = tg.as_strided(tg.tensor(a), (3, 4), (2, 1), 1)
    np.testing.assert_array_equal(out.numpy(), a[picked])
    assert tg.as_strided(tg.tensor(a), (), ()).item() == 0.0
    row = tg.tensor(a).reshape(3, 4)[1]  # the offset counts from the storage, as PyTorch's
    assert row.as_strided((2,), (1,), row.storage_offset() + 1).tolist() == [5.0, 6.0]
    check_grad(lambda x: tg.as_strided(x, (3, 4), (2, 1), 1), a)  # overlapping windows
    with pytest.raises(RuntimeError, match="reach outside the 12 elements"):
        tg.as_strided(tg.tensor(a), (2, 2), (6, 6))


def test_flips_rotations_tiles_and_diag_are_copies_and_views_stay_views():
    """PyTorch's flip, rot90, diag of a matrix, tile and repeat copy: an in-place op on the
    result leaves the input alone (timm's batch Mixup, `x.flip(0).mul_(1 - lam)`, mixed 54%
    wrong when flip was a reversed view); t() and diagonal() stay views."""
    x = tg.arange(4.0).reshape(2, 2)
    x.flip(0).mul_(0.5)
    tg.rot90(x, 0).mul_(0)
    tg.rot90(x, 1).mul_(0)
    tg.diag(x).mul_(0)
    x.repeat(1, 1).mul_(0)
    x.tile((1, 1)).mul_(0)
    assert x.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    x.t().mul_(2)
    x.diagonal().zero_()
    assert x.tolist() == [[0.0, 2.0], [4.0, 0.0]]


def test_contiguous_copies_a_permuted_view_only():
    h = tg.arange(8.0).reshape(1, 2, 2, 2)
    y = h.permute(0, 2, 3, 1).contiguous()
    y += 10.0  # a copy: h unchanged
    assert h.tolist() == np.arange(8.0).reshape(1, 2, 2, 2).tolist()
    z = h.permute(0, 2, 3, 1)[0].contiguous()  # a view of a permuted view: still copied
    z.zero_()
    row = h[0].contiguous()  # contiguous already: the view itself, as PyTorch
    row += 1.0
    assert h.sum().item() == 28.0 + 8.0


def test_mixup_in_place_on_a_flip_traced_as_eager():
    def mixup(x, lam):
        flipped = x.flip(0).mul_(1 - lam)
        return x.mul(lam).add_(flipped)

    x = np.random.default_rng(0).standard_normal((4, 3))
    want = x * 0.3 + x[::-1] * 0.7
    np.testing.assert_allclose(mixup(tg.tensor(x), 0.3).numpy(), want)
    step = tg.trace(mixup, backend="numpy")
    for _ in range(2):
        np.testing.assert_allclose(step(tg.tensor(x), 0.3).numpy(), want)

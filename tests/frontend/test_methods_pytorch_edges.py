"""PyTorch's rules at the edges of its functions, where a differential test against PyTorch
found tracegrad disagreeing: values against NumPy or explicit expectations, gradients against
finite differences in float64, traced against eager where the rule holds in a compiled plan."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.numpy as tnp
from tests.conftest import check_grad, traced_matches_eager

A = np.random.default_rng(3).standard_normal((2, 3))


def test_cat_skips_the_legacy_empty_tensor():
    """`out = torch.tensor([])` then `out = torch.cat([out, row])` (an accumulator): PyTorch
    skips a tensor of shape (0,) beside others; its dtype still counts."""
    out = tg.tensor([])
    for _ in range(2):
        out = tg.cat([out, tg.ones(1, 3)])
    assert out.shape == (2, 3)
    assert tg.cat([tg.ones(2, 3), tg.tensor([])], dim=-1).shape == (2, 3)
    assert tg.cat([tg.tensor([]), tg.ones(2, dtype=tg.int64)]).dtype == np.float32
    assert tg.cat([tg.tensor([]), tg.tensor([])]).shape == (0,)
    check_grad(lambda x: tg.cat([tg.tensor([], dtype=tg.float64), x, x * 2.0]), A)
    traced_matches_eager(lambda x: tg.cat([tg.tensor([]).double(), x]), A, backend="numpy")


def test_where_of_two_python_numbers_takes_their_own_result_type():
    """`torch.where(c, 1.0, 0.0)` is of the default float dtype (it was float64), eager and
    traced; two ints are int64, two bools bool. tracegrad.numpy.where keeps NumPy's float64."""
    c = tg.tensor([True, False])
    assert tg.where(c, 1.0, 0.0).dtype == np.float32
    assert tg.where(c, 1.0, 0.0).tolist() == [1.0, 0.0]
    assert (tg.where(c, 1, 0).dtype, tg.where(c, True, False).dtype) == (np.int64, np.bool_)
    assert tg.trace(lambda c: tg.where(c, 1.0, 0.0))(c).dtype == np.float32
    assert tnp.where(c, 1.0, 0.0).dtype == np.float64


R = np.random.default_rng(5)
SQUARES = R.standard_normal((2, 3, 3))


@pytest.mark.parametrize(
    "spec, shapes",
    [("bij,bjk->bik", [(2, 2, 3), (1, 3, 4)]), ("...ij,...jk->...ik", [(2, 2, 3), (1, 3, 4)]),
     ("ij,ij->i", [(2, 3), (1, 3)]), ("ij,ij->ij", [(1, 3), (2, 1)]), ("ij,jk", [(2, 1), (3, 4)])],
)  # fmt: skip
def test_einsum_broadcasts_indices_of_size_one(spec, shapes):
    """As NumPy's and PyTorch's einsum (it raised): values, gradients, traced."""
    arrays = [R.standard_normal(s) for s in shapes]
    got = tg.einsum(spec, *map(tg.tensor, arrays))
    np.testing.assert_allclose(got.numpy(), np.einsum(spec, *arrays), rtol=1e-12)
    check_grad(lambda *xs: tg.einsum(spec, *xs), *arrays)
    traced_matches_eager(lambda *xs: tg.einsum(spec, *xs), *arrays, backend="numpy")


@pytest.mark.parametrize("spec", ["bii->bi", "bii->", "bii,bij->bj", "bii->b"])
def test_einsum_differentiates_through_a_repeated_index(spec):
    """A trace or diagonal ("ii->", "bii->bi") had no gradient (NotImplementedError)."""
    arrays = [SQUARES] * spec.split("->")[0].count(",") + [SQUARES]
    got = tg.einsum(spec, *map(tg.tensor, arrays))
    np.testing.assert_allclose(got.numpy(), np.einsum(spec, *arrays), rtol=1e-12)
    check_grad(lambda *xs: tg.einsum(spec, *xs), *arrays)
    traced_matches_eager(lambda *xs: tg.einsum(spec, *xs), *arrays, backend="numpy")
    check_grad(lambda x: tg.einsum("ii->", x), SQUARES[0])


def test_an_empty_dim_list_reduces_every_dim_as_pytorch_reads_it():
    """`sum(dim=[])` and `mean(dim=[])` reduce all (they reduced none); tracegrad.numpy keeps
    NumPy's reading, axis=() reduces none."""
    x = tg.tensor(A)
    assert x.sum(dim=[]).item() == A.sum() and tg.sum(x, ()).shape == ()
    np.testing.assert_allclose(tg.mean(x, dim=[], keepdim=True).numpy(), A.mean(keepdims=True))
    assert tnp.sum(x, axis=()).shape == tnp.mean(x, axis=()).shape == A.shape
    check_grad(lambda x: x.sum(dim=[]) * x, A)
    traced_matches_eager(lambda x: x.mean(dim=[]) * x, A, backend="numpy")


def test_index_select_with_a_0d_index_keeps_the_dim():
    x = tg.tensor(A)
    assert x.index_select(1, tg.tensor(2)).tolist() == A[:, [2]].tolist()
    check_grad(lambda x: x.index_select(0, tg.tensor(1)), A)


def test_softmax_over_a_size_0_dim_is_empty():
    for f in (tg.softmax, tg.log_softmax):
        out = f(tg.zeros(0, 3, dtype=tg.float64), 0)
        assert out.shape == (0, 3) and out.dtype == np.float64


def test_repeat_interleave_of_counts_alone_repeats_the_positions():
    assert tg.repeat_interleave(tg.tensor([1, 0, 2])).tolist() == [0, 2, 2]
    assert tg.repeat_interleave(tg.tensor([2, 1])).dtype == np.int64


def test_all_and_any_of_uint8_are_uint8():
    b = tg.tensor(np.array([1, 0, 2], np.uint8))
    assert (b.all().dtype, b.any(0).dtype, tg.all(b).item()) == (np.uint8, np.uint8, 0)
    assert tg.tensor([1, 2]).all().dtype == np.bool_


def test_overwriting_a_tracked_tensor_with_a_constant_keeps_it_tracked():
    """`x.clone().zero_()`, `.fill_(v)`, `.copy_(constant)`: requires_grad stays (it was
    dropped), and the old value's gradient is zero, as PyTorch's."""
    x = tg.tensor(A, requires_grad=True)
    zeroed, copied = x.clone().zero_(), x.clone().copy_(tg.tensor([1, 2, 3]))
    assert zeroed.requires_grad and copied.requires_grad and zeroed.abs().sum().item() == 0
    (zeroed.sum() + copied.sum() + x.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(A))
    check_grad(lambda x: x * 2.0 + (x * 1.0).fill_(3.0), A)
    traced_matches_eager(lambda x: (x * 1.0).zero_() + x.exp(), A, backend="numpy")


def test_median_of_values_with_a_nan_is_nan_at_its_first_index():
    """As PyTorch's (the nan was skipped, as nanmedian does); without one, the lower middle."""
    n = np.nan
    x = tg.tensor([[2.0, n, 1.0, n], [3.0, 1.0, 2.0, 5.0]])
    values, indices = x.median(1)
    np.testing.assert_array_equal(values.numpy(), [n, 2.0])
    assert indices.tolist() == [1, 2] and np.isnan(tg.tensor([1.0, n, 3.0]).median().item())
    assert x.nanmedian(1).values.tolist() == [1.0, 2.0]
    check_grad(lambda x: x.median(0).values, A)
    traced_matches_eager(lambda x: x.median(1, keepdim=True).values * x, A, backend="numpy")


def test_sign_of_nan_is_0_and_of_bools_the_bools():
    """PyTorch's sign (and Tensor.sign, sgn); tracegrad.numpy.sign keeps NumPy's nan."""
    x = tg.tensor([np.nan, -2.0, 0.0, 3.0])
    assert tg.sign(x).tolist() == x.sign().tolist() == tg.sgn(x).tolist() == [0.0, -1.0, 0.0, 1.0]
    assert np.isnan(tnp.sign(x).numpy()[0])
    assert tg.sign(tg.tensor([True, False])).tolist() == [True, False]
    assert tg.sign(tg.tensor([-3, 0, 2])).tolist() == [-1, 0, 1]
    check_grad(lambda x: tg.sign(x) * x, A)

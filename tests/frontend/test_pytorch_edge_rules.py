"""PyTorch's rules at the edges of its functions, where a differential test against PyTorch
found tracegrad disagreeing: values against NumPy or explicit expectations, gradients against
finite differences in float64, traced against eager where the rule holds in a compiled plan."""

from __future__ import annotations

import numpy as np

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

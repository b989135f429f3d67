"""The view family's padding that repeats its input (`pad_repeating`, NumPy's "reflect",
"edge" and "wrap"; `F.pad`'s reflect, replicate and circular) and its gradient (`pad_fold`):
values against NumPy's `np.pad`, gradients against finite differences in float64, the fold's
own gradient (a second derivative), and a compiled step against eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad.core import primitives as P
from tracegrad.nn import functional as F

WIDTHS = [((0, 0), (2, 1), (1, 3)), ((1, 0), (0, 0), (3, 3)), ((0, 0), (0, 2), (0, 0))]


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("widths", WIDTHS)
def test_padding_by_repeating_the_input_and_its_gradient(mode, widths):
    x = np.random.default_rng(0).standard_normal((2, 4, 5))
    got = P.pad_repeating(tg.tensor(x), pad_width=widths, mode=mode)
    np.testing.assert_array_equal(got.numpy(), np.pad(x, widths, mode=mode))
    check_grad(lambda t: P.pad_repeating(t, pad_width=widths, mode=mode), x)
    g = np.random.default_rng(1).standard_normal(got.shape)
    check_grad(lambda t: P.pad_fold(t, pad_width=widths, mode=mode, shape=x.shape), g)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_a_padded_convolution_compiled_as_eager(mode):
    rng = np.random.default_rng(2)
    x = tg.tensor(rng.standard_normal((2, 3, 6, 7)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)

    def loss(x, w):
        padded = (
            F.pad(x, (2, 1, -1, 3), mode=mode)
            if mode != "circular"
            else F.pad(x, (2, 1, 1, 3), mode=mode)
        )
        return (F.conv2d(padded, w) ** 2).sum()

    eager = loss(x, w)
    dx, dw = tg.autograd.grad(eager, (x, w))
    step = tg.trace(lambda x, w: tg.autograd.grad(loss(x, w), (x, w)))
    for _ in range(2):
        cx, cw = step(x, w)
        np.testing.assert_allclose(cx.numpy(), dx.numpy(), rtol=1e-12)
        np.testing.assert_allclose(cw.numpy(), dw.numpy(), rtol=1e-12)

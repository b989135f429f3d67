"""Bicubic interpolation (F.interpolate / nn.Upsample mode="bicubic"): PyTorch's values and
gradients in float64 (where installed); without it, the kernel's properties (it reproduces
constants and passes through the samples) and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tests.nn.test_layers_resampling import both, needs_torch, torch
from tracegrad import nn
from tracegrad.nn import functional as F

RESIZES = [
    {"size": (9, 4)}, {"scale_factor": 2.0}, {"scale_factor": (1.5, 0.7)},
    {"size": (8, 11), "align_corners": True}, {"size": (3, 3)}, {"size": (1, 5)},
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("kwargs", RESIZES)
def test_bicubic_matches_torch(rng, kwargs):
    x = rng.standard_normal((2, 3, 5, 7))
    both(lambda a: F.interpolate(a, mode="bicubic", **kwargs),
         lambda t: torch.nn.functional.interpolate(t, mode="bicubic", **kwargs), x)  # fmt: skip
    both(lambda a: nn.Upsample(mode="bicubic", **kwargs)(a),
         lambda t: torch.nn.Upsample(mode="bicubic", **kwargs)(t), x)  # fmt: skip


@needs_torch
def test_bicubic_in_float32_matches_torch(rng):
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    ours = F.interpolate(tg.tensor(x), scale_factor=1.7, mode="bicubic").numpy()
    theirs = torch.nn.functional.interpolate(torch.tensor(x), scale_factor=1.7, mode="bicubic")
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5)


@pytest.mark.parametrize("kwargs", RESIZES)
def test_bicubic_keeps_constants_and_has_finite_difference_gradients(rng, kwargs):
    const = F.interpolate(tg.tensor(np.full((1, 1, 5, 7), 2.5)), mode="bicubic", **kwargs)
    np.testing.assert_allclose(const.numpy(), 2.5, rtol=1e-12)
    check_grad(lambda a: F.interpolate(a, mode="bicubic", **kwargs),
               rng.standard_normal((1, 2, 5, 7)))  # fmt: skip


def test_bicubic_passes_through_the_samples(rng):
    x = rng.standard_normal((1, 1, 4, 5))
    y = F.interpolate(tg.tensor(x), size=(7, 9), mode="bicubic", align_corners=True).numpy()
    np.testing.assert_allclose(y[0, 0, ::2, ::2], x[0, 0], rtol=1e-12)
    with pytest.raises(tg.ShapeError):
        F.interpolate(tg.tensor(x[0]), size=5, mode="bicubic")

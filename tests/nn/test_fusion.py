"""A batch norm folded into the layer before it (nn/fusion.py), as PyTorch's
torch.nn.utils.fusion: the fused layer computes what the two did in eval mode."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.nn.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

nn = torch.nn


@pytest.mark.parametrize(
    "layer, norm, shape",
    [(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), (2, 3, 5, 5)),
     (nn.ConvTranspose2d(3, 4, 3), nn.BatchNorm2d(4), (2, 3, 5, 5)),
     (nn.Conv1d(3, 4, 3), nn.BatchNorm1d(4, affine=False), (2, 3, 6)),
     (nn.Linear(3, 4), nn.BatchNorm1d(4), (5, 3))],
)  # fmt: skip
def test_the_fused_layer_computes_both(layer, norm, shape):
    layer, norm = layer.double(), norm.double()
    x = torch.tensor(np.random.default_rng(0).standard_normal(shape))
    norm(layer(x)), norm(layer(2 * x + 1))  # running statistics that are not 0 and 1
    with pytest.raises(AssertionError, match="only for eval"):
        fuse_linear_bn_eval(layer, norm)
    layer.eval(), norm.eval()
    if isinstance(layer, nn.Linear):
        fused = fuse_linear_bn_eval(layer, norm)
    else:
        fused = fuse_conv_bn_eval(layer, norm, transpose=isinstance(layer, nn.ConvTranspose2d))
    np.testing.assert_allclose(fused(x).detach().numpy(), norm(layer(x)).detach().numpy(),
                               rtol=1e-12, atol=1e-12)  # fmt: skip
    assert fused.weight is not layer.weight and isinstance(fused.weight, nn.Parameter)

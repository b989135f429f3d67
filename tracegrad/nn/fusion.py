"""Folding an eval-mode batch norm into the convolution or linear layer before it (PyTorch's
`torch.nn.utils.fusion`, which models such as timm's EfficientViM call to deploy): one layer
computes what the two did, from the norm's running statistics."""

from __future__ import annotations

import copy
from typing import Any

from tracegrad.core.primitives import sqrt
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.creation import ones_like, zeros_like
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn.modules import Module, Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]  # fmt: skip


def fuse_conv_bn_weights(conv_w: Tensor, conv_b: Tensor | None, bn_rm: Tensor, bn_rv: Tensor,
                         bn_eps: float, bn_w: Tensor | None, bn_b: Tensor | None,
                         transpose: bool = False) -> tuple[Parameter, Parameter]:  # fmt: skip
    """The weight and bias of a convolution followed by a batch norm in eval mode: each output
    channel scaled by weight / sqrt(var + eps) (for a transposed convolution, the weight's
    second axis is the output channels)."""
    with no_grad():
        conv_b = zeros_like(bn_rm) if conv_b is None else conv_b
        bn_w = ones_like(bn_rm) if bn_w is None else bn_w
        bn_b = zeros_like(bn_rm) if bn_b is None else bn_b
        scale = bn_w / sqrt(bn_rv + bn_eps)
        shape = [1, -1] if transpose else [-1, 1]
        weight = conv_w * scale.reshape(shape + [1] * (conv_w.ndim - 2))
        bias = (conv_b - bn_rm) * scale + bn_b
    return (Parameter(weight.astype(conv_w.dtype), conv_w.requires_grad),
            Parameter(bias.astype(conv_b.dtype), conv_b.requires_grad))  # fmt: skip


def fuse_conv_bn_eval(conv: Module, bn: Module, transpose: bool = False) -> Module:
    """A copy of `conv` that computes `bn(conv(x))`, both in eval mode."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias,
        transpose)  # fmt: skip
    return fused


def fuse_linear_bn_weights(linear_w: Tensor, linear_b: Tensor | None, bn_rm: Tensor,
                           bn_rv: Tensor, bn_eps: float, bn_w: Tensor, bn_b: Tensor
                           ) -> tuple[Parameter, Parameter]:  # fmt: skip
    """The weight and bias of a linear layer followed by a batch norm in eval mode."""
    return fuse_conv_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b)


def fuse_linear_bn_eval(linear: Module, bn: Module) -> Any:
    """A copy of `linear` that computes `bn(linear(x))`, both in eval mode."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias
    )
    return fused

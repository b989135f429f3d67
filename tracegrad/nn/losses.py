"""PyTorch's loss modules: each holds its options and calls the function of the same name in
`functional` (the one implementation)."""

from __future__ import annotations

from typing import Any

from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import functional as F
from tracegrad.nn.modules import Module

__all__ = ["BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "HuberLoss", "L1Loss", "MSELoss",
           "NLLLoss", "SmoothL1Loss"]  # fmt: skip


class _Loss(Module):
    function: Any = None

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options

    def forward(self, input: Any, target: Any) -> Tensor:
        return type(self).function(input, target, **self.options)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options.items() if v is not None)


class CrossEntropyLoss(_Loss):
    function = F.cross_entropy

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing)  # fmt: skip


class NLLLoss(_Loss):
    function = F.nll_loss

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction)


class MSELoss(_Loss):
    function = F.mse_loss

    def __init__(self, reduction="mean"):
        super().__init__(reduction=reduction)


class L1Loss(_Loss):
    function = F.l1_loss

    def __init__(self, reduction="mean"):
        super().__init__(reduction=reduction)


class BCELoss(_Loss):
    function = F.binary_cross_entropy

    def __init__(self, weight=None, reduction="mean"):
        super().__init__(weight=weight, reduction=reduction)


class BCEWithLogitsLoss(_Loss):
    function = F.binary_cross_entropy_with_logits

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(weight=weight, reduction=reduction, pos_weight=pos_weight)


class SmoothL1Loss(_Loss):
    function = F.smooth_l1_loss

    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction=reduction, beta=beta)


class HuberLoss(_Loss):
    function = F.huber_loss

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction, delta=delta)

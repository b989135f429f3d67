"""PyTorch's loss modules: each holds its options and calls the function of the same name in
`functional` (the one implementation)."""

from __future__ import annotations

from typing import Any

from tracegrad.nn import functional as F
from tracegrad.nn.modules import FunctionLayer, Module


class _Loss(Module):  # noqa: N801 (PyTorch's name, which custom losses subclass)
    """PyTorch's base of the losses (`torch.nn.modules.loss._Loss`): custom losses subclass it
    and read `self.reduction`; every loss here is one (isinstance holds)."""

    repr_format = ""  # PyTorch's losses print no options

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__()
        self.reduction = F.legacy_reduction(size_average, reduce, reduction)


class _WeightedLoss(_Loss):  # noqa: N801
    """`_Loss` with class weights, a buffer `weight` (None without)."""

    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean"):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


__all__ = ["BCELoss", "BCEWithLogitsLoss", "CTCLoss", "CosineEmbeddingLoss", "CrossEntropyLoss",
           "GaussianNLLLoss", "HingeEmbeddingLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss",
           "MarginRankingLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss",
           "MultiMarginLoss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "SmoothL1Loss",
           "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss"]  # fmt: skip


class CrossEntropyLoss(FunctionLayer, _Loss):
    function = F.cross_entropy

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):  # fmt: skip
        super().__init__(weight=weight, ignore_index=ignore_index, label_smoothing=label_smoothing,
                         reduction=F.legacy_reduction(size_average, reduce, reduction))  # fmt: skip


class NLLLoss(FunctionLayer, _Loss):
    function = F.nll_loss

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):  # fmt: skip
        super().__init__(weight=weight, ignore_index=ignore_index,
                         reduction=F.legacy_reduction(size_average, reduce, reduction))  # fmt: skip


class MSELoss(FunctionLayer, _Loss):
    function = F.mse_loss

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=F.legacy_reduction(size_average, reduce, reduction))


class L1Loss(FunctionLayer, _Loss):
    function = F.l1_loss

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=F.legacy_reduction(size_average, reduce, reduction))


class BCELoss(FunctionLayer, _Loss):
    function = F.binary_cross_entropy

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(
            weight=weight, reduction=F.legacy_reduction(size_average, reduce, reduction)
        )


class BCEWithLogitsLoss(FunctionLayer, _Loss):
    function = F.binary_cross_entropy_with_logits

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):  # fmt: skip
        super().__init__(
            weight=weight,
            pos_weight=pos_weight,
            reduction=F.legacy_reduction(size_average, reduce, reduction),
        )


class SmoothL1Loss(FunctionLayer, _Loss):
    function = F.smooth_l1_loss

    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(beta=beta, reduction=F.legacy_reduction(size_average, reduce, reduction))


class HuberLoss(FunctionLayer, _Loss):
    function = F.huber_loss

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction, delta=delta)


class KLDivLoss(FunctionLayer, _Loss):
    function = F.kl_div

    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(
            log_target=log_target, reduction=F.legacy_reduction(size_average, reduce, reduction)
        )


class PoissonNLLLoss(FunctionLayer, _Loss):
    function = F.poisson_nll_loss

    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean"):  # fmt: skip
        super().__init__(
            log_input=log_input,
            full=full,
            eps=eps,
            reduction=F.legacy_reduction(size_average, reduce, reduction),
        )


class GaussianNLLLoss(FunctionLayer, _Loss):
    """Called as loss(input, target, var)."""

    function = F.gaussian_nll_loss

    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(full=full, eps=eps, reduction=reduction)


class SoftMarginLoss(FunctionLayer, _Loss):
    function = F.soft_margin_loss

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=F.legacy_reduction(size_average, reduce, reduction))


class HingeEmbeddingLoss(FunctionLayer, _Loss):
    function = F.hinge_embedding_loss

    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(
            margin=margin, reduction=F.legacy_reduction(size_average, reduce, reduction)
        )


class MultiLabelSoftMarginLoss(FunctionLayer, _Loss):
    function = F.multilabel_soft_margin_loss

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(
            weight=weight, reduction=F.legacy_reduction(size_average, reduce, reduction)
        )


class MarginRankingLoss(FunctionLayer, _Loss):
    """Called as loss(input1, input2, target)."""

    function = F.margin_ranking_loss

    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(
            margin=margin, reduction=F.legacy_reduction(size_average, reduce, reduction)
        )


class CosineEmbeddingLoss(FunctionLayer, _Loss):
    """Called as loss(input1, input2, target)."""

    function = F.cosine_embedding_loss

    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(
            margin=margin, reduction=F.legacy_reduction(size_average, reduce, reduction)
        )


class TripletMarginLoss(FunctionLayer, _Loss):
    """Called as loss(anchor, positive, negative)."""

    function = F.triplet_margin_loss

    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None,
                 reduction="mean"):  # fmt: skip
        super().__init__(
            margin=margin,
            p=p,
            eps=eps,
            swap=swap,
            reduction=F.legacy_reduction(size_average, reduce, reduction),
        )


class MultiMarginLoss(FunctionLayer, _Loss):
    function = F.multi_margin_loss

    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                 reduction="mean"):  # fmt: skip
        super().__init__(
            p=p,
            margin=margin,
            weight=weight,
            reduction=F.legacy_reduction(size_average, reduce, reduction),
        )


class MultiLabelMarginLoss(FunctionLayer, _Loss):
    function = F.multilabel_margin_loss

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=F.legacy_reduction(size_average, reduce, reduction))


class TripletMarginWithDistanceLoss(FunctionLayer, _Loss):
    """Called as loss(anchor, positive, negative)."""

    function = F.triplet_margin_with_distance_loss

    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__(distance_function=distance_function, margin=margin, swap=swap,
                         reduction=reduction)  # fmt: skip


class CTCLoss(FunctionLayer, _Loss):
    """Called as loss(log_probs, targets, input_lengths, target_lengths)."""

    function = F.ctc_loss

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(blank=blank, reduction=reduction, zero_infinity=zero_infinity)


NLLLoss2d = NLLLoss  # PyTorch's deprecated name for images' NLL: NLLLoss takes (N, C, H, W)

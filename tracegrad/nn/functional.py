"""Activations and losses, written as compositions of tracegrad's primitives.

Nothing here has its own VJP: gradients, tracing and higher order come from the primitives.
Reductions and softmax-like functions take `axis` (NumPy's name) or `dim` (PyTorch's), as
everywhere in tracegrad; losses take PyTorch's signatures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import random
from ..api import (
    abs,
    check_range,
    log,
    log1p,
    log_softmax,
    maximum,
    mean,
    sigmoid,
    softmax,
    softplus,
    sqrt,
    sum,
    tanh,
    where,
)
from ..errors import ShapeError
from ..tensor import Tensor, as_tensor

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "dropout",
    "huber_loss",
    "l1_loss",
    "linear",
    "nll_loss",
    "smooth_l1_loss",
    "gelu",
    "layer_norm",
    "log_softmax",
    "mse_loss",
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
]

_REDUCTIONS = ("mean", "sum", "none")


def relu(x: Any) -> Tensor:
    """max(0, x). Zero comes first so that relu'(0) = 0, as in PyTorch (maximum sends ties left)."""
    return maximum(0.0, as_tensor(x))


def gelu(x: Any) -> Tensor:
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = as_tensor(x)
    return 0.5 * x * (1.0 + tanh(0.7978845608 * (x + 0.044715 * x**3.0)))


def dropout(
    x: Any, p: float = 0.5, training: bool = True, *, state: Tensor | None = None
) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p), in training; the
    mask is drawn from `state` (default: tracegrad.random's), which this advances."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], not {p}")
    x = as_tensor(x)
    if not training or p == 0.0:
        return x
    keep = random.uniform(x.shape, x.dtype, state) >= p
    return where(keep, x * (1.0 / (1.0 - p)) if p < 1.0 else x * 0.0, 0.0)


def layer_norm(
    x: Any,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the trailing `normalized_shape` axes (biased variance); scale and shift."""
    x = as_tensor(x)
    normalized_shape = tuple(normalized_shape)
    if x.shape[x.ndim - len(normalized_shape) :] != normalized_shape:
        raise ShapeError(
            f"layer_norm: input of shape {x.shape}, normalized_shape {normalized_shape}"
        )
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    centered = x - mean(x, axes, keepdims=True)
    y = centered / sqrt(mean(centered * centered, axes, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    return loss


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, not {reduction!r}")


def cross_entropy(
    input: Any,
    target: Any,
    weight: Any = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of (N, C) logits against class indices (N,) or class
    probabilities (N, C), as PyTorch's: per-class `weight`, `ignore_index` (index targets) and
    `label_smoothing` (the target mixed with the uniform distribution)."""
    _check_reduction("cross_entropy", reduction)
    logits, labels = as_tensor(input), as_tensor(target)
    if labels.dtype.kind == "f" and labels.shape == logits.shape and logits.ndim == 2:
        return _soft_cross_entropy(logits, labels, weight, reduction, label_smoothing)
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ShapeError(
            f"cross_entropy: logits {logits.shape} and labels {labels.shape}; "
            "expected logits (N, C) and labels (N,) or probabilities (N, C)"
        )
    if labels.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: labels must be integer class indices, not {labels.dtype}")
    labels = check_range(labels, 0, logits.shape[1], "cross_entropy: labels", ignore_index)
    logp = log_softmax(logits, axis=-1)
    nll, weights = _nll(logp, labels, weight, ignore_index)
    if label_smoothing:
        classes = logits.shape[1]
        w = 1.0 if weight is None else as_tensor(weight)
        smooth = -sum(logp * w, axis=-1) / float(classes)
        smooth = where(labels != ignore_index, smooth, 0.0)
        nll = nll * (1.0 - label_smoothing) + smooth * label_smoothing
    return _weighted_reduce(nll, weights, reduction)


def _nll(logp: Tensor, labels: Tensor, weight: Any, ignore_index: int) -> tuple[Tensor, Tensor]:
    """-logp[i, label_i] * weight[label_i] (0 for ignored samples) and those weights."""
    keep = labels != ignore_index
    safe = where(keep, labels, 0)
    picked = logp[np.arange(logp.shape[0]), safe]
    w = keep.astype(logp.dtype)
    if weight is not None:
        w = w * as_tensor(weight)[safe]
    return -(picked * w), w


def _weighted_reduce(loss: Tensor, weights: Tensor, reduction: str) -> Tensor:
    """PyTorch's weighted mean divides by the total weight of the (kept) targets."""
    return sum(loss) / sum(weights) if reduction == "mean" else _reduce(loss, reduction)


def _soft_cross_entropy(logits, probs, weight, reduction, label_smoothing) -> Tensor:
    classes = logits.shape[1]
    if label_smoothing:
        probs = probs * (1.0 - label_smoothing) + label_smoothing / classes
    w = 1.0 if weight is None else as_tensor(weight)
    loss = -sum(log_softmax(logits, axis=-1) * probs * w, axis=-1)
    return loss.mean() if reduction == "mean" else _reduce(loss, reduction)


def nll_loss(
    input: Any, target: Any, weight: Any = None, *, ignore_index: int = -100, reduction="mean"
) -> Tensor:
    """The negative log-likelihood of (N, C) log-probabilities at class indices (N,)."""
    _check_reduction("nll_loss", reduction)
    logp, labels = as_tensor(input), as_tensor(target)
    if logp.ndim != 2 or labels.shape != logp.shape[:1] or labels.dtype.kind not in "iu":
        raise ShapeError(
            f"nll_loss: input {logp.shape} and target {labels.shape} ({labels.dtype}); "
            "expected (N, C) log-probabilities and (N,) integer classes"
        )
    nll, weights = _nll(logp, labels, weight, ignore_index)
    return _weighted_reduce(nll, weights, reduction)


def _pair(op: str, input: Any, target: Any, reduction: str) -> tuple[Tensor, Tensor]:
    _check_reduction(op, reduction)
    input, target = as_tensor(input), as_tensor(target)
    if input.shape != target.shape:
        raise ShapeError(f"{op}: input {input.shape} and target {target.shape} differ")
    return input, target


def binary_cross_entropy(
    input: Any, target: Any, weight: Any = None, reduction: str = "mean"
) -> Tensor:
    """-(t log p + (1 - t) log(1 - p)), the logs clamped at -100 as in PyTorch."""
    p, t = _pair("binary_cross_entropy", input, target, reduction)
    loss = -(t * maximum(log(p), -100.0) + (1.0 - t) * maximum(log1p(-p), -100.0))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(
    input: Any, target: Any, weight: Any = None, reduction: str = "mean", pos_weight: Any = None
) -> Tensor:
    """Sigmoid and binary cross-entropy in one stable expression:
    (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)."""
    x, t = _pair("binary_cross_entropy_with_logits", input, target, reduction)
    scale = 1.0 if pos_weight is None else 1.0 + (as_tensor(pos_weight) - 1.0) * t
    loss = (1.0 - t) * x + scale * softplus(-x)
    return _reduce(loss if weight is None else loss * weight, reduction)


def l1_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    x, t = _pair("l1_loss", input, target, reduction)
    return _reduce(abs(x - t), reduction)


def smooth_l1_loss(input: Any, target: Any, reduction: str = "mean", beta: float = 1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (PyTorch's)."""
    x, t = _pair("smooth_l1_loss", input, target, reduction)
    d = abs(x - t)
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, (0.5 / beta) * d * d, d - 0.5 * beta), reduction)


def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta): smooth_l1_loss times delta."""
    x, t = _pair("huber_loss", input, target, reduction)
    d = abs(x - t)
    return _reduce(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def linear(input: Any, weight: Any, bias: Any = None) -> Tensor:
    """input @ weight.T + bias, weight of shape (out, in)."""
    y = as_tensor(input) @ as_tensor(weight).T
    return y if bias is None else y + bias


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    """Squared error. The shapes must match: a silent (N, 1) vs (N,) broadcast is a classic bug."""
    input, target = _pair("mse_loss", input, target, reduction)
    diff = input - target
    return _reduce(diff * diff, reduction)

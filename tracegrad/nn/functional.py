"""Activations and losses, written as compositions of tracegrad's primitives.

Nothing here has its own VJP: gradients, tracing and higher order come from the primitives.
Reductions and softmax-like functions take `axis` (NumPy's name), as everywhere in tracegrad.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import random
from ..api import check_range, log_softmax, maximum, mean, sigmoid, softmax, sqrt, sum, tanh, where
from ..errors import ShapeError
from ..tensor import Tensor, as_tensor

__all__ = [
    "cross_entropy",
    "dropout",
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


def cross_entropy(logits: Any, labels: Any, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy of (N, C) `logits` against integer class `labels` of shape (N,)."""
    _check_reduction("cross_entropy", reduction)
    logits, labels = as_tensor(logits), as_tensor(labels)
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ShapeError(
            f"cross_entropy: logits {logits.shape} and labels {labels.shape}; "
            "expected logits (N, C) and labels (N,)"
        )
    if labels.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: labels must be integer class indices, not {labels.dtype}")
    labels = check_range(labels, 0, logits.shape[1], "cross_entropy: labels")  # in plans too
    picked = log_softmax(logits, axis=-1)[np.arange(logits.shape[0]), labels]
    return _reduce(-picked, reduction)


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    """Squared error. The shapes must match: a silent (N, 1) vs (N,) broadcast is a classic bug."""
    _check_reduction("mse_loss", reduction)
    input, target = as_tensor(input), as_tensor(target)
    if input.shape != target.shape:
        raise ShapeError(f"mse_loss: input {input.shape} and target {target.shape} differ")
    diff = input - target
    return _reduce(diff * diff, reduction)

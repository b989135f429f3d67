"""Activations and losses, written as compositions of tracegrad's primitives.

Nothing here has its own VJP: gradients, tracing and higher order come from the primitives.
Reductions and softmax-like functions take `axis` (NumPy's name) or `dim` (PyTorch's), as
everywhere in tracegrad; losses take PyTorch's signatures.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError, warn_user
from tracegrad.core.ops import attention as attention_impl
from tracegrad.core.ops import losses
from tracegrad.core.primitives import abs, log, maximum, sigmoid, sqrt, tanh, where
from tracegrad.frontend import random, reductions
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.elementwise import hardshrink, prelu
from tracegrad.frontend.functions import (
    check_range,
    concatenate,
    matmul,
    permute,
    pytorch_keywords,
    reshape,
    same_dtypes,
    stack,
    take_along,
    transpose,
)
from tracegrad.frontend.linalg import vector_norm
from tracegrad.frontend.mutation import index_add, index_put, write
from tracegrad.frontend.promotion import promote_types
from tracegrad.frontend.rearrange import chunk
from tracegrad.frontend.reductions import amax, mean, sum
from tracegrad.frontend.tensor import Tensor, as_tensor
from tracegrad.nn.ctc import ctc_loss
from tracegrad.nn.fractional import (
    fractional_max_pool2d,
    fractional_max_pool2d_with_indices,
    fractional_max_pool3d,
    fractional_max_pool3d_with_indices,
)
from tracegrad.nn.spatial import affine_grid, grid_sample
from tracegrad.nn.volumetric import (
    adaptive_avg_pool3d,
    adaptive_max,
    adaptive_max_pool3d,
    avg_pool3d,
    ceil_extra,
    ceil_kernel,
    conv3d,
    conv_transpose3d,
    lp_pool3d,
    max_pool3d,
    max_unpool3d,
    takes_unbatched,
    unbatched,
    unpool,
)

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "affine_grid",
    "alpha_dropout",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "batch_norm",
    "bilinear",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "celu",
    "channel_shuffle",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cosine_embedding_loss",
    "cosine_similarity",
    "cross_entropy",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "elu",
    "embedding",
    "embedding_bag",
    "feature_alpha_dropout",
    "fold",
    "gaussian_nll_loss",
    "gelu",
    "glu",
    "grid_sample",
    "group_norm",
    "gumbel_softmax",
    "hardshrink",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "hinge_embedding_loss",
    "huber_loss",
    "instance_norm",
    "interpolate",
    "kl_div",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "local_response_norm",
    "log_softmax",
    "logsigmoid",
    "margin_ranking_loss",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_unpool2d",
    "mish",
    "mse_loss",
    "multilabel_soft_margin_loss",
    "nll_loss",
    "normalize",
    "one_hot",
    "pad",
    "pairwise_distance",
    "pixel_shuffle",
    "pixel_unshuffle",
    "poisson_nll_loss",
    "prelu",
    "relu",
    "relu6",
    "rms_norm",
    "scaled_dot_product_attention",
    "selu",
    "sigmoid",
    "silu",
    "smooth_l1_loss",
    "soft_margin_loss",
    "softmax",
    "softmin",
    "softplus",
    "softshrink",
    "softsign",
    "tanh",
    "tanhshrink",
    "threshold",
    "triplet_margin_loss",
    "unfold",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "triplet_margin_with_distance_loss",
    "ctc_loss",
    "relu_",
    "elu_",
    "leaky_relu_",
    "selu_",
    "celu_",
    "hardtanh_",
    "threshold_",
    "upsample",
    "upsample_nearest",
    "upsample_bilinear",
    "pdist",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "adaptive_max_pool3d",
    "max_unpool3d",
    "rrelu",
    "rrelu_",
    "max_unpool1d",
]


def relu(x: Any, inplace: bool = False) -> Tensor:
    """max(0, x). Zero comes first so that relu'(0) = 0, as in PyTorch (maximum sends ties left)."""
    return _in_place(x, maximum(0.0, as_tensor(x)), inplace, "relu")


def gelu(x: Any, approximate: str = "none") -> Tensor:
    """GELU: x Phi(x) with the exact normal CDF (erf), or with `approximate="tanh"`
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as PyTorch's: one op each, whose
    gradient is one op too."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    return (P.gelu_tanh if approximate == "tanh" else P.gelu)(as_tensor(x))


def silu(input: Any, inplace: bool = False) -> Tensor:
    """x * sigmoid(x) (swish), one op, as PyTorch's: its gradient is one op too."""
    x = as_tensor(input)
    return _in_place(input, P.silu(x), inplace, "silu")


def dropout(
    input: Any,
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    state: Tensor | None = None,
) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p), in training; the
    mask is drawn from `state` (default: frontend.random's), which this advances."""
    return _dropout(input, p, training, inplace, 0, "dropout", state)


def _dropout(input: Any, p: float, training: bool, inplace: bool, spatial: int, op: str,
             state: Tensor | None) -> Tensor:  # fmt: skip
    """`dropout` of each element, or (`spatial` > 0) of whole channels: all `spatial` trailing
    axes of a channel at once; a (C, *spatial) input is one sample."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p must be in [0, 1], not {p}")
    x = as_tensor(input)
    if op == "dropout2d" and x.ndim != 4:
        # PyTorch's dropout2d drops whatever its first two axes index, for any rank (a 3-d input
        # as (N, C, L), a 2-d one element by element), and warns that this is deprecated
        warnings.warn(f"dropout2d: a {x.ndim}-d input: each (first, second) index is dropped "
                      "as a whole, as PyTorch's deprecated behaviour (use dropout or dropout1d)",
                      stacklevel=3)  # fmt: skip
        spatial = builtins.max(x.ndim - 2, 0)
    elif spatial and x.ndim not in (spatial + 1, spatial + 2):
        raise ShapeError(f"{op}: input {x.shape} must be (N, C, *{spatial} spatial axes) or "
                         f"(C, *{spatial} spatial axes)")  # fmt: skip
    if not training or p == 0.0:
        return x
    mask_shape = x.shape[: x.ndim - spatial] + (1,) * spatial
    keep = random.uniform(mask_shape, x.dtype, state) >= p
    # x times the mask of 1/(1-p) and 0, as PyTorch's: a NaN stays NaN where dropped, and one
    # op for autograd (its mask is all it saves)
    mask = keep.astype(x.dtype) * (1.0 / (1.0 - p)) if p < 1.0 else 0.0
    return _in_place(input, x * mask, inplace, op)


def _half_in_half_out(norm: Callable) -> Callable:
    """PyTorch's mixed-precision norms on the CPU: a float16 input with parameters (or running
    statistics) of a wider float dtype (convolutions run in float16 while the norms' weights
    stay float32: CLIP's `convert_weights`) is normalized in float32 and comes back float16;
    the statistics move in float32."""

    @functools.wraps(norm)
    def run(input: Any, *args: Any, **kwargs: Any) -> Tensor:
        x = as_tensor(input)
        wider = any(isinstance(a, Tensor) and a.dtype.kind == "f" and a.dtype != x.dtype
                    for a in (*args, *kwargs.values()))  # fmt: skip
        if x.dtype != np.float16 or not wider:
            return norm(input, *args, **kwargs)
        return norm(x.astype(np.float32), *args, **kwargs).astype(np.float16)

    return run


@_half_in_half_out
def layer_norm(
    x: Any,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the trailing `normalized_shape` axes (biased variance); scale and shift.
    One op (`layer_norm`, a Numba kernel each way), the trailing axes seen as one."""
    x = as_tensor(x)
    normalized_shape = tuple(normalized_shape)
    if x.shape[x.ndim - len(normalized_shape) :] != normalized_shape or not normalized_shape:
        raise ShapeError(
            f"layer_norm: input of shape {x.shape}, normalized_shape {normalized_shape}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(as_tensor(t).shape) != normalized_shape:
            raise ShapeError(f"layer_norm: {name} of shape {as_tensor(t).shape} for "
                             f"normalized_shape {normalized_shape}")  # fmt: skip
    d = math.prod(normalized_shape)
    weight = Tensor._of(bfloat16.full(d, 1, x.dtype)) if weight is None else reshape(weight, (d,))
    bias = Tensor._of(np.zeros(d, x.dtype)) if bias is None else reshape(bias, (d,))
    dtype = functools.reduce(promote_types, (x.dtype, weight.dtype, bias.dtype))
    x, weight, bias = (t if t.dtype == dtype else t.astype(dtype) for t in (x, weight, bias))
    rows = x.shape[: x.ndim - len(normalized_shape)]
    y = P.layer_norm(reshape(x, (*rows, d)), weight, bias, eps=float(eps))
    return reshape(y, x.shape)


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    return loss


def legacy_reduction(size_average: Any, reduce: Any, reduction: str) -> str:
    """The `reduction` that PyTorch's deprecated `size_average=` and `reduce=` (either given)
    stand for, as PyTorch reads them: both true unless given, "mean" if both, "sum" if only
    `reduce`, else "none"; otherwise `reduction`."""
    if size_average is None and reduce is None:
        return reduction
    if isinstance(size_average, str) or isinstance(reduce, str):  # PyTorch reads it as true
        raise TypeError(
            f"size_average={size_average!r}, reduce={reduce!r}: these deprecated flags are "
            "booleans; give the reduction by keyword (reduction=...)"
        )
    warnings.warn("size_average and reduce args will be deprecated, please use reduction=...",
                  UserWarning, stacklevel=3)  # fmt: skip
    if reduce is None or reduce:
        return "mean" if size_average is None or size_average else "sum"
    return "none"


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in losses.REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {losses.REDUCTIONS}, not {reduction!r}")


def cross_entropy(
    input: Any,
    target: Any,
    weight: Any = None,
    *,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of (N, C) logits against class indices (N,) or class
    probabilities (N, C), as PyTorch's: per-class `weight`, `ignore_index` (index targets) and
    `label_smoothing` (the target mixed with the uniform distribution). Also PyTorch's other
    shapes: (N, C, d1, ...) against (N, d1, ...) or probabilities of the logits' shape, and one
    unbatched sample, (C,) against a class () or probabilities (C,)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("cross_entropy", reduction)
    logits, labels = as_tensor(input), as_tensor(target)
    if logits.ndim == 1:
        return _one_sample(cross_entropy, logits, labels, weight, ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=label_smoothing)  # fmt: skip
    if labels.dtype.kind == "f" and labels.shape == logits.shape and logits.ndim >= 2:
        loss = _soft_cross_entropy(_rows(logits), _rows(labels), weight, reduction,
                                   label_smoothing)  # fmt: skip
        shape = (logits.shape[0], *logits.shape[2:])
        return reshape(loss, shape) if reduction == "none" else loss
    if logits.ndim > 2 and labels.dtype.kind in "iu":  # (N, C, d1, ...) and (N, d1, ...)
        flat, flat_labels, shape = _classes_last(logits, labels, "cross_entropy")
        loss = cross_entropy(flat, flat_labels, weight, ignore_index=ignore_index,
                             reduction=reduction, label_smoothing=label_smoothing)  # fmt: skip
        return reshape(loss, shape) if reduction == "none" else loss
    if logits.ndim != 2 or labels._value.shape != logits._value.shape[:1]:
        raise ShapeError(
            f"cross_entropy: logits {logits.shape} and labels {labels.shape}; "
            "expected logits (N, C) and labels (N,) or probabilities (N, C)"
        )
    if labels._value.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: labels must be integer class indices, not {labels.dtype}")
    labels = _class_indices(labels, logits._value.shape[1], ignore_index, "cross_entropy: labels")
    if not label_smoothing:
        weights = () if weight is None else (as_tensor(weight),)
        return P.cross_entropy(logits, labels, *weights, ignore_index=ignore_index,
                               reduction=reduction)  # fmt: skip
    logp = log_softmax(logits, axis=-1)
    nll, weights = losses.nll_parts(logp, labels, weight, ignore_index)
    w = 1.0 if weight is None else as_tensor(weight)
    smooth = -sum(logp * w, axis=-1) / float(logits.shape[1])
    smooth = where(labels != ignore_index, smooth, 0.0)
    nll = nll * (1.0 - label_smoothing) + smooth * label_smoothing
    return losses.weighted_reduce(nll, weights, reduction)


def _classes_last(x: Tensor, labels: Tensor, op: str) -> tuple[Tensor, Tensor, tuple]:
    """PyTorch's K-dimensional form, (N, C, d1, ...) scores and (N, d1, ...) classes, as (M, C)
    and (M,): one row per position; and the shape of the per-position losses."""
    shape = (x.shape[0], *x.shape[2:])
    if labels.shape != shape:
        raise ShapeError(f"{op}: input {x.shape} and target {labels.shape}; expected "
                         f"(N, C, d1, ...) and (N, d1, ...) = {shape}")  # fmt: skip
    return _rows(x), reshape(labels, (-1,)), shape


def _rows(x: Tensor) -> Tensor:
    """(N, C, d1, ...) as (N d1 ..., C): one row per position, in (N, d1, ...)'s order."""
    return x if x.ndim == 2 else reshape(permute(x, (0, *range(2, x.ndim), 1)), (-1, x.shape[1]))


def _one_sample(loss: Callable, x: Tensor, target: Tensor, *args: Any, reduction: str,
                **kwargs: Any) -> Tensor:  # fmt: skip
    """`loss` of one unbatched sample, (C,) scores: a batch of one, whose unreduced loss is 0-d."""
    out = loss(reshape(x, (1, -1)), reshape(target, (1, *target.shape)), *args,
               reduction=reduction, **kwargs)  # fmt: skip
    return reshape(out, ()) if reduction == "none" else out


def _class_indices(labels: Tensor, classes: int, ignore_index: int, what: str) -> Tensor:
    """`labels` as int64, after checking each is a class or `ignore_index` (in the plan when
    traced): an index of -1 would read the last class. Unsigned labels cannot hold
    ignore_index = -100, so they are compared as int64."""
    labels = check_range(labels, 0, classes, what, ignore_index)
    return labels if labels._value.dtype == np.int64 else labels.astype(np.int64)


def _soft_cross_entropy(logits, probs, weight, reduction, label_smoothing) -> Tensor:
    classes = logits.shape[1]
    if label_smoothing:
        probs = probs * (1.0 - label_smoothing) + label_smoothing / classes
    w = 1.0 if weight is None else as_tensor(weight)
    loss = -sum(log_softmax(logits, axis=-1) * probs * w, axis=-1)
    return loss.mean() if reduction == "mean" else _reduce(loss, reduction)


def nll_loss(input: Any, target: Any, weight: Any = None, *, size_average: Any = None,
             ignore_index: int = -100, reduce: Any = None, reduction="mean") -> Tensor:  # fmt: skip
    """The negative log-likelihood of (N, C) log-probabilities at class indices (N,)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("nll_loss", reduction)
    logp, labels = as_tensor(input), as_tensor(target)
    if logp.ndim == 1:  # one unbatched sample: (C,) and a class ()
        return _one_sample(nll_loss, logp, labels, weight, ignore_index=ignore_index,
                           reduction=reduction)  # fmt: skip
    if logp.ndim > 2 and labels.dtype.kind in "iu":  # (N, C, d1, ...) and (N, d1, ...)
        flat, flat_labels, shape = _classes_last(logp, labels, "nll_loss")
        loss = nll_loss(flat, flat_labels, weight, ignore_index=ignore_index, reduction=reduction)
        return reshape(loss, shape) if reduction == "none" else loss
    if logp.ndim != 2 or labels.shape != logp.shape[:1] or labels.dtype.kind not in "iu":
        raise ShapeError(
            f"nll_loss: input {logp.shape} and target {labels.shape} ({labels.dtype}); "
            "expected (N, C) log-probabilities and (N,) integer classes"
        )
    labels = _class_indices(labels, logp.shape[1], ignore_index, "nll_loss: target")
    weights = () if weight is None else (as_tensor(weight),)
    return P.nll_loss(logp, labels, *weights, ignore_index=ignore_index, reduction=reduction)


def _same_shapes(op: str, input: Any, target: Any, reduction: str) -> tuple[Tensor, Tensor]:
    _check_reduction(op, reduction)
    input, target = as_tensor(input), as_tensor(target)
    if input.shape != target.shape:
        raise ShapeError(f"{op}: input {input.shape} and target {target.shape} differ")
    return input, target


def _broadcast_target(op: str, input: Any, target: Any, reduction: str) -> tuple[Tensor, Tensor]:
    """PyTorch's regression losses broadcast a target of another shape against the input, with
    its warning: an (N, 1) input and an (N,) target make an (N, N) loss, a classic bug."""
    _check_reduction(op, reduction)
    input, target = as_tensor(input), as_tensor(target)
    if input.shape != target.shape:
        try:
            np.broadcast_shapes(input.shape, target.shape)
        except ValueError:
            raise ShapeError(f"{op}: input {input.shape} and target {target.shape} do not "
                             "broadcast") from None  # fmt: skip
        warn_user(f"Using a target size {target.shape} that is different to the input size "
                  f"{input.shape}. This will likely lead to incorrect results due to "
                  "broadcasting. Please ensure they have the same size.")  # fmt: skip
    return input, target


def binary_cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Any = None,
                         reduce: Any = None, reduction: str = "mean") -> Tensor:  # fmt: skip
    """-(t log p + (1 - t) log(1 - p)), the logs clamped at -100 and the gradient PyTorch's,
    0 (not NaN) at a probability saturated towards its target (`P.binary_cross_entropy`)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    p, t = _same_shapes("binary_cross_entropy", input, target, reduction)
    loss = P.binary_cross_entropy(p, t)
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None,
                                     size_average: Any = None, reduce: Any = None,
                                     reduction: str = "mean",
                                     pos_weight: Any = None) -> Tensor:  # fmt: skip
    """Sigmoid and binary cross-entropy in one stable expression:
    (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _same_shapes("binary_cross_entropy_with_logits", input, target, reduction)
    scale = 1.0 if pos_weight is None else 1.0 + (as_tensor(pos_weight) - 1.0) * t
    loss = (1.0 - t) * x + scale * P.softplus(-x)
    return _reduce(loss if weight is None else loss * weight, reduction)


def l1_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> Tensor:  # fmt: skip
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _broadcast_target("l1_loss", input, target, reduction)
    return _reduce(abs(x - t), reduction)


def smooth_l1_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                   reduction: str = "mean", beta: float = 1.0):  # fmt: skip
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (PyTorch's)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = _broadcast_target("smooth_l1_loss", input, target, reduction)
    d = abs(x - t)
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, (0.5 / beta) * d * d, d - 0.5 * beta), reduction)


def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta): smooth_l1_loss times delta."""
    x, t = _broadcast_target("huber_loss", input, target, reduction)
    d = abs(x - t)
    return _reduce(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def linear(input: Any, weight: Any, bias: Any = None) -> Tensor:
    """input @ weight.T + bias, weight of shape (out, in) (or (in,): no out axis, a 0-d bias);
    all of one dtype, as PyTorch's."""
    input, weight = as_tensor(input), as_tensor(weight)
    if weight.ndim == 1:
        y = linear(input, reshape(weight, (1, -1)), None if bias is None else reshape(bias, (1,)))
        return reshape(y, y.shape[:-1])
    bias = () if bias is None else (as_tensor(bias),)
    same_dtypes("linear", input, weight, *bias)
    return P.linear(input, weight, *bias)


def mse_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> Tensor:  # fmt: skip
    """Squared error; a target of another shape broadcasts, with PyTorch's warning."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = _broadcast_target("mse_loss", input, target, reduction)
    diff = input - target
    return _reduce(diff * diff, reduction)


# --- convolution and pooling (NCHW) ---------------------------------------------------------------


def _pair(v: int | Sequence[int], op: str, what: str) -> tuple[int, int]:
    pair = (int(v), int(v)) if isinstance(v, int | np.integer) else tuple(int(a) for a in v)
    if len(pair) != 2:
        raise ValueError(f"{op}: {what} must be an int or a pair, not {v!r}")
    return pair


def _conv_padding(padding: Any, kernel: Sequence[int], stride, dilation, op: str) -> tuple:
    """PyTorch's padding argument as ((top, bottom), (left, right)); "same" puts any odd pixel
    on the bottom/right, as PyTorch does."""
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(f"{op}: padding='same' needs stride 1, not {tuple(stride)}")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return tuple((t // 2, t - t // 2) for t in totals)
    if isinstance(padding, str):
        raise ValueError(f"{op}: padding must be 'same', 'valid', an int or a pair: {padding!r}")
    return tuple((p, p) for p in _pair(padding, op, "padding"))


def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | str = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """2-d cross-correlation of (N, C, H, W) `input` (or one (C, H, W) image) with
    (out, C / groups, kh, kw) `weight`."""
    input, weight = as_tensor(input), as_tensor(weight)
    if input.ndim == 3:
        return unbatched(conv2d, input, weight, bias, stride, padding, dilation, groups)
    same_dtypes("conv2d", input, weight, None if bias is None else as_tensor(bias))
    stride, dilation = _pair(stride, "conv2d", "stride"), _pair(dilation, "conv2d", "dilation")
    if weight.ndim != 4:
        raise ShapeError(f"conv2d: weight {weight.shape} must be 4-d (out, in / groups, kh, kw)")
    pad = _conv_padding(padding, weight.shape[2:], stride, dilation, "conv2d")
    y = P.conv2d(input, weight, stride=stride, padding=pad, dilation=dilation, groups=int(groups))
    return y if bias is None else y + reshape(bias, (-1, 1, 1))


def conv1d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: int = 1,
    padding: int | str = 0,
    dilation: int = 1,
    groups: int = 1,
) -> Tensor:
    """1-d cross-correlation of (N, C, L) `input` (or one (C, L) signal) with (out, C / groups,
    k) `weight`: a conv2d over a height of one."""
    input, weight = as_tensor(input), as_tensor(weight)
    if input.ndim == 2:
        return unbatched(conv1d, input, weight, bias, stride, padding, dilation, groups)
    if input.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"conv1d: input {input.shape} and weight {weight.shape} must be 3-d")
    one = lambda v: (1, v if isinstance(v, int) else v[0])
    pad = padding if isinstance(padding, str) else (0, one(padding)[1])
    y = conv2d(reshape(input, (*input.shape[:2], 1, input.shape[2])),
               reshape(weight, (*weight.shape[:2], 1, weight.shape[2])), bias, one(stride), pad,
               one(dilation), groups)  # fmt: skip
    return reshape(y, (y.shape[0], y.shape[1], y.shape[3]))


def _pad_value(x: Tensor, padding: tuple[int, int], value: float) -> Tensor:
    """`x` with `value` around its last two axes."""
    (ph, pw), (n, c, h, w) = padding, x.shape
    if ph:
        rows = Tensor._of(bfloat16.full((n, c, ph, w), value, x.dtype))
        x = concatenate([rows, x, rows], axis=2)
    if pw:
        cols = Tensor._of(bfloat16.full((n, c, h + 2 * ph, pw), value, x.dtype))
        x = concatenate([cols, x, cols], axis=3)
    return x


def _windows(x: Tensor, op: str, kernel_size, stride, padding, dilation, value: float) -> list:
    """The kh * kw strided views whose elementwise max (or sum) is the pooling: each is the
    window element (i, j) of every output position."""
    if x.ndim != 4:
        raise ShapeError(f"{op}: input {x.shape} must be 4-d (N, C, H, W)")
    (kh, kw) = _pair(kernel_size, op, "kernel_size")
    (sh, sw) = _pair(stride if stride is not None and stride != [] else (kh, kw), op, "stride")
    pad, (dh, dw) = _pair(padding, op, "padding"), _pair(dilation, op, "dilation")
    if 2 * pad[0] > kh or 2 * pad[1] > kw:
        raise ValueError(f"{op}: padding {pad} must be at most half the kernel {(kh, kw)}")
    xp = _pad_value(x, pad, value)
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: input {x.shape} is smaller than the kernel {(kh, kw)}")
    return [
        xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]


@takes_unbatched(3)
def max_pool2d(
    input: Any,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """The max over each window (padding counts as -inf); ties send the gradient to the first
    maximum, as PyTorch does. Backward keeps only the (int8) positions of the maxima; the Numba
    backend runs kernels of its own (tracegrad.compiler.kernels.pool). `ceil_mode` pads the
    bottom right with -inf for the last partial windows; `return_indices` also gives each
    maximum's flat position in its (H, W) plane (what `max_unpool2d` takes)."""
    x = as_tensor(input)
    if x.ndim != 4:
        raise ShapeError(f"max_pool2d: input {x.shape} must be 4-d (N, C, H, W)")
    kernel = _pair(kernel_size, "max_pool2d", "kernel_size")
    geometry = dict(
        kernel=kernel,
        stride=_pair(stride if stride is not None and stride != [] else kernel, "max_pool2d",
                     "stride"),
        padding=_pair(padding, "max_pool2d", "padding"),
        dilation=_pair(dilation, "max_pool2d", "dilation"),
    )  # fmt: skip
    plane = x.shape[2:]
    if ceil_mode:
        kernel = geometry["kernel"] = ceil_kernel(plane, kernel, geometry["padding"],
                                                  geometry["dilation"])  # fmt: skip
        eh, ew = ceil_extra(x.shape[2:], kernel, geometry["stride"], geometry["padding"],
                            geometry["dilation"])  # fmt: skip
        if eh or ew:
            x = pad(x, (0, ew, 0, eh), value=-math.inf)
    with no_grad():
        idx = P.max_pool2d_argmax(x, **geometry)
    out = P.max_pool2d(x, idx, **geometry)
    return (out, _flat_positions(idx, plane, **geometry)) if return_indices else out


def _flat_positions(idx: Tensor, plane: tuple[int, int], *, kernel: tuple, stride: tuple,
                    padding: tuple, dilation: tuple) -> Tensor:  # fmt: skip
    """Each window's maximum as a flat index into the input's (H, W) plane: the window's
    origin plus the tap `idx` (row-major in the kernel)."""
    with no_grad():
        oh, ow = idx.shape[2:]
        tap_row, tap_col = idx.astype(np.int64) // kernel[1], idx.astype(np.int64) % kernel[1]
        rows = (
            Tensor._of(np.arange(oh).reshape(-1, 1) * stride[0] - padding[0])
            + tap_row * dilation[0]
        )
        cols = Tensor._of(np.arange(ow) * stride[1] - padding[1]) + tap_col * dilation[1]
        return rows * plane[1] + cols


def max_unpool2d(input: Any, indices: Any, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:  # fmt: skip
    """The inverse of `max_pool2d(..., return_indices=True)`: each value placed at its index in
    a zero (H, W) plane (the size max pooling came from, or `output_size`)."""
    x, idx = as_tensor(input), as_tensor(indices)
    if x.ndim != 4 or idx.shape != x.shape:
        raise ShapeError(f"max_unpool2d: input {x.shape} and indices {idx.shape} must be the same "
                         "4-d shape")  # fmt: skip
    (kh, kw) = _pair(kernel_size, "max_unpool2d", "kernel_size")
    (sh, sw) = _pair(stride if stride is not None and stride != [] else (kh, kw), "max_unpool2d",
                     "stride")  # fmt: skip
    (ph, pw) = _pair(padding, "max_unpool2d", "padding")
    if output_size is None:
        h, w = (x.shape[2] - 1) * sh - 2 * ph + kh, (x.shape[3] - 1) * sw - 2 * pw + kw
    else:
        h, w = tuple(output_size)[-2:]
    return unpool(x, idx, (h, w), sh < kh or sw < kw)


@takes_unbatched(3)
def avg_pool2d(
    input: Any,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """The mean over each window; padding zeros count unless `count_include_pad=False`. With
    `ceil_mode` the last partial windows count only what lies inside the padded input, as in
    PyTorch."""
    x = as_tensor(input)
    if x.dtype.kind != "f":  # PyTorch refuses integers too (but int64, which it truncates)
        raise TypeError(f"avg_pool2d: input must be floating, not {x.dtype} (its window sums "
                        "would wrap around); convert it first, e.g. x.float()")  # fmt: skip
    if x.ndim != 4:
        raise ShapeError(f"avg_pool2d: input {x.shape} must be 4-d (N, C, H, W)")
    kernel = _pair(kernel_size, "avg_pool2d", "kernel_size")
    strides = _pair(stride if stride is not None and stride != [] else kernel, "avg_pool2d",
                    "stride")  # fmt: skip
    pads = _pair(padding, "avg_pool2d", "padding")
    if ceil_mode:
        kernel = ceil_kernel(x.shape[2:], kernel, pads)
    extra = ceil_extra(x.shape[2:], kernel, strides, pads) if ceil_mode else (0, 0)
    plane = x.shape[2:]
    if extra != (0, 0):
        x = pad(x, (0, extra[1], 0, extra[0]))
    total = functools.reduce(
        lambda a, b: a + b, _windows(x, "avg_pool2d", kernel, strides, pads, 1, 0.0)
    )
    if divisor_override:
        return total / float(divisor_override)
    if extra == (0, 0) and (count_include_pad or pads == (0, 0)):
        return total / float(kernel[0] * kernel[1])
    counted = _window_count(plane, kernel, strides, pads, extra, count_include_pad)
    return total / counted.astype(x.dtype)


def _window_count(plane: tuple, kernel: tuple, stride: tuple, padding: tuple, extra: tuple,
                  include_pad: bool) -> np.ndarray:  # fmt: skip
    """How many of each window's elements are counted: those inside the input, or with
    `include_pad` inside the padded input (never the rows `ceil_mode` added): a constant."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    if include_pad:
        inside = np.ones((plane[0] + 2 * ph, plane[1] + 2 * pw))
    else:
        inside = np.pad(np.ones(plane), ((ph, ph), (pw, pw)))
    inside = np.pad(inside, ((0, extra[0]), (0, extra[1])))
    oh, ow = (inside.shape[0] - kh) // sh + 1, (inside.shape[1] - kw) // sw + 1
    return builtins.sum(inside[i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
                        for i in range(kh) for j in range(kw))  # fmt: skip


def _adaptive(input: Any, output_size: Any, op: str, tiled: Callable, reduce: Callable) -> Tensor:
    """A reduction over PyTorch's adaptive windows of (N, C, H, W): rows floor(i H / oh) to
    ceil((i + 1) H / oh), columns likewise. `tiled(x, kh, kw)` where the windows tile the image
    (kh x kw each), else `reduce(window, axes)` of each window, stacked."""
    x = as_tensor(input)
    if x.ndim != 4:
        raise ShapeError(f"{op}: input {x.shape} must be 4-d (N, C, H, W)")
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    h, w = x.shape[2:]
    oh, ow = (h if size[0] is None else size[0]), (w if size[1] is None else size[1])
    if h % oh == 0 and w % ow == 0:
        return tiled(x, h // oh, w // ow)
    window = lambda i, o, s: slice(i * s // o, -(-(i + 1) * s // o))
    rows = [stack([reduce(x[:, :, window(i, oh, h), window(j, ow, w)], (2, 3))
                   for j in range(ow)], axis=-1) for i in range(oh)]  # fmt: skip
    return stack(rows, axis=2)


@takes_unbatched(3)
def adaptive_avg_pool2d(input: Any, output_size: int | Sequence[int | None]) -> Tensor:
    """The mean over each of PyTorch's adaptive windows (`_adaptive`)."""

    def tiled(x: Tensor, kh: int, kw: int) -> Tensor:
        n, c, h, w = x.shape
        return mean(reshape(x, (n, c, h // kh, kh, w // kw, kw)), axis=(3, 5))

    return _adaptive(input, output_size, "adaptive_avg_pool2d", tiled, mean)


# --- embeddings, attention, normalization -----------------------------------------------------


@pytorch_keywords
def gumbel_softmax(logits: Any, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:  # fmt: skip
    """A differentiable sample of a categorical: softmax((logits + Gumbel noise) / tau) along
    `dim`; with `hard`, the one-hot of its argmax forward and the soft sample's gradient
    backward (straight through). The noise comes from tracegrad's random state, so a traced
    step draws afresh at every call."""
    x = as_tensor(logits)
    u = random.uniform(x.shape, x.dtype)
    gumbels = -log(-log(maximum(u, float(bfloat16.finfo(x.dtype).tiny))))  # -log Exponential(1)
    soft = softmax((x + gumbels) / tau, dim)
    if not hard:
        return soft
    with no_grad():
        one_hot = (soft == amax(soft, dim, keepdim=True)).astype(x.dtype)
        one_hot = one_hot / sum(one_hot, dim, keepdim=True)  # a tie (measure zero) shares
    return one_hot - soft.detach() + soft


def embedding(input: Any, weight: Any, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:  # fmt: skip
    """Rows of `weight` picked by integer `input`; the gradient is a scatter-add into the rows
    (getitem's VJP), and the row `padding_idx` gets none. With `max_norm`, the picked rows are
    first renormalized in `weight` itself (`embedding_renorm_`); with `scale_grad_by_freq`,
    each pick's gradient is divided by how often its index occurs in `input`. `sparse` is
    accepted (the gradient is dense)."""
    input, weight = as_tensor(input), as_tensor(weight)
    if input.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, not {input.dtype}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight {weight.shape} must be 2-d (num_embeddings, dim)")
    input = check_range(input, 0, weight.shape[0], "embedding: indices")  # -1 would read a row
    if max_norm is not None:
        embedding_renorm_(weight, input, max_norm, norm_type)
    out = weight[input]
    if scale_grad_by_freq:
        with no_grad():
            flat = reshape(input, (-1,))
            ones = Tensor._of(bfloat16.full(flat.shape, 1, weight.dtype))
            counts = index_add(Tensor._of(np.zeros(weight.shape[0], weight.dtype)), 0, flat, ones)
            frequency = reshape(counts[input], (*input.shape, 1))
        out = out.detach() + (out - out.detach()) / frequency  # out's value, its gradient scaled
    if padding_idx is None:
        return out
    padding_idx %= weight.shape[0]
    keep = reshape(input != padding_idx, (*input.shape, 1))
    return where(keep, out, weight.detach()[input])


def embedding_renorm_(weight: Tensor, input: Any, max_norm: float, norm_type: float) -> Tensor:
    """PyTorch's: each row of `weight` that `input` picks whose `norm_type`-norm exceeds
    `max_norm` scaled by max_norm / (norm + 1e-7), in place and untracked (a traced step writes
    the table at every call, as state)."""
    with no_grad():
        index = reshape(as_tensor(input), (-1,))
        rows = weight.detach()[index]
        norms = vector_norm(rows, norm_type, 1, keepdim=True)
        scale = where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).astype(weight.dtype)
        weight._assign(index_put(weight.detach(), (index,), rows * scale))
    return weight


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """int64 indicator vectors along a new last axis."""
    t = as_tensor(tensor)
    if t.dtype.kind not in "iu":
        raise TypeError(f"one_hot: indices must be integers, not {t.dtype}")
    if num_classes < 0:
        num_classes = int(t.numpy().max()) + 1 if t.size else 0
    t = check_range(t, 0, num_classes, "one_hot: indices")  # else a row of zeros
    classes = Tensor._of(np.arange(num_classes, dtype=t.dtype))
    return (reshape(t, (*t.shape, 1)) == classes).astype(np.int64)


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., L, E) queries and (..., S, E) keys; with
    `enable_gqa`, keys and values of fewer heads (axis -3) than the queries serve groups of
    them, each repeated in turn (PyTorch's repeat_interleave) to the queries' count. A boolean
    mask says which keys a query may attend to (True: attend); a float mask is added. Without a
    mask, or with `is_causal`, it is one op (`attention`, fused kernels forward and backward);
    a mask, leading axes that broadcast, or `dropout_p` (on the probabilities, drawn as
    `dropout` draws) take the composed ops."""
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
    if enable_gqa:
        k, v = _repeat_heads(k, q, "key"), _repeat_heads(v, q, "value")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] \
            or k.shape[-2] != v.shape[-2]:  # fmt: skip
        raise ShapeError(
            f"scaled_dot_product_attention: query {q.shape}, key {k.shape} and value "
            f"{v.shape}; expected (..., L, E), (..., S, E), (..., S, Ev)"
        )
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    same = q.shape[:-2] == k.shape[:-2] == v.shape[:-2] and k.shape[-2] > 0
    fused = attn_mask is None and same and not dropout_p
    if fused and q.dtype == k.dtype == v.dtype and q.dtype.kind == "f":
        # the op's result has its heads next to its features: heads first again, as a view
        return attention_impl.heads_next(P.attention(q, k, v, scale=scale, causal=bool(is_causal)))
    if is_causal:
        attn_mask = Tensor._of(attention_impl.causal_mask(q.shape[-2], k.shape[-2]))
    return matmul(dropout(_probabilities(q, k, scale, attn_mask), dropout_p), v)


def _repeat_heads(x: Tensor, q: Tensor, what: str) -> Tensor:
    """(..., Hk, S, E) keys or values as (..., Hq, S, E), the queries' heads: each head
    repeated Hq / Hk times in turn."""
    if x.ndim < 3 or q.ndim < 3 or q.shape[-3] % x.shape[-3]:
        raise ShapeError(f"scaled_dot_product_attention: enable_gqa needs the {what}'s heads "
                         f"(axis -3 of {x.shape}) to divide the query's ({q.shape})")  # fmt: skip
    groups = q.shape[-3] // x.shape[-3]
    if groups == 1:
        return x
    grouped = _repeat_axis(reshape(x, (*x.shape[:-2], 1, *x.shape[-2:])), x.ndim - 2, groups)
    return reshape(grouped, (*x.shape[:-3], q.shape[-3], *x.shape[-2:]))


def _probabilities(q: Tensor, k: Tensor, scale: float, mask: Any) -> Tensor:
    """softmax(q k^T * scale + mask) over the keys, in composed ops. A query the mask lets see
    no key gets probabilities 0, as in PyTorch: its output is 0 and its gradients are finite
    (softmax would make the row NaN, and through v's gradient every row of it)."""
    scores = matmul(q, _mT(k)) * scale
    if mask is None:
        return softmax(scores, axis=-1)
    mask = as_tensor(mask)
    scores = where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    keys = (scores.ndim - 1,)
    m = P.max(scores, axis=keys, keepdims=True).detach()
    e = P.exp(scores - where(m == -np.inf, 0.0, m))  # a row of -inf: exp gives zeros
    total = P.sum(e, axis=keys, keepdims=True)
    return e / where(total == 0.0, 1.0, total)  # (a NaN stays NaN, as in softmax)


def _mT(x: Tensor) -> Tensor:
    return transpose(x, -1, -2)


@_half_in_half_out
def batch_norm(
    input: Any,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float | Tensor = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize each channel (axis 1) of (N, C, ...) `input`: by the batch's statistics in
    training (and then the running statistics move towards them, in place and without
    gradient; a traced step writes them back as state), else by the running statistics."""
    x = as_tensor(input)
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: input {x.shape} must be (N, C, ...)")
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training:
        count = x.size // x.shape[1]
        if count < 2:
            raise ValueError(f"batch_norm: expected more than 1 value per channel, got {x.shape}")
        if running_mean is not None and running_var is not None:
            with no_grad():  # the same statistics as the normalization's (cse shares them)
                stats = P.batch_stats(x)
                m = momentum
                new_mean = running_mean * (1.0 - m) + stats[0] * m
                new_var = running_var * (1.0 - m) + stats[1] * (count / (count - 1) * m)
                running_mean._assign(new_mean)
                running_var._assign(new_var)
        c = (x.shape[1],)
        weight = Tensor._of(bfloat16.full(c, 1, x.dtype)) if weight is None else as_tensor(weight)
        bias = Tensor._of(np.zeros(c, x.dtype)) if bias is None else as_tensor(bias)
        return P.batch_norm(x, weight, bias, eps=float(eps))
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm: evaluation needs running_mean and running_var")
    centered = x - reshape(running_mean, shape)
    scale = 1.0 / sqrt(reshape(running_var, shape) + eps)
    if weight is not None:
        scale = scale * reshape(weight, shape)
    y = centered * scale
    return y if bias is None else y + reshape(bias, shape)


# --- activations with PyTorch's arguments -----------------------------------------------------


def _in_place(input: Any, result: Tensor, inplace: bool, op: str) -> Tensor:
    """PyTorch's `inplace=True`: `result` written into the input tensor by Tensor's in-place
    rules, so code that reads the input afterwards (`self.act(x); return x`) sees it, with its
    gradient, also through a view."""
    if not inplace or not isinstance(input, Tensor):
        return result
    return write(input, result, op + "(inplace=True)")


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else negative_slope * x (also the gradient at 0, as PyTorch's)."""
    x = as_tensor(input)
    return _in_place(input, where(x > 0.0, x, x * negative_slope), inplace, "leaky_relu")


def elu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha (exp(x) - 1). The exponential sees min(x, 0): the branch not
    taken must not overflow, or its zero gradient times infinity would be NaN."""
    x = as_tensor(input)
    return _in_place(input, where(x > 0.0, x, P.expm1(P.minimum(x, 0.0)) * alpha), inplace, "elu")


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(input: Any, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with the self-normalizing constants."""
    return _in_place(input, elu(input, _SELU_ALPHA) * _SELU_SCALE, inplace, "selu")


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch's)."""
    x = as_tensor(input)
    smooth = P.softplus(x * beta) if beta == 1.0 else P.softplus(x * beta) * (1.0 / beta)
    return where(x * beta > threshold, x, smooth)


def mish(input: Any, inplace: bool = False) -> Tensor:
    """x tanh(softplus(x))."""
    x = as_tensor(input)
    return _in_place(input, x * tanh(P.softplus(x)), inplace, "mish")


def hardtanh(
    input: Any, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """x clipped to [min_val, max_val]; the gradient is zero at the bounds too, as PyTorch's."""
    x = as_tensor(input)
    clipped = where(x <= min_val, min_val, where(x >= max_val, max_val, x)).astype(x.dtype)
    return _in_place(input, clipped, inplace, "hardtanh")


# --- transposed convolution ---------------------------------------------------------------------


def conv_transpose2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    groups: int = 1,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """The transposed convolution of (N, in, H, W) `input` with (in, out / groups, kh, kw)
    `weight`: the gradient of a conv2d with respect to its input, one op (`conv2d_input_grad`)
    whose VJPs are the convolution and its weight gradient, so every order of derivative is
    exact and the Numba backend runs its conv kernels. `output_padding` adds rows and columns at
    the bottom and right of the output."""
    op = "conv_transpose2d"
    x, w = as_tensor(input), as_tensor(weight)
    same_dtypes(op, x, w, None if bias is None else as_tensor(bias))
    if x.ndim == 3:  # one unbatched image
        return unbatched(conv_transpose2d, x, w, bias, stride, padding, output_padding, groups,
                         dilation)  # fmt: skip
    groups = int(groups)
    if x.ndim != 4 or w.ndim != 4 or groups < 1 or x.shape[1] != w.shape[0] or w.shape[0] % groups:
        raise ShapeError(f"{op}: input {x.shape} and weight {w.shape} with groups={groups}; "
                         "expected (N, in, H, W) and (in, out / groups, kh, kw), in divisible by "
                         "groups")  # fmt: skip
    stride, dilation = _pair(stride, op, "stride"), _pair(dilation, op, "dilation")
    pad, extra = _pair(padding, op, "padding"), _pair(output_padding, op, "output_padding")
    for i in range(2):
        if min(stride[i], dilation[i]) < 1 or pad[i] < 0:
            raise ValueError(f"{op}: stride {stride} and dilation {dilation} must be positive, "
                             f"padding {pad} non-negative")  # fmt: skip
        if not 0 <= extra[i] < builtins.max(stride[i], dilation[i]):
            raise ValueError(f"{op}: output_padding {extra} must be smaller than the stride "
                             f"{stride} or the dilation {dilation}")  # fmt: skip
    kernel = w.shape[2:]
    size = tuple((x.shape[2 + i] - 1) * stride[i] - 2 * pad[i] + dilation[i] * (kernel[i] - 1)
                 + extra[i] + 1 for i in range(2))  # fmt: skip
    if builtins.min(size) < 1:
        raise ShapeError(f"{op}: input {x.shape}, weight {w.shape} and padding {pad} give an "
                         f"empty output {size}")  # fmt: skip
    # the convolution of the output covers the input, plus (for an output_padding of at least
    # the stride) positions past its end: zeros, which add nothing
    covers = [(size[i] + 2 * pad[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
              for i in range(2)]  # fmt: skip
    if covers != list(x.shape[2:]):
        x = P.pad(x, pad_width=((0, 0), (0, 0), (0, covers[0] - x.shape[2]),
                                (0, covers[1] - x.shape[3])), value=0.0)  # fmt: skip
    y = P.conv2d_input_grad(x, w, shape=(x.shape[0], w.shape[1] * groups, *size), stride=stride,
                            padding=tuple((p, p) for p in pad), dilation=dilation,
                            groups=groups)  # fmt: skip
    return y if bias is None else y + reshape(bias, (-1, 1, 1))


def conv_transpose1d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    groups: int = 1,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """The transposed convolution of (N, in, L) `input` with (in, out / groups, k) `weight`: a
    conv_transpose2d over a height of one."""
    x, w = as_tensor(input), as_tensor(weight)
    if x.ndim not in (2, 3) or w.ndim != 3:
        raise ShapeError(f"conv_transpose1d: input {x.shape} and weight {w.shape}; expected "
                         "(N, in, L) and (in, out / groups, k)")  # fmt: skip
    last = lambda v: int(v) if isinstance(v, int | np.integer) else int(v[0])  # noqa: E731
    y = conv_transpose2d(reshape(x, (*x.shape[:-1], 1, x.shape[-1])),
                         reshape(w, (*w.shape[:2], 1, w.shape[2])), bias, (1, last(stride)),
                         (0, last(padding)), (0, last(output_padding)), groups,
                         (1, last(dilation)))  # fmt: skip
    return reshape(y, (*y.shape[:-2], y.shape[-1]))


# --- resampling and padding ---------------------------------------------------------------------


def pixel_shuffle(input: Any, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) to (*, C, H r, W r): each channel's r x r block spread over the image."""
    x, r = as_tensor(input), int(upscale_factor)
    if x.ndim < 3 or r < 1 or x.shape[-3] % (r * r):
        raise ShapeError(f"pixel_shuffle: input {x.shape} needs (*, C, H, W) with C divisible by "
                         f"upscale_factor^2 = {r * r}")  # fmt: skip
    *lead, c, h, w = x.shape
    k = len(lead)
    y = reshape(x, (*lead, c // (r * r), r, r, h, w))
    y = permute(y, (*range(k), k, k + 3, k + 1, k + 4, k + 2))
    return reshape(y, (*lead, c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Any, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) to (*, C r^2, H, W): the inverse of pixel_shuffle."""
    x, r = as_tensor(input), int(downscale_factor)
    if x.ndim < 3 or r < 1 or x.shape[-2] % r or x.shape[-1] % r:
        raise ShapeError(f"pixel_unshuffle: input {x.shape} needs (*, C, H, W) with H and W "
                         f"divisible by downscale_factor {r}")  # fmt: skip
    *lead, c, h, w = x.shape
    k = len(lead)
    y = reshape(x, (*lead, c, h // r, r, w // r, r))
    y = permute(y, (*range(k), k, k + 2, k + 4, k + 1, k + 3))
    return reshape(y, (*lead, c * r * r, h // r, w // r))


def _along(x: Tensor, axis: int, index: Any) -> Tensor:
    """x[:, ..., index] with `index` (a slice or an integer array) at `axis`."""
    return x[(slice(None),) * axis + (index,)]


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Any, pad: Sequence[int], mode: str = "constant", value: float | None = None):
    """PyTorch's pad: `pad` is (before, after) pairs for the last axes, the last axis first, so
    (1, 2, 3, 4) pads the width by 1 and 2 and the height by 3 and 4. Modes: constant (`value`),
    reflect (mirrored, the edge not repeated), replicate (the edge repeated), circular (wrapped
    around). Negative widths crop, as PyTorch's: after reflecting or replicating the input
    (which the mirror reads), before wrapping it (circular wraps what is left)."""
    x = as_tensor(input)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: {tuple(pad)} must hold (before, after) pairs for at most the "
                         f"{x.ndim} axes of the input {x.shape}")  # fmt: skip
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode must be one of {_PAD_MODES}, not {mode!r}")
    if mode != "constant" and value is not None:
        raise ValueError(f"pad: mode {mode!r} takes no value")
    widths = {x.ndim - 1 - i: (int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(len(pad) // 2)}
    if mode == "constant":
        return _pad_constant(x, [widths.get(a, (0, 0)) for a in range(x.ndim)], value or 0.0)
    grown = [(0, 0)] * x.ndim
    for axis, (lo, hi) in widths.items():
        size = x.shape[axis] + lo + hi
        x = _crop(x, axis, lo, hi) if mode == "circular" else x
        n = x.shape[axis]
        limit = n if mode == "circular" else n - 1 if mode == "reflect" else math.inf
        grown[axis] = (builtins.max(lo, 0), builtins.max(hi, 0))
        if builtins.max(grown[axis]) > limit or n == 0 or size < 1:
            raise ValueError(f"pad: widths {(lo, hi)} for axis {axis} of the input {x.shape} in "
                             f"mode {mode!r} must be at most {limit} and leave an element "
                             "(negative widths crop)")  # fmt: skip
    if any(lo or hi for lo, hi in grown):
        x = P.pad_repeating(x, pad_width=tuple(grown), mode=_NUMPY_PAD_MODES[mode])
    if mode != "circular":  # (circular cropped before wrapping, above)
        for axis, (lo, hi) in widths.items():
            x = _crop(x, axis, lo, hi)
    return x


_NUMPY_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _crop(x: Tensor, axis: int, lo: int, hi: int) -> Tensor:
    """`x` without -lo elements at the start of `axis` and -hi at its end (the negative ones)."""
    if lo >= 0 and hi >= 0:
        return x
    return _along(x, axis, slice(builtins.max(0, -lo), x.shape[axis] - builtins.max(0, -hi)))


def _pad_constant(x: Tensor, widths: list[tuple[int, int]], value: float) -> Tensor:
    """Negative widths crop (a slice), positive ones pad (the `pad` op)."""
    x = x[tuple(slice(-builtins.min(0, lo), n + builtins.min(0, hi))
                for n, (lo, hi) in zip(x.shape, widths, strict=True))]  # fmt: skip
    width = tuple((builtins.max(0, lo), builtins.max(0, hi)) for lo, hi in widths)
    if not any(lo or hi for lo, hi in width):
        return x
    return P.pad(x, pad_width=width, value=float(value))


def _repeat_axis(x: Tensor, axis: int, size: int) -> Tensor:
    """`x` (of extent 1 along `axis`) repeated `size` times there, as a broadcast view."""
    shape = list(x.shape)
    shape[axis] = size
    return P.broadcast_to(x, shape=tuple(shape))


_INTERPOLATION = {"nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2,
                  "trilinear": 3, "bicubic": 2, "area": None}  # fmt: skip


def interpolate(
    input: Any,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial axes of (N, C, *spatial) `input` to `size`, or by `scale_factor`,
    with PyTorch's index rules: "nearest" (floor(i * in / out), in float32 as PyTorch computes
    it), "nearest-exact", "linear"/"bilinear"/"trilinear" (pixel centres, or the corners
    with `align_corners`) and "bicubic" (PyTorch's cubic convolution, A = -0.75, edge taps
    clamped). One axis at a time: a gather (or a broadcast for integer nearest upsampling) and,
    for the linear modes, a weighted sum of two gathers (four for bicubic). "area" is PyTorch's
    adaptive average pooling to the output size. `antialias` (bilinear, bicubic) widens the
    filter by the downscaling factor, as PyTorch's (and PIL's) do."""
    x = as_tensor(input)
    input_dtype = x.dtype
    dims = x.ndim - 2
    if mode not in _INTERPOLATION:
        raise NotImplementedError(f"interpolate: mode {mode!r}; supported: "
                                  f"{', '.join(_INTERPOLATION)}")  # fmt: skip
    linear = _INTERPOLATION[mode] is not None
    if dims < 1 or linear and dims != _INTERPOLATION[mode]:
        raise ShapeError(f"interpolate: input {x.shape} in mode {mode!r}; expected (N, C, "
                         f"{', '.join(['*'] * (_INTERPOLATION[mode] or 1))})")  # fmt: skip
    if align_corners is not None and not linear:
        raise ValueError("interpolate: align_corners is only for the linear modes")
    if antialias and mode not in ("bilinear", "bicubic"):
        raise NotImplementedError(f"interpolate: antialias in mode {mode!r}; PyTorch's is for "
                                  "'bilinear' and 'bicubic'")  # fmt: skip
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None and recompute_scale_factor:
        raise ValueError("interpolate: recompute_scale_factor is not meaningful with a size")
    image = linear and x.dtype.kind in "iub"  # a uint8 image, resized as PyTorch's (below)
    if image and x.dtype != np.uint8:
        raise NotImplementedError(f"interpolate: mode {mode!r} of a {x.dtype} input; PyTorch's "
                                  "is for floats and uint8")  # fmt: skip
    sizes, scales = _interpolation_sizes(x.shape[2:], size, scale_factor)
    if recompute_scale_factor:
        scales = (None,) * dims
    if mode == "area":
        if dims > 3:
            raise ShapeError(f"interpolate: input {x.shape} in mode 'area' must have 1 to 3 "
                             "spatial axes")  # fmt: skip
        return (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d)[dims - 1](x, sizes)
    axes = list(enumerate(zip(sizes, scales, strict=True)))
    if image:  # PyTorch's uint8 kernels: the last axis first, each pass rounded to uint8 (a
        x, axes = x.astype(np.float32), axes[::-1]  # cubic's overshoot clamped in between)
    for i, (out, scale) in axes:
        axis = 2 + i
        if antialias:
            x = _antialiased_axis(x, axis, out, scale, bool(align_corners), mode == "bicubic")
        elif mode == "bicubic":
            x = _cubic_axis(x, axis, out, scale, bool(align_corners))
        elif linear:
            x = _linear_axis(x, axis, out, scale, bool(align_corners))
        else:
            x = _nearest_axis(x, axis, out, scale, mode == "nearest-exact")
        if image:
            x = x.round().clamp(0, 255)
    return x.astype(np.uint8 if image else input_dtype)  # half floats' weights are float32


def _antialiased_axis(x: Tensor, axis: int, out: int, scale: float | None, align_corners: bool,
                      cubic: bool) -> Tensor:  # fmt: skip
    """`x` resized along `axis` (one of the last two) by PyTorch's antialiased filter: output
    i reads the inputs within `support` of its centre scale * (i + 0.5), weighted by the
    triangle (bilinear) or the cubic with A = -0.5 (bicubic), stretched by the scale when
    shrinking, normalized to sum to 1. One product by the (out, in) weight matrix."""
    n = x.shape[axis]
    if align_corners:
        step = (n - 1) / (out - 1) if out > 1 else 0.0
    else:
        step = 1.0 / scale if scale else n / out
    taps = 4 if cubic else 2
    support = taps * 0.5 * builtins.max(step, 1.0)
    stretch = 1.0 / step if step >= 1.0 else 1.0
    weights = np.zeros((out, n))
    for i in range(out):
        centre = step * (i + 0.5)
        lo = builtins.max(int(centre - support + 0.5), 0)
        hi = builtins.min(int(centre + support + 0.5), n)
        t = np.abs((np.arange(lo, hi) - centre + 0.5) * stretch)
        if cubic:
            a = -0.5
            w = np.where(t < 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                         np.where(t < 2, (((t - 5) * t + 8) * t - 4) * a, 0.0))  # fmt: skip
        else:
            w = np.maximum(1 - t, 0.0)
        total = w.sum()
        weights[i, lo:hi] = w / total if total != 0 else w
    w = Tensor._of(weights.astype(x.dtype))
    return matmul(x, w.T) if axis == x.ndim - 1 else matmul(w, x)


def _interpolation_sizes(spatial: tuple[int, ...], size: Any, scale_factor: Any) -> tuple:
    """The output's spatial sizes, and the scales PyTorch's index rules read (None: in / out)."""
    dims = len(spatial)
    if size is not None:
        sizes = (size,) * dims if isinstance(size, int | np.integer) else tuple(size)
        scales = (None,) * len(sizes)
    else:
        scales = (scale_factor,) * dims if np.isscalar(scale_factor) else tuple(scale_factor)
        sizes = tuple(
            math.floor(float(n) * float(s)) for n, s in zip(spatial, scales, strict=False)
        )
    if len(sizes) != dims or len(scales) != dims or builtins.min(sizes) < 1:
        raise ValueError(f"interpolate: spatial size {spatial}, size {size}, scale_factor "
                         f"{scale_factor}: need one positive size per spatial axis")  # fmt: skip
    return tuple(int(n) for n in sizes), scales


def _nearest_axis(x: Tensor, axis: int, out: int, scale: float | None, exact: bool) -> Tensor:
    n = x.shape[axis]
    step = np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(out)
    dst = np.arange(out)
    if exact:  # PyTorch: floorf((i + 0.5) * scale), the product in double rounded to float
        src = np.floor(((dst + 0.5) * np.float64(step)).astype(np.float32))
    elif out == n or out == 2 * n:
        src = dst * n // out
    else:
        src = np.floor(dst.astype(np.float32) * step)
    src = np.minimum(src.astype(np.int64), n - 1)
    k = out // n
    if out == n * k and np.array_equal(src, dst // k):  # each row k times: a broadcast view
        shape = (*x.shape[: axis + 1], 1, *x.shape[axis + 1 :])
        column = reshape(x, shape)
        if axis == x.ndim - 1 and k < 8:
            # NumPy copies a broadcast last axis a few elements at a time, slower than whole
            # strided columns (docs/benchmarks.md); the gradient adds them, fused in a plan
            y = concatenate([column] * k, axis + 1)
        else:
            y = _repeat_axis(column, axis + 1, k)
        return reshape(y, (*x.shape[:axis], out, *x.shape[axis + 1 :]))
    return _along(x, axis, Tensor._of(src))


def _linear_axis(x: Tensor, axis: int, out: int, scale: float | None, corners: bool) -> Tensor:
    """PyTorch's linear weights, computed in the input's precision: the source position i *
    (in - 1) / (out - 1) with align_corners, else (i + 0.5) * in / out - 0.5 (not below 0)."""
    n, dtype = x.shape[axis], promote_types(x.dtype, np.float32)
    dst = np.arange(out, dtype=dtype)
    if corners:
        src = dst * dtype.type((n - 1) / (out - 1) if out > 1 else 0.0)
    else:
        step = dtype.type(1.0 / scale) if scale else dtype.type(n) / dtype.type(out)
        src = np.maximum(step * (dst + dtype.type(0.5)) - dtype.type(0.5), 0)
    lo = np.minimum(np.floor(src).astype(np.int64), n - 1)
    hi = lo + (lo < n - 1)
    frac = np.clip(src - lo, 0, 1).astype(dtype)
    shape = [1] * x.ndim
    shape[axis] = out
    frac = Tensor._of(frac.reshape(shape))
    return _along(x, axis, Tensor._of(lo)) * (1.0 - frac) + _along(x, axis, Tensor._of(hi)) * frac


def _cubic_axis(x: Tensor, axis: int, out: int, scale: float | None, corners: bool) -> Tensor:
    """PyTorch's bicubic along one axis: the source position as `_linear_axis`'s but not
    clamped at 0, four taps around it (clamped to the edges) weighted by the cubic convolution
    kernel with A = -0.75."""
    n, dtype = x.shape[axis], promote_types(x.dtype, np.float32)
    dst = np.arange(out, dtype=dtype)
    if corners:
        src = dst * dtype.type((n - 1) / (out - 1) if out > 1 else 0.0)
    else:
        step = dtype.type(1.0 / scale) if scale else dtype.type(n) / dtype.type(out)
        src = step * (dst + dtype.type(0.5)) - dtype.type(0.5)
    base = np.floor(src).astype(np.int64)
    t, a = (src - base).astype(dtype), dtype.type(-0.75)
    near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1  # noqa: E731 (|d| <= 1)
    far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # noqa: E731 (1 < |d| < 2)
    weights = (far(t + 1), near(t), near(1 - t), far(2 - t))
    shape = [1] * x.ndim
    shape[axis] = out
    taps = [_along(x, axis, Tensor._of(np.clip(base - 1 + k, 0, n - 1))) *
            Tensor._of(w.astype(dtype).reshape(shape)) for k, w in enumerate(weights)]  # fmt: skip
    return functools.reduce(lambda p, q: p + q, taps)


# --- normalization over groups and instances ----------------------------------------------------


def _affine(y: Tensor, weight: Any, bias: Any) -> Tensor:
    """Per-channel (axis 1) scale and shift."""
    shape = (1, y.shape[1]) + (1,) * (y.ndim - 2)
    if weight is not None:
        y = y * reshape(weight, shape)
    return y if bias is None else y + reshape(bias, shape)


@_half_in_half_out
def group_norm(
    input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Tensor:
    """Normalize (N, C, *) `input` over each group of C / num_groups channels (and all their
    positions), then scale and shift per channel: a layer norm of (N, groups, rest)."""
    x = as_tensor(input)
    if x.ndim < 2 or num_groups < 1 or x.shape[1] % num_groups:
        raise ShapeError(f"group_norm: input {x.shape} needs (N, C, *) with C divisible by "
                         f"num_groups {num_groups}")  # fmt: skip
    flat = reshape(x, (x.shape[0], num_groups, -1))
    return _affine(reshape(layer_norm(flat, flat.shape[-1:], eps=eps), x.shape), weight, bias)


@_half_in_half_out
def instance_norm(
    input: Any,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Any = None,
    bias: Any = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize each channel of each sample of (N, C, *) `input` over its positions. With
    `use_input_stats` the running statistics (if given) move towards the batch's mean of the
    instances' means and unbiased variances, in place; without, they normalize."""
    x = as_tensor(input)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm: input {x.shape} must be (N, C, *spatial)")
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and _var")
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        y = (x - reshape(running_mean, shape)) / sqrt(reshape(running_var, shape) + eps)
        return _affine(y, weight, bias)
    flat = reshape(x, (*x.shape[:2], -1))
    count = flat.shape[-1]
    if count < 2:
        raise ValueError(f"instance_norm: expected more than 1 position per channel, got "
                         f"input {x.shape}")  # fmt: skip
    if running_mean is not None and running_var is not None:
        with no_grad():
            values = flat.detach()
            mu = mean(values, -1, keepdims=True)
            var = sum((values - mu) ** 2.0, -1) / float(count - 1)
            running_mean._assign(running_mean * (1.0 - momentum)
                                 + mean(reshape(mu, mu.shape[:2]), 0) * momentum)  # fmt: skip
            running_var._assign(running_var * (1.0 - momentum) + mean(var, 0) * momentum)
    return _affine(reshape(layer_norm(flat, (count,), eps=eps), x.shape), weight, bias)


# --- PyTorch's less common activations ----------------------------------------------------------


def relu6(input: Any, inplace: bool = False) -> Tensor:
    """min(max(0, x), 6): hardtanh on [0, 6], whose gradient is zero at both bounds (PyTorch's)."""
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input: Any, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6; the gradient 1/6 strictly inside (-3, 3), as PyTorch's."""
    x = as_tensor(input)
    y = where(x <= -3.0, 0.0, where(x >= 3.0, 1.0, x * (1.0 / 6.0) + 0.5)).astype(x.dtype)
    return _in_place(input, y, inplace, "hardsigmoid")


def hardswish(input: Any, inplace: bool = False) -> Tensor:
    """x relu6(x + 3) / 6, written by PyTorch's branches so that the gradient at -3 and 3 is
    PyTorch's too: x / 3 + 1/2 strictly inside (-3, 3), 0 at -3 and 1 at 3 (its kernel's
    `x <= -3` and `x < 3`)."""
    x = as_tensor(input)
    y = where(x <= -3.0, 0.0, where(x < 3.0, x * (x + 3.0) * (1.0 / 6.0), x)).astype(x.dtype)
    return _in_place(input, y, inplace, "hardswish")


def logsigmoid(input: Any) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), without overflow for large |x|."""
    return -P.softplus(-as_tensor(input))


def softsign(input: Any) -> Tensor:
    x = as_tensor(input)
    return x / (abs(x) + 1.0)


def tanhshrink(input: Any) -> Tensor:
    x = as_tensor(input)
    return x - tanh(x)


def softshrink(input: Any, lambd: float = 0.5) -> Tensor:
    """x - lambd above lambd, x + lambd below -lambd, else 0 (gradient 0 on [-lambd, lambd])."""
    x = as_tensor(input)
    return where(x > lambd, x - lambd, where(x < -lambd, x + lambd, 0.0)).astype(x.dtype)


def celu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha (exp(x / alpha) - 1); the exponential sees min(x, 0), as in
    `elu`."""
    x = as_tensor(input)
    tail = P.expm1(P.minimum(x, 0.0) * (1.0 / alpha)) * alpha
    return _in_place(input, where(x > 0.0, x, tail), inplace, "celu")


def threshold(input: Any, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, else `value`."""
    x = as_tensor(input)
    return _in_place(input, where(x > threshold, x, value).astype(x.dtype), inplace, "threshold")


@pytorch_keywords
def glu(input: Any, dim: int = -1) -> Tensor:
    """The gated linear unit: the first half of `dim` times the sigmoid of the second."""
    x = as_tensor(input)
    if not x.ndim or x.shape[dim] % 2:
        raise ShapeError(f"glu: dim {dim} of input {x.shape} must have an even size")
    a, b = chunk(x, 2, dim)
    return a * sigmoid(b)


def implicit_dim(dim: int | None, ndim: int, name: str) -> int:
    """`dim`, or PyTorch's choice for a softmax-like function called without one (deprecated
    there, with this warning): 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is not None:
        return dim
    warn_user(f"Implicit dimension choice for {name} has been deprecated. Change the call to "
              "include dim=X as an argument.")  # fmt: skip
    return 0 if ndim in (0, 1, 3) else 1


@pytorch_keywords
def softmax(input: Any, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """exp(x) / sum(exp(x)) over `dim` (without one, PyTorch's deprecated choice)."""
    x = as_tensor(input) if dtype is None else as_tensor(input).astype(dtype)
    return reductions.softmax(x, implicit_dim(dim, x.ndim, "softmax"))


@pytorch_keywords
def log_softmax(input: Any, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:  # fmt: skip
    """log(softmax(x)) over `dim`, computed stably (without one, PyTorch's deprecated choice)."""
    x = as_tensor(input) if dtype is None else as_tensor(input).astype(dtype)
    return reductions.log_softmax(x, implicit_dim(dim, x.ndim, "log_softmax"))


@pytorch_keywords
def softmin(input: Any, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """softmax(-x) over `dim`."""
    x = as_tensor(input) if dtype is None else as_tensor(input).astype(dtype)
    return softmax(-x, implicit_dim(dim, x.ndim, "softmin"))


# --- 1-d pooling, adaptive max pooling, channel dropout, RMS norm ------------------------------


def _single(v: Any, op: str, what: str) -> int:
    if isinstance(v, int):
        return v
    if len(v) != 1:
        raise ValueError(f"{op}: {what} must be an int or one int, not {v!r}")
    return int(v[0])


def _as_image(x: Tensor, op: str) -> Tensor:
    """(N, C, L) as (N, C, 1, L): the 1-d pools are the 2-d ones over a row."""
    if x.ndim != 3:
        raise ShapeError(f"{op}: input {x.shape} must be 3-d (N, C, L)")
    return reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))


def _as_rows(y: Tensor) -> Tensor:
    return reshape(y, (y.shape[0], y.shape[1], y.shape[3]))


@takes_unbatched(2)
def max_pool1d(
    input: Any,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    """`max_pool2d` over one row: its kernels and its ties (the first maximum) serve both."""
    op, k = "max_pool1d", _single(kernel_size, "max_pool1d", "kernel_size")
    s = k if stride is None or stride == [] else _single(stride, op, "stride")
    y = max_pool2d(_as_image(as_tensor(input), op), (1, k), (1, s),
                   (0, _single(padding, op, "padding")), (1, _single(dilation, op, "dilation")),
                   ceil_mode, return_indices)  # fmt: skip
    return tuple(_as_rows(t) for t in y) if return_indices else _as_rows(y)


@takes_unbatched(2)
def avg_pool1d(
    input: Any,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    op, k = "avg_pool1d", _single(kernel_size, "avg_pool1d", "kernel_size")
    s = k if stride is None or stride == [] else _single(stride, op, "stride")
    y = avg_pool2d(_as_image(as_tensor(input), op), (1, k), (1, s),
                   (0, _single(padding, op, "padding")), ceil_mode, count_include_pad)  # fmt: skip
    return _as_rows(y)


@takes_unbatched(2)
def adaptive_avg_pool1d(input: Any, output_size: int | Sequence[int]) -> Tensor:
    size = _single(output_size, "adaptive_avg_pool1d", "output_size")
    return _as_rows(adaptive_avg_pool2d(_as_image(as_tensor(input), "adaptive_avg_pool1d"),
                                        (1, size)))  # fmt: skip


@takes_unbatched(3)
def adaptive_max_pool2d(
    input: Any, output_size: int | Sequence[int | None], return_indices: bool = False
) -> Any:
    """The max over each of PyTorch's adaptive windows: `max_pool2d` (its kernels, its ties)
    where they tile the image, else a window at a time (its first maximum, `adaptive_max`);
    `return_indices` also gives each maximum's flat position in its (H, W) plane."""
    x = as_tensor(input)
    if x.ndim != 4:
        raise ShapeError(f"adaptive_max_pool2d: input {x.shape} must be 4-d (N, C, H, W)")
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    outs = [n if o is None else int(o) for n, o in zip(x.shape[2:], size, strict=True)]
    if all(n % o == 0 for n, o in zip(x.shape[2:], outs, strict=True)):
        kernel = tuple(n // o for n, o in zip(x.shape[2:], outs, strict=True))
        return max_pool2d(x, kernel, return_indices=return_indices)
    return adaptive_max(x, outs, return_indices)


@takes_unbatched(2)
def adaptive_max_pool1d(
    input: Any, output_size: int | Sequence[int], return_indices: bool = False
) -> Any:
    """`adaptive_max_pool2d` over one row (the indices are positions in the row)."""
    size = _single(output_size, "adaptive_max_pool1d", "output_size")
    image = _as_image(as_tensor(input), "adaptive_max_pool1d")
    y = adaptive_max_pool2d(image, (1, size), return_indices)
    return tuple(_as_rows(t) for t in y) if return_indices else _as_rows(y)


def dropout1d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False, *,
              state: Tensor | None = None) -> Tensor:  # fmt: skip
    """Channel dropout of (N, C, L) or (C, L) inputs."""
    return _dropout(input, p, training, inplace, 1, "dropout1d", state)


def dropout3d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False, *,
              state: Tensor | None = None) -> Tensor:  # fmt: skip
    """Channel dropout of (N, C, D, H, W) or (C, D, H, W) inputs."""
    return _dropout(input, p, training, inplace, 3, "dropout3d", state)


def dropout2d(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False, *,
              state: Tensor | None = None) -> Tensor:  # fmt: skip
    """Channel dropout of (N, C, H, W) or (C, H, W) inputs."""
    return _dropout(input, p, training, inplace, 2, "dropout2d", state)


def rms_norm(
    input: Any,
    normalized_shape: Sequence[int],
    weight: Any = None,
    eps: float | None = None,
) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the trailing `normalized_shape` axes, times `weight`;
    eps defaults to the machine epsilon of the dtype it computes in, as PyTorch's."""
    x = as_tensor(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or x.shape[x.ndim - len(shape) :] != shape:
        raise ShapeError(f"rms_norm: input of shape {x.shape}, normalized_shape {shape}")
    wide = x.float() if x.dtype.itemsize < 4 else x  # half floats: computed in float32, as PyTorch
    eps = float(np.finfo(wide.dtype).eps) if eps is None else eps
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    y = (wide / sqrt(mean(wide * wide, axes, keepdim=True) + eps)).astype(x.dtype)
    return y if weight is None else y * weight


# --- distances and the losses built on them ----------------------------------------------------


@pytorch_keywords
def normalize(input: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None):
    """x / max(||x||_p, eps) along `dim`."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported; use the result")
    x = as_tensor(input)
    return x / maximum(vector_norm(x, p, dim, keepdim=True), eps)


@pytorch_keywords
def cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between x1 and x2 (broadcast) along `dim`: the product of the two
    normalized vectors, each norm kept above eps, as PyTorch computes it."""
    return sum(normalize(x1, 2.0, dim, eps) * normalize(x2, 2.0, dim, eps), dim)


def pairwise_distance(x1: Any, x2: Any, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:  # fmt: skip
    """||x1 - x2 + eps||_p over the last dim (eps keeps the norm's gradient finite)."""
    diff = as_tensor(x1) - as_tensor(x2) + eps
    return vector_norm(diff, p, -1, keepdim)


def kl_div(
    input: Any,
    target: Any,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """target (log target - input) per element, `input` being log-probabilities (and `target`
    too with log_target); 0 where target is 0. "batchmean" divides the sum by the batch size,
    the true KL divergence, where "mean" divides by the element count (PyTorch's default)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, t = as_tensor(input), as_tensor(target)
    if reduction not in (*losses.REDUCTIONS, "batchmean"):
        raise ValueError(f"kl_div: reduction must be one of {(*losses.REDUCTIONS, 'batchmean')}"
                         f", not {reduction!r}")  # fmt: skip
    if log_target:
        loss = P.exp(t) * (t - x)
    else:
        positive = t > 0.0
        loss = where(positive, t * log(where(positive, t, 1.0)), 0.0) - t * x
    if reduction == "batchmean":
        return sum(loss) / float(x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction)


def margin_ranking_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                        size_average: Any = None, reduce: Any = None,
                        reduction: str = "mean") -> Tensor:  # fmt: skip
    """max(0, -target (input1 - input2) + margin)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("margin_ranking_loss", reduction)
    x1, x2, y = as_tensor(input1), as_tensor(input2), as_tensor(target)
    return _reduce(maximum(0.0, -y * (x1 - x2) + margin), reduction)


def hinge_embedding_loss(input: Any, target: Any, margin: float = 1.0,
                         size_average: Any = None, reduce: Any = None,
                         reduction: str = "mean") -> Tensor:  # fmt: skip
    """x where target is 1, max(0, margin - x) where it is -1 (both terms elsewhere, as
    PyTorch's)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("hinge_embedding_loss", reduction)
    x, y = as_tensor(input), as_tensor(target)
    loss = where(y != -1.0, x, 0.0) + where(y != 1.0, maximum(0.0, margin - x), 0.0)
    return _reduce(loss, reduction)


def soft_margin_loss(
    input: Any, target: Any, size_average: Any = None, reduce: Any = None, reduction: str = "mean"
) -> Tensor:
    """log(1 + exp(-target x)), without overflow."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, y = _same_shapes("soft_margin_loss", input, target, reduction)
    return _reduce(P.softplus(-y * x), reduction)


def cosine_embedding_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                          size_average: Any = None, reduce: Any = None,
                          reduction: str = "mean") -> Tensor:  # fmt: skip
    """1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is -1; the cosine along
    the last dim with PyTorch's 1e-12 added to each squared norm."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("cosine_embedding_loss", reduction)
    x1, x2, y = as_tensor(input1), as_tensor(input2), as_tensor(target)
    dot = sum(x1 * x2, -1)
    cos = dot / sqrt((sum(x1 * x1, -1) + 1e-12) * (sum(x2 * x2, -1) + 1e-12))
    loss = where(y == 1.0, 1.0 - cos, 0.0) + where(y == -1.0, maximum(0.0, cos - margin), 0.0)
    return _reduce(loss, reduction)


def triplet_margin_loss(
    anchor: Any,
    positive: Any,
    negative: Any,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """max(0, d(a, p) - d(a, n) + margin) with `pairwise_distance`; `swap` takes the nearer of
    d(a, n) and d(p, n)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("triplet_margin_loss", reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = P.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(maximum(0.0, d_pos - d_neg + margin), reduction)


def triplet_margin_with_distance_loss(anchor: Any, positive: Any, negative: Any, *,
                                      distance_function: Callable | None = None,
                                      margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean") -> Tensor:  # fmt: skip
    """`triplet_margin_loss` with any distance (default `pairwise_distance`): max(0,
    d(a, p) - d(a, n) + margin)."""
    _check_reduction("triplet_margin_with_distance_loss", reduction)
    distance = distance_function or pairwise_distance
    d_pos, d_neg = distance(anchor, positive), distance(anchor, negative)
    if swap:
        d_neg = P.minimum(d_neg, distance(positive, negative))
    return _reduce(maximum(0.0, d_pos - d_neg + margin), reduction)


def multi_margin_loss(input: Any, target: Any, p: int = 1, margin: float = 1.0,
                      weight: Any = None, size_average: Any = None, reduce: Any = None,
                      reduction: str = "mean") -> Tensor:  # fmt: skip
    """The multi-class hinge loss: sum over the classes j other than the target y of
    max(0, margin - x[y] + x[j]) ** p (times weight[y]), divided by the number of classes."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("multi_margin_loss", reduction)
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: p must be 1 or 2, not {p}")
    x, y = as_tensor(input), as_tensor(target)
    rows = x if x.ndim == 2 else reshape(x, (1, -1))
    labels = reshape(y, (-1, 1))
    picked = take_along(rows, labels, 1, (rows.shape[0], 1))
    hinge = maximum(0.0, margin - picked + rows)
    hinge = hinge if p == 1 else hinge * hinge
    if weight is not None:
        hinge = hinge * reshape(as_tensor(weight)[reshape(labels, (-1,))], (-1, 1))
    others = Tensor._of(np.arange(rows.shape[1])[None, :]) != labels  # the target's own term is 0
    loss = sum(where(others, hinge, 0.0), 1) / float(rows.shape[1])
    return _reduce(loss if x.ndim == 2 else reshape(loss, ()), reduction)


def multilabel_margin_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                           reduction: str = "mean") -> Tensor:  # fmt: skip
    """The multi-label hinge loss: for each sample, sum over its target classes j (the labels
    before the first -1 in its row of `target`) and the other classes k of
    max(0, 1 - (x[j] - x[k])), divided by the number of classes."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("multilabel_margin_loss", reduction)
    x, t = as_tensor(input), as_tensor(target)
    rows = x if x.ndim == 2 else reshape(x, (1, -1))
    labels = t._concrete("multilabel_margin_loss's target").reshape(rows.shape)
    n, c = rows.shape
    is_target = np.zeros((n, c), bool)
    for i, row in enumerate(labels):
        stop = np.flatnonzero(row < 0)
        chosen = row[: stop[0] if stop.size else c]
        is_target[i, chosen] = True
    pairs = 1.0 - (reshape(rows, (n, c, 1)) - reshape(rows, (n, 1, c)))  # [i, j, k]
    valid = Tensor._of(is_target[:, :, None] & ~is_target[:, None, :])
    loss = sum(where(valid, maximum(0.0, pairs), 0.0), (1, 2)) / float(c)
    return _reduce(loss if x.ndim == 2 else reshape(loss, ()), reduction)


def poisson_nll_loss(
    input: Any,
    target: Any,
    log_input: bool = True,
    full: bool = False,
    size_average: Any = None,
    eps: float = 1e-8,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """exp(x) - target x for log-rates x, else x - target log(x + eps); `full` adds Stirling's
    approximation of log(target!) where target > 1."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction("poisson_nll_loss", reduction)
    x, t = as_tensor(input), as_tensor(target)
    loss = P.exp(x) - t * x if log_input else x - t * log(x + eps)
    if full:
        big = t > 1.0
        safe = where(big, t, 1.0)
        loss = loss + where(big, safe * log(safe) - safe + 0.5 * log(safe * (2.0 * math.pi)), 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input: Any, target: Any, var: Any, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:  # fmt: skip
    """(log var + (input - target)^2 / var) / 2, var kept above eps for its value only (the
    gradient flows as if it were not, as PyTorch's clamp under no_grad); `full` adds
    log(2 pi) / 2. `var` may lack the last dim or have it of size 1 (one variance per sample)."""
    _check_reduction("gaussian_nll_loss", reduction)
    x, t, v = as_tensor(input), as_tensor(target), as_tensor(var)
    if v.ndim == x.ndim - 1 and v.shape == x.shape[:-1]:
        v = reshape(v, (*v.shape, 1))
    v = v + (maximum(v, eps) - v).detach()
    loss = (log(v) + (x - t) ** 2.0 / v) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2.0 * math.pi)
    return _reduce(loss, reduction)


def multilabel_soft_margin_loss(input: Any, target: Any, weight: Any = None,
                                size_average: Any = None, reduce: Any = None,
                                reduction: str = "mean") -> Tensor:  # fmt: skip
    """The mean over classes of each class's binary cross-entropy on logits, per sample."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    x, y = _same_shapes("multilabel_soft_margin_loss", input, target, reduction)
    loss = -(y * logsigmoid(x) + (1.0 - y) * logsigmoid(-x))
    if weight is not None:
        loss = loss * weight
    return _reduce(mean(loss, -1), reduction)


# --- bilinear, channel shuffle, local response norm, alpha dropout -----------------------------


def bilinear(input1: Any, input2: Any, weight: Any, bias: Any = None) -> Tensor:
    """y_o = x1 . W_o x2 + b_o for (out, in1, in2) `weight`: one matmul of x1 with W laid out as
    (in1, out * in2), then a product with x2 summed over in2."""
    x1, x2, w = as_tensor(input1), as_tensor(input2), as_tensor(weight)
    if w.ndim != 3 or x1.shape[-1] != w.shape[1] or x2.shape[-1] != w.shape[2]:
        raise ShapeError(f"bilinear: inputs {x1.shape} and {x2.shape} do not fit the weight "
                         f"{w.shape} (out, in1, in2)")  # fmt: skip
    o, i1, i2 = w.shape
    t = matmul(x1, reshape(permute(w, (1, 0, 2)), (i1, o * i2)))
    y = sum(reshape(t, (*t.shape[:-1], o, i2)) * reshape(x2, (*x2.shape[:-1], 1, i2)), -1)
    return y if bias is None else y + as_tensor(bias)


def channel_shuffle(input: Any, groups: int) -> Tensor:
    """(N, C, *) with its channels regrouped: channel g * (C / groups) + i goes to
    i * groups + g (ShuffleNet's)."""
    x = as_tensor(input)
    if x.ndim < 3 or x.shape[1] % groups:
        raise ShapeError(f"channel_shuffle: input {x.shape} must be (N, C, *) with C divisible "
                         f"by groups {groups}")  # fmt: skip
    n, c, *rest = x.shape
    x = reshape(x, (n, groups, c // groups, *rest))
    return reshape(transpose(x, 1, 2), (n, c, *rest))


def local_response_norm(input: Any, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:  # fmt: skip
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels) ** beta, the window
    zero-padded at the ends and always divided by `size`, as PyTorch's (AlexNet's LRN)."""
    x = as_tensor(input)
    if x.ndim < 3:
        raise ShapeError(f"local_response_norm: input {x.shape} must be (N, C, *), 3-d or more")
    c = x.shape[1]
    widths = [(0, 0)] * x.ndim
    widths[1] = (size // 2, (size - 1) // 2)
    padded = _pad_constant(x * x, widths, 0.0)
    window = functools.reduce(lambda a, b: a + b, [padded[:, i : i + c] for i in range(size)])
    return x / (window * (alpha / size) + k) ** beta


def alpha_dropout(input: Any, p: float = 0.5, training: bool = False, inplace: bool = False, *,
                  state: Tensor | None = None) -> Tensor:  # fmt: skip
    """Dropout for SELU networks: dropped elements take SELU's saturation value, and an affine
    map keeps the mean and variance (PyTorch's constants); the mask is drawn as `dropout`'s."""
    return _alpha_dropout(input, p, training, inplace, False, "alpha_dropout", state)


def feature_alpha_dropout(
    input: Any,
    p: float = 0.5,
    training: bool = False,
    inplace: bool = False,
    *,
    state: Tensor | None = None,
) -> Tensor:
    """`alpha_dropout` of whole channels of (N, C, *) inputs."""
    return _alpha_dropout(input, p, training, inplace, True, "feature_alpha_dropout", state)


_ALPHA_DROPOUT = _SELU_ALPHA * _SELU_SCALE  # minus SELU's saturation value


def _alpha_dropout(input: Any, p: float, training: bool, inplace: bool, feature: bool, op: str,
                   state: Tensor | None) -> Tensor:  # fmt: skip
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p must be in [0, 1], not {p}")
    x = as_tensor(input)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return _in_place(input, x * 0.0, inplace, op)
    if feature and x.ndim < 2:
        raise ShapeError(f"{op}: input {x.shape} must be (N, C, *)")
    shape = x.shape[:2] + (1,) * (x.ndim - 2) if feature else x.shape
    keep = random.uniform(shape, x.dtype, state) >= p
    a = 1.0 / math.sqrt((_ALPHA_DROPOUT**2 * p + 1.0) * (1.0 - p))
    b = _ALPHA_DROPOUT * a * p
    return _in_place(input, where(keep, x * a + b, b - _ALPHA_DROPOUT * a), inplace, op)


# --- unfold and fold (im2col and col2im) -------------------------------------------------------


def _patches(op: str, spatial: tuple[int, int], kernel_size, dilation, padding, stride) -> tuple:
    """The geometry ((kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow)) of sliding blocks."""
    k, d = _pair(kernel_size, op, "kernel_size"), _pair(dilation, op, "dilation")
    pad, s = _pair(padding, op, "padding"), _pair(stride, op, "stride")
    out = tuple((spatial[i] + 2 * pad[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2))
    if builtins.min(out) < 1:
        raise ShapeError(
            f"{op}: the (dilated) kernel {k} does not fit the padded size "
            f"{tuple(n + 2 * q for n, q in zip(spatial, pad, strict=True))}"
        )
    return k, d, pad, s, out


def unfold(
    input: Any,
    kernel_size: int | Sequence[int],
    dilation: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    stride: int | Sequence[int] = 1,
) -> Tensor:
    """im2col: the sliding blocks of (N, C, H, W) (or (C, H, W)) as columns (N, C * kh * kw,
    L), rows ordered channel first, then the kernel's positions (PyTorch's). Each kernel
    position is one strided slice of the zero-padded input, so the gradient is exact slicing
    adjoints."""
    x = as_tensor(input)
    if x.ndim == 3:
        return unfold(reshape(x, (1, *x.shape)), kernel_size, dilation, padding, stride)[0]
    if x.ndim != 4:
        raise ShapeError(f"unfold: input {x.shape} must be (N, C, H, W) or (C, H, W)")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) = _patches(
        "unfold", x.shape[2:], kernel_size, dilation, padding, stride
    )
    xp = _pad_constant(x, [(0, 0), (0, 0), (ph, ph), (pw, pw)], 0.0)
    blocks = [xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                 j * dw : j * dw + sw * (ow - 1) + 1 : sw]
              for i in range(kh) for j in range(kw)]  # fmt: skip
    n, c = x.shape[:2]
    return reshape(stack(blocks, axis=2), (n, c * kh * kw, oh * ow))


def fold(input: Any, output_size: int | Sequence[int], kernel_size: int | Sequence[int],
         dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
         stride: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
    """col2im, `unfold`'s adjoint: columns (N, C * kh * kw, L) (or unbatched) summed back into
    an (N, C, *output_size) image where their blocks overlap. Each kernel position's block is
    spread by the stride (zeros between) and padded into place: one image-sized sum per
    position, no products."""
    x = as_tensor(input)
    if x.ndim == 2:
        return fold(reshape(x, (1, *x.shape)), output_size, kernel_size, dilation, padding,
                    stride)[0]  # fmt: skip
    h, w = _pair(output_size, "fold", "output_size")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) = _patches(
        "fold", (h, w), kernel_size, dilation, padding, stride
    )
    if x.ndim != 3 or x.shape[1] % (kh * kw) or x.shape[2] != oh * ow:
        raise ShapeError(f"fold: input {x.shape} must be (N, C * {kh * kw}, {oh * ow}) for "
                         f"output_size {(h, w)} and kernel {(kh, kw)}")  # fmt: skip
    n, c = x.shape[0], x.shape[1] // (kh * kw)
    cols = reshape(x, (n, c, kh, kw, oh, ow))
    hp, wp = h + 2 * ph, w + 2 * pw
    parts = []
    for i in range(kh):
        for j in range(kw):
            block = cols[:, :, i, j]
            if sh > 1 or sw > 1:  # the stride's gaps: (oh, 1) padded to (oh, sh), flattened
                spread = _pad_constant(
                    reshape(block, (n, c, oh, 1, ow, 1)),
                    [(0, 0)] * 3 + [(0, sh - 1), (0, 0), (0, sw - 1)],
                    0.0,
                )
                block = reshape(spread, (n, c, oh * sh, ow * sw))
            top, left = i * dh, j * dw
            parts.append(_pad_constant(block, [(0, 0), (0, 0), (top, hp - top - oh * sh),
                                               (left, wp - left - ow * sw)], 0.0))  # fmt: skip
    return functools.reduce(lambda a, b: a + b, parts)[:, :, ph : ph + h, pw : pw + w]


# --- embedding bags ---------------------------------------------------------------------------

_BAG_MODES = ("sum", "mean", "max")


def embedding_bag(
    input: Any, weight: Any, offsets: Any = None, max_norm: float | None = None,
    norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
    sparse: bool = False, per_sample_weights: Any = None, include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:  # fmt: skip
    """The sum, mean or max of bags of `weight`'s rows, without the (bags, length, dim) rows
    in between for sum and mean: a bag is a row of 2-d `input`, or of 1-d `input` the indices
    from one of `offsets` to the next. `per_sample_weights` scale the rows (mode "sum");
    `padding_idx` rows are left out of their bag (and its count); an empty bag gives zeros.
    `sparse` is accepted (the gradient is dense)."""
    if scale_grad_by_freq:
        raise NotImplementedError("embedding_bag: scale_grad_by_freq is not supported")
    if mode not in _BAG_MODES:
        raise ValueError(f"embedding_bag: mode must be one of {_BAG_MODES}, not {mode!r}")
    x, w = as_tensor(input), as_tensor(weight)
    if x.dtype.kind not in "iu" or w.ndim != 2:
        raise TypeError(f"embedding_bag: indices must be integers ({x.dtype}) and the weight "
                        f"2-d ({w.shape})")  # fmt: skip
    scale = None if per_sample_weights is None else as_tensor(per_sample_weights)
    if scale is not None and (mode != "sum" or scale.shape != x.shape):
        raise ValueError(
            f"embedding_bag: per_sample_weights {scale.shape} must have the "
            f"input's shape {x.shape}, and mode must be 'sum' (not {mode!r})"
        )
    if padding_idx is not None:
        padding_idx %= w.shape[0]
    if max_norm is not None:
        embedding_renorm_(w, check_range(x, 0, w.shape[0], "embedding_bag: indices"), max_norm,
                          norm_type)  # fmt: skip
    if x.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None for a 2-d input")
        return _bags(x, w, None, scale, mode, padding_idx)
    if x.ndim != 1 or offsets is None:
        raise ValueError(f"embedding_bag: input {x.shape} must be 2-d, or 1-d with offsets")
    off = as_tensor(offsets)
    if off.ndim != 1 or off.dtype.kind not in "iu":
        raise ValueError(f"embedding_bag: offsets must be a 1-d integer tensor, not {off.shape} "
                         f"{off.dtype}")  # fmt: skip
    starts = off[:-1] if include_last_offset else off
    n, b = x.shape[0], starts.shape[0]
    if b == 0:
        return Tensor._of(np.zeros((0, w.shape[1]), w.dtype))
    end = off[-1] if include_last_offset else n
    if off.is_symbolic:  # each index's bag: how many starts are at or before it, minus one
        if mode == "max":
            raise NotImplementedError("embedding_bag: mode 'max' with offsets computed inside a "
                                      "traced step; pass them as data, or a 2-d input")  # fmt: skip
        here = Tensor._of(np.arange(n).reshape(n, 1))
        bag = sum((here >= reshape(starts, (1, b))).astype(np.int64), 1) - 1
        valid = Tensor._of(np.arange(n)) < end
    else:
        first, stops = starts.numpy(), np.append(starts.numpy()[1:], int(as_tensor(end).item()))
        if b and first[0] != 0 or np.any(stops < first):
            raise ValueError(f"embedding_bag: offsets {off.numpy()} must start at 0 and "
                             "not decrease")  # fmt: skip
        if mode == "max":  # bags padded to the longest, the padding masked out
            length = int(builtins.max(1, (stops - first).max(initial=0)))
            pos = first[:, None] + np.arange(length)
            inside = pos < stops[:, None]
            return _bags(x[Tensor._of(np.where(inside, pos, 0) % builtins.max(n, 1))], w,
                         Tensor._of(inside), None, mode, padding_idx)  # fmt: skip
        bag = Tensor._of(np.searchsorted(first, np.arange(n), side="right") - 1)
        valid = Tensor._of(np.arange(n) < stops[-1] if b else np.zeros(n, np.bool_))
    keep = valid if padding_idx is None else valid & (x != padding_idx)
    rows = embedding(x, w) * reshape(keep, (n, 1)).astype(w.dtype)
    if scale is not None:
        rows = rows * reshape(scale, (n, 1))
    bag = where(keep, bag, 0)  # (dropped rows are zeros: they may go anywhere)
    out = index_put(Tensor._of(np.zeros((b, w.shape[1]), w.dtype)), (bag,), rows, accumulate=True)
    if mode == "sum":
        return out
    count = index_put(
        Tensor._of(np.zeros(b, w.dtype)), (bag,), keep.astype(w.dtype), accumulate=True
    )
    return out / reshape(maximum(count, 1.0), (b, 1))


def _bags(x: Tensor, w: Tensor, inside: Tensor | None, scale: Tensor | None, mode: str,
          padding_idx: int | None) -> Tensor:  # fmt: skip
    """The bags of (B, L) indices, the entries `inside` (default all) and not `padding_idx`."""
    keep = inside
    if padding_idx is not None:
        keep = (x != padding_idx) if keep is None else keep & (x != padding_idx)
    rows = embedding(x, w)
    if keep is None and mode != "max":
        rows = rows if scale is None else rows * reshape(scale, (*x.shape, 1))
        return sum(rows, 1) if mode == "sum" else mean(rows, 1)
    keep = Tensor._of(np.ones(x.shape, np.bool_)) if keep is None else keep
    mask = reshape(keep, (*x.shape, 1))
    if mode == "max":
        top = amax(where(mask, rows, -np.inf), 1)
        return where(reshape(sum(keep.astype(np.int64), 1) > 0, (-1, 1)), top, 0.0)
    rows = where(mask, rows, 0.0) if scale is None else where(mask, rows, 0.0) * \
        reshape(scale, (*x.shape, 1))  # fmt: skip
    total = sum(rows, 1)
    if mode == "sum":
        return total
    return total / reshape(maximum(sum(keep.astype(w.dtype), 1), 1.0), (-1, 1))


# --- PyTorch's other spellings: in-place activations, the old upsample -------------------------


def _in_place_variant(f: Callable) -> Callable:
    def variant(input: Any, *args: Any, **kwargs: Any) -> Tensor:
        return f(input, *args, inplace=True, **kwargs)

    variant.__name__ = f.__name__ + "_"
    variant.__doc__ = f"`{f.__name__}` written into its input."
    return variant


relu_, elu_, leaky_relu_, selu_, celu_, hardtanh_, threshold_ = (
    _in_place_variant(f) for f in (relu, elu, leaky_relu, selu, celu, hardtanh, threshold)
)


def upsample(input: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:  # fmt: skip
    """PyTorch's deprecated name of `interpolate`."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Bilinear with the corners aligned, as PyTorch's deprecated function."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pdist(input: Any, p: float = 2.0) -> Tensor:
    """The p-norm distances between the rows of an (N, M) input, each pair once (i < j), in
    row-major order: the upper triangle of `cdist(x, x)`, without its zero diagonal."""
    x = as_tensor(input)
    if x.ndim != 2:
        raise ShapeError(f"pdist: input {x.shape} must be 2-d (N, M)")
    i, j = np.triu_indices(x.shape[0], 1)
    diff = x[Tensor._of(i)] - x[Tensor._of(j)]
    return vector_norm(diff, p, -1)


@takes_unbatched(3)
def lp_pool2d(input: Any, norm_type: float, kernel_size: int | Sequence[int],
              stride: int | Sequence[int] | None = None,
              ceil_mode: bool = False) -> Tensor:  # fmt: skip
    """The p-norm of each window: (sum of x ** p) ** (1 / p), by average pooling, as PyTorch
    computes it (the sum's sign kept through a relu of its magnitude)."""
    kh, kw = _pair(kernel_size, "lp_pool2d", "kernel_size")
    pooled = avg_pool2d(as_tensor(input) ** norm_type, (kh, kw), stride, 0, ceil_mode)
    return (P.sign(pooled) * relu(abs(pooled)) * float(kh * kw)) ** (1.0 / norm_type)


@takes_unbatched(2)
def lp_pool1d(input: Any, norm_type: float, kernel_size: int, stride: int | None = None,
              ceil_mode: bool = False) -> Tensor:  # fmt: skip
    k = _single(kernel_size, "lp_pool1d", "kernel_size")
    s = None if stride is None else (1, _single(stride, "lp_pool1d", "stride"))
    x = _as_image(as_tensor(input), "lp_pool1d")
    return _as_rows(lp_pool2d(x, norm_type, (1, k), s, ceil_mode))


def rrelu(input: Any, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False, *, state: Tensor | None = None) -> Tensor:  # fmt: skip
    """Leaky relu whose negative slope is drawn from U(lower, upper) per element in training
    (from tracegrad's random state, afresh at every call of a compiled step) and is their mean
    in evaluation."""
    x = as_tensor(input)
    if training:
        slope = lower + (upper - lower) * random.uniform(x.shape, x.dtype, state)
    else:
        slope = (lower + upper) / 2
    return _in_place(input, where(x >= 0, x, x * slope), inplace, "rrelu")


rrelu_ = _in_place_variant(rrelu)


def max_unpool1d(input: Any, indices: Any, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:  # fmt: skip
    """`max_unpool2d` over one row (the indices are positions in each row)."""
    op = "max_unpool1d"
    if as_tensor(input).ndim == 2:  # one unbatched (C, L) input, as PyTorch takes
        batched = [reshape(as_tensor(t), (1, *as_tensor(t).shape)) for t in (input, indices)]
        return max_unpool1d(*batched, kernel_size, stride, padding, output_size)[0]
    k = _single(kernel_size, op, "kernel_size")
    s = k if stride is None or stride == [] else _single(stride, op, "stride")
    size = None if output_size is None else (1, tuple(output_size)[-1])
    y = max_unpool2d(_as_image(as_tensor(input), op), _as_image(as_tensor(indices), op), (1, k),
                     (1, s), (0, _single(padding, op, "padding")), size)  # fmt: skip
    return _as_rows(y)


def _with_indices(pool: Callable[..., Any]) -> Callable[..., Any]:
    """PyTorch's `<pool>_with_indices`: `pool` with the same arguments, always returning
    (values, indices) (a `return_indices` given is ignored, as PyTorch ignores it)."""
    signature = inspect.signature(pool)

    @functools.wraps(pool)
    def with_indices(*args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        bound = signature.bind(*args, **kwargs)
        bound.arguments["return_indices"] = True
        return pool(*bound.args, **bound.kwargs)

    with_indices.__name__ = with_indices.__qualname__ = pool.__name__ + "_with_indices"
    return with_indices


max_pool1d_with_indices = _with_indices(max_pool1d)
max_pool2d_with_indices = _with_indices(max_pool2d)
max_pool3d_with_indices = _with_indices(max_pool3d)
adaptive_max_pool1d_with_indices = _with_indices(adaptive_max_pool1d)
adaptive_max_pool2d_with_indices = _with_indices(adaptive_max_pool2d)
adaptive_max_pool3d_with_indices = _with_indices(adaptive_max_pool3d)
__all__ += [
    "fractional_max_pool2d",
    "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d",
    "fractional_max_pool3d_with_indices",
    "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d_with_indices",
    "max_pool1d_with_indices",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
]

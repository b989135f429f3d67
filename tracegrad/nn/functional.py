"""Activations and losses, written as compositions of tracegrad's primitives.

Nothing here has its own VJP: gradients, tracing and higher order come from the primitives.
Reductions and softmax-like functions take `axis` (NumPy's name) or `dim` (PyTorch's), as
everywhere in tracegrad; losses take PyTorch's signatures.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.core.ops import attention as attention_impl
from tracegrad.frontend import random
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import (
    abs,
    check_range,
    concatenate,
    erf,
    log,
    log1p,
    log_softmax,
    matmul,
    maximum,
    mean,
    reshape,
    sigmoid,
    softmax,
    softplus,
    sqrt,
    stack,
    sum,
    tanh,
    transpose,
    where,
)
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "conv1d",
    "conv2d",
    "cross_entropy",
    "dropout",
    "embedding",
    "huber_loss",
    "l1_loss",
    "linear",
    "nll_loss",
    "smooth_l1_loss",
    "gelu",
    "layer_norm",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "one_hot",
    "relu",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "tanh",
]

_REDUCTIONS = ("mean", "sum", "none")


def relu(x: Any) -> Tensor:
    """max(0, x). Zero comes first so that relu'(0) = 0, as in PyTorch (maximum sends ties left)."""
    return maximum(0.0, as_tensor(x))


def gelu(x: Any, approximate: str = "none") -> Tensor:
    """GELU: x Phi(x) with the exact normal CDF (erf), or with `approximate="tanh"`
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as PyTorch's."""
    x = as_tensor(x)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x**3.0)))
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    return 0.5 * x * (1.0 + erf(x * 0.7071067811865476))


def silu(x: Any) -> Tensor:
    """x * sigmoid(x) (swish)."""
    x = as_tensor(x)
    return x * sigmoid(x)


def dropout(
    x: Any, p: float = 0.5, training: bool = True, *, state: Tensor | None = None
) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p), in training; the
    mask is drawn from `state` (default: frontend.random's), which this advances."""
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
    weight = Tensor(np.ones(d, x.dtype)) if weight is None else reshape(weight, (d,))
    bias = Tensor(np.zeros(d, x.dtype)) if bias is None else reshape(bias, (d,))
    dtype = np.result_type(x.dtype, weight.dtype, bias.dtype, np.float16)  # floating, promoted
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
    labels = _class_indices(labels, logits.shape[1], ignore_index, "cross_entropy: labels")
    logp = log_softmax(logits, axis=-1)
    nll, weights = _nll(logp, labels, weight, ignore_index)
    if label_smoothing:
        classes = logits.shape[1]
        w = 1.0 if weight is None else as_tensor(weight)
        smooth = -sum(logp * w, axis=-1) / float(classes)
        smooth = where(labels != ignore_index, smooth, 0.0)
        nll = nll * (1.0 - label_smoothing) + smooth * label_smoothing
    return _weighted_reduce(nll, weights, reduction)


def _class_indices(labels: Tensor, classes: int, ignore_index: int, what: str) -> Tensor:
    """`labels` as int64, after checking each is a class or `ignore_index` (in the plan when
    traced): an index of -1 would read the last class. Unsigned labels cannot hold
    ignore_index = -100, so they are compared as int64."""
    labels = check_range(labels, 0, classes, what, ignore_index)
    return labels if labels.dtype == np.int64 else labels.astype(np.int64)


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
    """PyTorch's weighted mean divides by the total weight of the (kept) targets. With none
    kept (a batch of padding) the mean is NaN (0 / 0) and its gradient 0, as in PyTorch: a
    gradient of 0 / 0 would turn every parameter NaN. (PyTorch's gradient is NaN when the kept
    targets' weights are all 0; here it is 0 then too.)"""
    if reduction != "mean":
        return _reduce(loss, reduction)
    total = sum(weights)
    empty = total == 0.0
    return where(empty, np.nan, sum(loss) / where(empty, 1.0, total))


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
    labels = _class_indices(labels, logp.shape[1], ignore_index, "nll_loss: target")
    nll, weights = _nll(logp, labels, weight, ignore_index)
    return _weighted_reduce(nll, weights, reduction)


def _same_shapes(op: str, input: Any, target: Any, reduction: str) -> tuple[Tensor, Tensor]:
    _check_reduction(op, reduction)
    input, target = as_tensor(input), as_tensor(target)
    if input.shape != target.shape:
        raise ShapeError(f"{op}: input {input.shape} and target {target.shape} differ")
    return input, target


def binary_cross_entropy(
    input: Any, target: Any, weight: Any = None, reduction: str = "mean"
) -> Tensor:
    """-(t log p + (1 - t) log(1 - p)), the logs clamped at -100 as in PyTorch."""
    p, t = _same_shapes("binary_cross_entropy", input, target, reduction)
    loss = -(t * maximum(log(p), -100.0) + (1.0 - t) * maximum(log1p(-p), -100.0))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(
    input: Any, target: Any, weight: Any = None, reduction: str = "mean", pos_weight: Any = None
) -> Tensor:
    """Sigmoid and binary cross-entropy in one stable expression:
    (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)."""
    x, t = _same_shapes("binary_cross_entropy_with_logits", input, target, reduction)
    scale = 1.0 if pos_weight is None else 1.0 + (as_tensor(pos_weight) - 1.0) * t
    loss = (1.0 - t) * x + scale * softplus(-x)
    return _reduce(loss if weight is None else loss * weight, reduction)


def l1_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    x, t = _same_shapes("l1_loss", input, target, reduction)
    return _reduce(abs(x - t), reduction)


def smooth_l1_loss(input: Any, target: Any, reduction: str = "mean", beta: float = 1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (PyTorch's)."""
    x, t = _same_shapes("smooth_l1_loss", input, target, reduction)
    d = abs(x - t)
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, (0.5 / beta) * d * d, d - 0.5 * beta), reduction)


def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta): smooth_l1_loss times delta."""
    x, t = _same_shapes("huber_loss", input, target, reduction)
    d = abs(x - t)
    return _reduce(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def linear(input: Any, weight: Any, bias: Any = None) -> Tensor:
    """input @ weight.T + bias, weight of shape (out, in)."""
    y = as_tensor(input) @ as_tensor(weight).T
    return y if bias is None else y + bias


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    """Squared error. The shapes must match: a silent (N, 1) vs (N,) broadcast is a classic bug."""
    input, target = _same_shapes("mse_loss", input, target, reduction)
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
    """2-d cross-correlation of (N, C, H, W) `input` with (out, C / groups, kh, kw) `weight`."""
    input, weight = as_tensor(input), as_tensor(weight)
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
    """1-d cross-correlation of (N, C, L) `input` with (out, C / groups, k) `weight`: a conv2d
    over a height of one."""
    input, weight = as_tensor(input), as_tensor(weight)
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
        rows = Tensor(np.full((n, c, ph, w), value, x.dtype))
        x = concatenate([rows, x, rows], axis=2)
    if pw:
        cols = Tensor(np.full((n, c, h + 2 * ph, pw), value, x.dtype))
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


def _fold(op: Callable, parts: list) -> Tensor:
    out = parts[0]
    for p in parts[1:]:
        out = op(out, p)
    return out


def max_pool2d(
    input: Any,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    """The max over each window (padding counts as -inf); ties send the gradient to the first
    maximum, as PyTorch does. Backward keeps only the (int8) positions of the maxima; the Numba
    backend runs kernels of its own (tracegrad.compiler.kernels.pool)."""
    if ceil_mode or return_indices:
        raise NotImplementedError("max_pool2d: ceil_mode and return_indices are not supported")
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
    with no_grad():
        idx = P.max_pool2d_argmax(x, **geometry)
    return P.max_pool2d(x, idx, **geometry)


def avg_pool2d(
    input: Any,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """The mean over each window; padding zeros count unless `count_include_pad=False`."""
    if ceil_mode:
        raise NotImplementedError("avg_pool2d: ceil_mode is not supported")
    x = as_tensor(input)
    if x.dtype.kind != "f":  # PyTorch refuses integers too (but int64, which it truncates)
        raise TypeError(f"avg_pool2d: input must be floating, not {x.dtype} (its window sums "
                        "would wrap around); convert it first, e.g. x.float()")  # fmt: skip
    total = _fold(lambda a, b: a + b, _windows(x, "avg_pool2d", kernel_size, stride, padding, 1,
                                               0.0))  # fmt: skip
    if divisor_override:
        return total / float(divisor_override)
    if count_include_pad or _pair(padding, "avg_pool2d", "padding") == (0, 0):
        kh, kw = _pair(kernel_size, "avg_pool2d", "kernel_size")
        return total / float(kh * kw)
    return total / _window_count(x, kernel_size, stride, padding)


def _window_count(x: Tensor, kernel_size, stride, padding) -> np.ndarray:
    """How many of each window's elements lie inside `x` (not in its padding): a constant."""
    (kh, kw), (ph, pw) = _pair(kernel_size, "", ""), _pair(padding, "", "")
    (sh, sw) = _pair(stride if stride is not None and stride != [] else (kh, kw), "", "")
    inside = np.pad(np.ones(x.shape[2:], x.dtype), ((ph, ph), (pw, pw)))
    oh, ow = (inside.shape[0] - kh) // sh + 1, (inside.shape[1] - kw) // sw + 1
    return builtins.sum(inside[i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
                        for i in range(kh) for j in range(kw))  # fmt: skip


def adaptive_avg_pool2d(input: Any, output_size: int | Sequence[int | None]) -> Tensor:
    """Mean over PyTorch's adaptive windows: rows floor(i H / oh) to ceil((i + 1) H / oh)."""
    x = as_tensor(input)
    if x.ndim != 4:
        raise ShapeError(f"adaptive_avg_pool2d: input {x.shape} must be 4-d (N, C, H, W)")
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    (n, c, h, w) = x.shape
    oh, ow = (h if size[0] is None else size[0]), (w if size[1] is None else size[1])
    if h % oh == 0 and w % ow == 0:
        return mean(reshape(x, (n, c, oh, h // oh, ow, w // ow)), axis=(3, 5))
    bounds = lambda i, o, s: (i * s // o, -(-(i + 1) * s // o))
    rows = []
    for i in range(oh):
        r0, r1 = bounds(i, oh, h)
        rows.append(stack([mean(x[:, :, r0:r1, slice(*bounds(j, ow, w))], axis=(2, 3))
                           for j in range(ow)], axis=-1))  # fmt: skip
    return stack(rows, axis=2)


# --- embeddings, attention, normalization -----------------------------------------------------


def embedding(input: Any, weight: Any, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` picked by integer `input`; the gradient is a scatter-add into the rows
    (getitem's VJP), and the row `padding_idx` gets none."""
    input, weight = as_tensor(input), as_tensor(weight)
    if input.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, not {input.dtype}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight {weight.shape} must be 2-d (num_embeddings, dim)")
    input = check_range(input, 0, weight.shape[0], "embedding: indices")  # -1 would read a row
    out = weight[input]
    if padding_idx is None:
        return out
    padding_idx %= weight.shape[0]
    keep = reshape(input != padding_idx, (*input.shape, 1))
    return where(keep, out, weight.detach()[input])


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """int64 indicator vectors along a new last axis."""
    t = as_tensor(tensor)
    if t.dtype.kind not in "iu":
        raise TypeError(f"one_hot: indices must be integers, not {t.dtype}")
    if num_classes < 0:
        num_classes = int(t.numpy().max()) + 1 if t.size else 0
    t = check_range(t, 0, num_classes, "one_hot: indices")  # else a row of zeros
    classes = Tensor(np.arange(num_classes, dtype=t.dtype))
    return (reshape(t, (*t.shape, 1)) == classes).astype(np.int64)


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., L, E) queries and (..., S, E) keys. A boolean
    mask says which keys a query may attend to (True: attend); a float mask is added. Without a
    mask, or with `is_causal`, it is one op (`attention`, fused kernels forward and backward);
    a mask, or leading axes that broadcast, take the composed ops."""
    if dropout_p != 0.0:
        raise NotImplementedError("scaled_dot_product_attention: dropout_p must be 0 for now")
    q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
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
    if attn_mask is None and same and q.dtype == k.dtype == v.dtype and q.dtype.kind == "f":
        # the op's result has its heads next to its features: heads first again, as a view
        return attention_impl.heads_next(P.attention(q, k, v, scale=scale, causal=bool(is_causal)))
    if is_causal:
        attn_mask = Tensor(attention_impl.causal_mask(q.shape[-2], k.shape[-2]))
    return matmul(_probabilities(q, k, scale, attn_mask), v)


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
    return transpose(x, (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))


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
    axes = (0, *range(2, x.ndim))
    if training:
        count = x.size // x.shape[1]
        if count < 2:
            raise ValueError(f"batch_norm: expected more than 1 value per channel, got {x.shape}")
        mu = mean(x, axes, keepdims=True)
        centered = x - mu
        var = mean(centered * centered, axes, keepdims=True)
        if running_mean is not None and running_var is not None:
            with no_grad():
                m = momentum
                new_mean = running_mean * (1.0 - m) + reshape(mu.detach(), (-1,)) * m
                unbiased = reshape(var.detach(), (-1,)) * (count / (count - 1))
                new_var = running_var * (1.0 - m) + unbiased * m
                running_mean._assign(new_mean)
                running_var._assign(new_var)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: evaluation needs running_mean and running_var")
        centered = x - reshape(running_mean, shape)
        var = reshape(running_var, shape)
    y = centered / sqrt(var + eps)
    if weight is not None:
        y = y * reshape(weight, shape)
    return y if bias is None else y + reshape(bias, shape)

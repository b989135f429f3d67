"""PyTorch's top-level functions that `torch.nn.functional` (or a Tensor method) also has, with the
top level's own signatures (ATen's): `torch.dropout(x, p, train)`, `torch.batch_norm(x, weight,
bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)`, `torch.embedding(weight,
indices)`, the losses' `reduction` as an int (0 none, 1 mean, 2 sum), `torch.relu_(x)` for
`x.relu_()`; and the small functions scripts reach for (`std_mean`, `broadcast_tensors`,
`combinations`, the windows, the recurrent cells' one step `lstm_cell`, ...)."""

from __future__ import annotations

import builtins
import functools
import itertools
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import tracegrad as _tg
from tracegrad.frontend.storage import UntypedStorage
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import functional as F
from tracegrad.nn.recurrent import gru_cell, lstm_cell, rnn_relu_cell, rnn_tanh_cell

# --- the same function as nn.functional's, whose leading arguments are the top level's -------

# (not conv2d: `tracegrad.conv2d` is tracegrad's own op, which torch's namespace leaves out)
conv1d, conv3d = F.conv1d, F.conv3d
conv_transpose1d, conv_transpose2d = F.conv_transpose1d, F.conv_transpose2d
conv_transpose3d = F.conv_transpose3d
max_pool1d, max_pool2d, max_pool3d = F.max_pool1d, F.max_pool2d, F.max_pool3d
avg_pool1d, adaptive_avg_pool1d = F.avg_pool1d, F.adaptive_avg_pool1d
max_pool1d_with_indices = F.max_pool1d_with_indices
# torch.adaptive_max_pool1d(x, output_size) is F's with the indices: (values, indices)
adaptive_max_pool1d = F.adaptive_max_pool1d_with_indices
pixel_shuffle, pixel_unshuffle = F.pixel_shuffle, F.pixel_unshuffle
channel_shuffle = F.channel_shuffle
selu, celu, threshold, rrelu = F.selu, F.celu, F.threshold, F.rrelu
cosine_similarity, pairwise_distance, pdist = F.cosine_similarity, F.pairwise_distance, F.pdist
bilinear, rms_norm = F.bilinear, F.rms_norm


def layer_norm(input: Any, normalized_shape: Any, weight: Any = None, bias: Any = None,
               eps: float = 1e-5, cudnn_enable: bool = True) -> Tensor:  # fmt: skip
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input: Any, num_groups: int, weight: Any = None, bias: Any = None,
               eps: float = 1e-5, cudnn_enabled: bool = True) -> Tensor:  # fmt: skip
    return F.group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,
               training: bool, momentum: float, eps: float,
               cudnn_enabled: bool) -> Tensor:  # fmt: skip
    """ATen's order: the affine parameters before the running statistics."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                  use_input_stats: bool, momentum: float, eps: float,
                  cudnn_enabled: bool) -> Tensor:  # fmt: skip
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                           momentum, eps)  # fmt: skip


def embedding(weight: Any, indices: Any, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:  # fmt: skip
    """The weight first; padding_idx -1 is none (ATen's)."""
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("torch.embedding: scale_grad_by_freq and sparse are not provided")
    return F.embedding(indices, weight, None if padding_idx == -1 else padding_idx)


def dropout(input: Any, p: float, train: bool) -> Tensor:
    return F.dropout(input, p, train)


def dropout_(input: Any, p: float, train: bool) -> Tensor:
    return F.dropout(input, p, train, inplace=True)


def alpha_dropout(input: Any, p: float, train: bool) -> Tensor:
    return F.alpha_dropout(input, p, train)


def feature_alpha_dropout(input: Any, p: float, train: bool) -> Tensor:
    return F.feature_alpha_dropout(input, p, train)


# --- losses: `reduction` is ATen's int ----------------------------------------------------------

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(reduction: Any) -> str:
    if isinstance(reduction, str):
        return reduction
    if reduction not in (0, 1, 2):
        raise ValueError(f"reduction: expected 0 (none), 1 (mean) or 2 (sum), got {reduction!r}")
    return _REDUCTIONS[reduction]


def kl_div(input: Any, target: Any, reduction: Any = 1, *, log_target: bool = False) -> Tensor:
    """1 (mean) is the mean over all elements, as ATen's (F.kl_div's "batchmean" is not)."""
    loss = F.kl_div(input, target, reduction="none", log_target=log_target)
    return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[_reduction(reduction)]


def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None,
                                     pos_weight: Any = None,
                                     reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.binary_cross_entropy_with_logits(input, target, weight,
                                              reduction=_reduction(reduction),
                                              pos_weight=pos_weight)  # fmt: skip


def hinge_embedding_loss(input: Any, target: Any, margin: float = 1.0,
                         reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def margin_ranking_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                        reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.margin_ranking_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def cosine_embedding_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                          reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.cosine_embedding_loss(input1, input2, target, margin,
                                   reduction=_reduction(reduction))  # fmt: skip


def triplet_margin_loss(anchor: Any, positive: Any, negative: Any, margin: float = 1.0,
                        p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                        reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                 reduction=_reduction(reduction))  # fmt: skip


def poisson_nll_loss(input: Any, target: Any, log_input: bool, full: bool, eps: float,
                     reduction: Any) -> Tensor:  # fmt: skip
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps,
                              reduction=_reduction(reduction))  # fmt: skip


# --- small functions ----------------------------------------------------------------------------


def std_mean(input: Any, dim: Any = None, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """(std, mean) over `dim`, with `std`'s arguments (`unbiased`, `keepdim`, `correction`)."""
    keepdim = kwargs.get("keepdim", args[1] if len(args) > 1 else False)
    return _tg.std(input, dim, *args, **kwargs), _tg.mean(input, dim, keepdim)


def var_mean(input: Any, dim: Any = None, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """(var, mean) over `dim`, with `var`'s arguments."""
    keepdim = kwargs.get("keepdim", args[1] if len(args) > 1 else False)
    return _tg.var(input, dim, *args, **kwargs), _tg.mean(input, dim, keepdim)


def broadcast_tensors(*tensors: Any) -> tuple[Tensor, ...]:
    """The tensors expanded to their common shape (differentiable views)."""
    ts = [_tg.as_tensor(t) for t in tensors]
    shape = np.broadcast_shapes(*(t.shape for t in ts))
    return tuple(t.expand(*shape) for t in ts)


def scalar_tensor(s: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> Tensor:  # fmt: skip
    """A 0-d tensor of the default float dtype (also for an int), as PyTorch's."""
    return _tg.tensor(s, dtype=_tg.get_default_dtype() if dtype is None else dtype, device=device)


def rsub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """other - alpha * input."""
    return _tg.sub(other, input, alpha=alpha)


def fill(input: Any, value: Any) -> Tensor:
    """A new tensor like `input` holding `value` everywhere."""
    return _tg.as_tensor(input).clone().fill_(value)


def detach(input: Tensor) -> Tensor:
    return input.detach()


def chain_matmul(*matrices: Any) -> Tensor:
    """The product of the matrices, left to right (deprecated, with PyTorch's warning)."""
    warnings.warn("torch.chain_matmul is deprecated and will be removed in a future PyTorch "
                  "release. Use torch.linalg.multi_dot instead, which accepts a list of two or "
                  "more tensors rather than multiple parameters.", UserWarning,
                  stacklevel=2)  # fmt: skip
    return functools.reduce(_tg.matmul, matrices)


def is_same_size(input: Tensor, other: Tensor) -> bool:
    return input.is_same_size(other)


def combinations(input: Any, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The r-element combinations of a 1-d tensor's elements, one per row (gathered, so
    differentiable)."""
    x = _tg.as_tensor(input)
    if x.ndim != 1:
        raise ValueError(f"combinations: expects a 1-d tensor, got shape {x.shape}")
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    if r == 0:
        return x[:0]
    rows = list(pick(range(x.shape[0]), r))
    return x[_tg.tensor(np.array(rows, np.int64).reshape(len(rows), r))]


def unravel_index(indices: Any, shape: Any) -> tuple[Tensor, ...]:
    """The coordinates of flat `indices` in a tensor of `shape` (int64 tensors, one per dim)."""
    flat = np.asarray(_tg.as_tensor(indices)._concrete("torch.unravel_index"))
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    size = builtins.int(np.prod(shape, dtype=np.int64))
    if np.any((flat < -size) | (flat >= size)):
        raise RuntimeError(f"unravel_index: index out of bounds for shape {shape}")
    return tuple(_tg.tensor(c.astype(np.int64)) for c in np.unravel_index(flat % max(size, 1),
                                                                          shape))  # fmt: skip


def asarray(obj: Any, *, dtype: Any = None, device: Any = None, copy: bool | None = None,
            requires_grad: bool = False) -> Tensor:  # fmt: skip
    """PyTorch's `torch.asarray`: `as_tensor` (sharing an ndarray's or tensor's memory where the
    dtype allows), a copy with `copy=True`."""
    if isinstance(obj, UntypedStorage):  # its bytes read as dtype (a checkpoint's tensor)
        t = Tensor._of(obj.__array__(dtype), requires_grad=requires_grad)
        return _tg.tensor(t) if copy else t
    if copy:
        t = _tg.tensor(obj.detach() if isinstance(obj, Tensor) else obj, dtype=dtype, device=device)
    else:
        t = _tg.as_tensor(obj, dtype=dtype, device=device)
    return t.requires_grad_() if requires_grad else t


# --- window functions (torch.signal's classic ones) ---------------------------------------------


def _window(name: str, values: Callable[[np.ndarray, int], np.ndarray]) -> Callable:
    def window(window_length: int, periodic: bool = True, *args: Any, dtype: Any = None,
               layout: Any = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:  # fmt: skip
        n = builtins.int(window_length)
        dtype = _tg.get_default_dtype() if dtype is None else dtype
        if n <= 1:
            return _tg.ones(n, dtype=dtype, device=device, requires_grad=requires_grad)
        m = n + 1 if periodic else n
        w = values(np.arange(m, dtype=np.float64), m, *args)[:n]
        return _tg.tensor(w, dtype=dtype, device=device, requires_grad=requires_grad)

    window.__name__ = window.__qualname__ = name
    return window


def _cosines(*a: float) -> Callable:
    return lambda k, m: sum(c * (-1) ** i * np.cos(2 * math.pi * i * k / (m - 1))
                            for i, c in enumerate(a))  # fmt: skip


hann_window = _window("hann_window", _cosines(0.5, 0.5))
blackman_window = _window("blackman_window", _cosines(0.42, 0.5, 0.08))
bartlett_window = _window("bartlett_window", lambda k, m: 1 - np.abs(2 * k / (m - 1) - 1))


def _hamming(k: np.ndarray, m: int, alpha: float = 0.54, beta: float = 0.46) -> np.ndarray:
    return alpha - beta * np.cos(2 * math.pi * k / (m - 1))


def _kaiser(k: np.ndarray, m: int, beta: float = 12.0) -> np.ndarray:
    return np.i0(beta * np.sqrt(1 - (2 * k / (m - 1) - 1) ** 2)) / np.i0(beta)


hamming_window = _window("hamming_window", _hamming)
kaiser_window = _window("kaiser_window", _kaiser)


# --- torch.X_(input, ...) for the in-place methods input.X_(...) ---------------------------------

_IN_PLACE_FUNCTIONS = (
    "abs_", "acos_", "acosh_", "addmv_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_",
    "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "clamp_", "clamp_max_",
    "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_", "detach_", "erf_", "erfc_", "exp2_",
    "exp_", "expm1_", "fill_", "fix_", "floor_", "frac_", "i0_", "index_put_", "ldexp_", "log10_",
    "log1p_", "log2_", "log_", "logit_", "nan_to_num_", "neg_", "negative_", "rad2deg_",
    "reciprocal_", "relu_", "resize_as_", "round_", "rsqrt_", "sigmoid_", "sin_", "sinc_", "sinh_",
    "sqrt_", "square_", "tan_", "tanh_", "trunc_", "xlogy_", "zero_",
)  # fmt: skip


def _in_place_function(name: str) -> Callable:
    def function(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"`input.{name}(...)`."
    return function


IN_PLACE_FUNCTIONS = {name: _in_place_function(name) for name in _IN_PLACE_FUNCTIONS}
# nn.functional's in-place activations, with the top level's arguments
IN_PLACE_FUNCTIONS.update(selu_=F.selu_, celu_=F.celu_, threshold_=F.threshold_, rrelu_=F.rrelu_)

__all__ = [
    name for name in list(globals())
    if not name.startswith("_") and name not in (
        "annotations", "builtins", "functools", "itertools", "math", "warnings", "np", "Any",
        "Callable", "Tensor", "F", "IN_PLACE_FUNCTIONS")
]  # fmt: skip

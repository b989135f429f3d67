"""Layers for real models, with PyTorch's constructor arguments, initialization and
`state_dict` keys: convolution, pooling, embeddings, batch norm, attention, containers."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tracegrad import distributed
from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.core.primitives import where
from tracegrad.frontend.functions import broadcast_to, cat, permute, reshape, unflatten
from tracegrad.frontend.tensor import Tensor, as_tensor, get_default_dtype
from tracegrad.nn import functional as F
from tracegrad.nn import init
from tracegrad.nn.modules import (
    Dropout,
    FunctionLayer,
    Linear,
    Module,
    Parameter,
    empty_parameter,
    inverse_sqrt,
    renumber,
    reset_affine,
    reset_uniform,
)

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AlphaDropout",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Bilinear",
    "ChannelShuffle",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "CosineSimilarity",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "Embedding",
    "EmbeddingBag",
    "FeatureAlphaDropout",
    "Flatten",
    "Fold",
    "GroupNorm",
    "Identity",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LocalResponseNorm",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
    "PairwiseDistance",
    "ParameterDict",
    "ParameterList",
    "RMSNorm",
    "Unflatten",
    "Unfold",
    "SyncBatchNorm",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxUnpool1d",
    "RReLU",
]


def _tuple(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, int) else tuple(int(a) for a in v)


class _ConvNd(Module):
    """Weight (out, in / groups, *kernel), or (in, out / groups, *kernel) when transposed, and
    bias drawn as PyTorch draws them (kaiming uniform with a = sqrt(5): U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), fan_in the weight's dim 1 times the kernel's size)."""

    dims = 2
    transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros"):  # fmt: skip
        super().__init__()
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{type(self).__name__}: padding_mode must be 'zeros', 'reflect', "
                             f"'replicate' or 'circular', not {padding_mode!r}")  # fmt: skip
        if padding_mode != "zeros" and self.transposed:
            raise ValueError(f"{type(self).__name__}: only padding_mode 'zeros' is supported")
        self.padding_mode = padding_mode
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{type(self).__name__}: in_channels {in_channels} and out_channels "
                f"{out_channels} must divide by groups {groups}"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, self.dims)
        self.stride, self.dilation = _tuple(stride, self.dims), _tuple(dilation, self.dims)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, self.dims)
        self.weight = empty_parameter(*self._weight_shape())
        self.bias = empty_parameter(out_channels) if bias else None
        self.reset_parameters()

    def _weight_shape(self) -> tuple[int, ...]:
        channels = (self.in_channels, self.out_channels // self.groups) if self.transposed \
            else (self.out_channels, self.in_channels // self.groups)  # fmt: skip
        return (*channels, *self.kernel_size)

    def reset_parameters(self) -> None:
        """PyTorch's: weight, then bias, from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in the
        weight's dim 1 times the kernel's size."""
        fan_in = self.weight.shape[1] * math.prod(self.weight.shape[2:])
        reset_uniform(inverse_sqrt(fan_in), self.weight, self.bias)

    def extra_repr(self) -> str:
        """PyTorch's: what differs from the defaults after the sizes and stride."""
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")  # fmt: skip
        zeros = (0,) * self.dims
        output_padding = getattr(self, "output_padding", zeros)
        for name, value, default in (("padding", self.padding, zeros),
                                     ("dilation", self.dilation, (1,) * self.dims),
                                     ("output_padding", output_padding, zeros),
                                     ("groups", self.groups, 1)):  # fmt: skip
            text += f", {name}={value}" if value != default else ""
        text += ", bias=False" if self.bias is None else ""
        return text + (
            f", padding_mode={self.padding_mode}" if self.padding_mode != "zeros" else ""
        )

    def _input(self, x: Tensor) -> tuple[Tensor, Any]:
        """The input and the convolution's padding: with a padding_mode other than zeros, the
        input padded that way (PyTorch's F.pad before the convolution) and no more padding."""
        if self.padding_mode == "zeros" or self.padding == "valid":
            return x, self.padding
        if self.padding == "same":
            totals = [d * (k - 1) for k, d in zip(self.kernel_size, self.dilation, strict=True)]
            pairs = [(t // 2, t - t // 2) for t in totals]
        else:
            pairs = [(p, p) for p in self.padding]
        widths = [w for pair in reversed(pairs) for w in pair]  # F.pad: the last axis first
        return F.pad(x, widths, mode=self.padding_mode), 0


class Conv2d(_ConvNd):
    def forward(self, x: Tensor) -> Tensor:
        x, padding = self._input(x)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)  # fmt: skip


class Conv1d(_ConvNd):
    dims = 1

    def forward(self, x: Tensor) -> Tensor:
        x, padding = self._input(x)
        padding = padding if isinstance(padding, str | int) else padding[0]
        return F.conv1d(x, self.weight, self.bias, self.stride[0], padding, self.dilation[0],
                        self.groups)  # fmt: skip


class Conv3d(_ConvNd):
    dims = 3

    def forward(self, x: Tensor) -> Tensor:
        x, padding = self._input(x)
        return F.conv3d(x, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)  # fmt: skip


class _ConvTransposeNd(_ConvNd):
    """The transposed convolution (the gradient of a convolution with respect to its input), with
    PyTorch's arguments in PyTorch's order; forward(x, output_size) picks the output_padding
    that gives `output_size`."""

    transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 output_padding: int | Sequence[int] = 0, groups: int = 1, bias: bool = True,
                 dilation: int | Sequence[int] = 1, padding_mode: str = "zeros"):  # fmt: skip
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be an int or a tuple, not "
                             f"{padding!r}")  # fmt: skip
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode)  # fmt: skip
        self.output_padding = _tuple(output_padding, self.dims)

    def _output_padding(self, x: Tensor, output_size: Sequence[int] | None) -> tuple[int, ...]:
        if output_size is None:
            return self.output_padding
        want = tuple(output_size)[-self.dims :]
        smallest = tuple((x.shape[-self.dims + i] - 1) * self.stride[i] - 2 * self.padding[i]
                         + self.dilation[i] * (self.kernel_size[i] - 1) + 1
                         for i in range(self.dims))  # fmt: skip
        if any(not s <= w < s + d for w, s, d in zip(want, smallest, self.stride, strict=True)):
            raise ValueError(f"{type(self).__name__}: output_size {tuple(output_size)} for input "
                             f"{x.shape}: each size from {smallest} to that plus the stride "
                             f"{self.stride} minus one")  # fmt: skip
        return tuple(w - s for w, s in zip(want, smallest, strict=True))


class ConvTranspose2d(_ConvTransposeNd):
    def forward(self, x: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)  # fmt: skip


class ConvTranspose1d(_ConvTransposeNd):
    dims = 1

    def forward(self, x: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        return F.conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)  # fmt: skip


class ConvTranspose3d(_ConvTransposeNd):
    dims = 3

    def forward(self, x: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        return F.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)  # fmt: skip


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):  # fmt: skip
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None or stride == [] else stride  # PyTorch's
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)  # fmt: skip

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")  # fmt: skip


class LPPool2d(Module):
    """The p-norm of each window (`functional.lp_pool2d`)."""

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.lp_pool2d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")  # fmt: skip


class LPPool1d(LPPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.lp_pool1d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class MaxUnpool2d(Module):
    """Puts `MaxPool2d(..., return_indices=True)`'s maxima back where they came from."""

    _axes = 2

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def extra_repr(self) -> str:
        """PyTorch's: each as a tuple over the axes, the stride the kernel's by default."""
        kernel = _tuple(self.kernel_size, self._axes)
        stride = kernel if self.stride is None else _tuple(self.stride, self._axes)
        return (f"kernel_size={kernel}, stride={stride}, "
                f"padding={_tuple(self.padding, self._axes)}")  # fmt: skip

    def forward(self, x: Tensor, indices: Tensor, output_size=None) -> Tensor:
        return F.max_unpool2d(x, indices, self.kernel_size, self.stride, self.padding,
                              output_size)  # fmt: skip


class LPPool3d(LPPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.lp_pool3d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class MaxUnpool3d(MaxUnpool2d):
    _axes = 3

    def forward(self, x: Tensor, indices: Tensor, output_size=None) -> Tensor:
        return F.max_unpool3d(x, indices, self.kernel_size, self.stride, self.padding,
                              output_size)  # fmt: skip


class MaxUnpool1d(MaxUnpool2d):
    _axes = 1

    def forward(self, x: Tensor, indices: Tensor, output_size=None) -> Tensor:
        return F.max_unpool1d(x, indices, self.kernel_size, self.stride, self.padding,
                              output_size)  # fmt: skip


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):  # fmt: skip
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None or stride == [] else stride  # PyTorch's
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size: int | Sequence[int | None]):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class MaxPool3d(MaxPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool3d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)  # fmt: skip


class AvgPool3d(AvgPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)  # fmt: skip


class AdaptiveAvgPool3d(AdaptiveAvgPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool3d(x, self.output_size)


class MaxPool1d(MaxPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)  # fmt: skip


class AvgPool1d(AvgPool2d):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):  # fmt: skip
        stride = kernel_size if stride is None or stride == [] else stride
        super().__init__(_tuple(kernel_size, 1), _tuple(stride, 1), _tuple(padding, 1),
                         ceil_mode, count_include_pad)  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)  # fmt: skip


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool1d(x, self.output_size)


class AdaptiveMaxPool2d(AdaptiveAvgPool2d):
    def __init__(self, output_size: int | Sequence[int | None], return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_max_pool2d(x, self.output_size, self.return_indices)


class FractionalMaxPool2d(Module):
    """Fractional max-pooling over (N, C, H, W), new windows at every call
    (`fractional_max_pool2d`)."""

    _pool = staticmethod(F.fractional_max_pool2d)

    def __init__(self, kernel_size: Any, output_size: Any = None, output_ratio: Any = None,
                 return_indices: bool = False, _random_samples: Any = None) -> None:  # fmt: skip
        super().__init__()
        if output_size is None and output_ratio is None:
            raise ValueError(f"{type(self).__name__} requires specifying either an output size, "
                             "or a pooling ratio")  # fmt: skip
        self.kernel_size, self.output_size, self.output_ratio = (
            kernel_size,
            output_size,
            output_ratio,
        )
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)

    def forward(self, x: Tensor) -> Any:
        return self._pool(x, self.kernel_size, self.output_size, self.output_ratio,
                          self.return_indices, _random_samples=self._random_samples)  # fmt: skip


class FractionalMaxPool3d(FractionalMaxPool2d):
    """Fractional max-pooling over (N, C, T, H, W) (`fractional_max_pool3d`)."""

    _pool = staticmethod(F.fractional_max_pool3d)


class AdaptiveMaxPool3d(AdaptiveMaxPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_max_pool3d(x, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(AdaptiveMaxPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_max_pool1d(x, self.output_size, self.return_indices)


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) inputs in training (`functional.dropout1d`)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout1d(x, self.p, self.training, self.inplace, state=self.random_state)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) inputs in training (`functional.dropout2d`)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout2d(x, self.p, self.training, self.inplace, state=self.random_state)


class RReLU(Dropout):
    """Leaky relu with a random negative slope from U(lower, upper) in training, their mean in
    evaluation (`functional.rrelu`); its draws come from a random state as Dropout's masks."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False, *,
                 seed: int | None = None):  # fmt: skip
        super().__init__(0.0, inplace, seed=seed)
        self.lower, self.upper = lower, upper

    def forward(self, x: Tensor) -> Tensor:
        return F.rrelu(x, self.lower, self.upper, self.training, self.inplace,
                       state=self.random_state)  # fmt: skip

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}"


class Dropout3d(Dropout):
    """Zeroes whole channels of (N, C, D, H, W) inputs in training (`functional.dropout3d`)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout3d(x, self.p, self.training, self.inplace, state=self.random_state)


class RMSNorm(Module):
    """Root-mean-square normalization over the trailing `normalized_shape` axes (no centring),
    with a learned scale: LLaMA-style transformers' norm."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True):  # fmt: skip
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape, self.eps = tuple(shape), eps
        self.weight = None
        if elementwise_affine:
            self.weight = empty_parameter(*self.normalized_shape)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        affine = self.weight is not None
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={affine}"


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Unflatten(Module):
    """Splits axis `dim` into `unflattened_size` (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size: Sequence[int]):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"

    def forward(self, x: Tensor) -> Tensor:
        return unflatten(x, self.dim, self.unflattened_size)


class Flatten(Module):
    """Flattens axes start_dim..end_dim into one (by default all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"

    def forward(self, x: Tensor) -> Tensor:
        start, end = self.start_dim % x.ndim, self.end_dim % x.ndim
        return reshape(x, (*x.shape[:start], -1, *x.shape[end + 1 :]))


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


class Embedding(Module):
    """A (num_embeddings, embedding_dim) table drawn from N(0, 1); `padding_idx`'s row is zero
    and gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight: Tensor | None = None, _freeze: bool = False):  # fmt: skip
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse  # a dense gradient either way
        if padding_idx is not None:
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:
            self.weight = Parameter(as_tensor(_weight).detach(), requires_grad=not _freeze)
            return
        self.weight = empty_parameter(num_embeddings, embedding_dim)
        self.weight.requires_grad = not _freeze  # a fixed table (transformers' sinusoidal ones)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's: N(0, 1), then `padding_idx`'s row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.numpy()[self.padding_idx] = 0.0

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:  # fmt: skip
        """An embedding whose table is `embeddings` (shared, as PyTorch's), trained unless
        `freeze`."""
        table = as_tensor(embeddings)
        if table.ndim != 2:
            raise ShapeError(f"Embedding.from_pretrained: embeddings {table.shape} must be 2-d")
        return cls(*table.shape, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   table, freeze)  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        return F.embedding(x, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq)  # fmt: skip

    def extra_repr(self) -> str:
        """PyTorch's: the options that differ from their defaults."""
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        s += "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        s += "" if self.max_norm is None else f", max_norm={self.max_norm}"
        s += "" if self.norm_type == 2 else f", norm_type={self.norm_type}"
        s += ", scale_grad_by_freq=True" if self.scale_grad_by_freq else ""
        return s + (", sparse=True" if self.sparse else "")


class _BatchNorm(Module):
    """Per-channel normalization; running_mean, running_var and num_batches_tracked are buffers
    updated in place in training (a traced step writes them back)."""

    ndims: tuple[int, ...] = (2, 3)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True):  # fmt: skip
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = self.bias = None
        if affine:
            self.weight, self.bias = empty_parameter(num_features), empty_parameter(num_features)
        stats = track_running_stats
        dtype = get_default_dtype()
        mean, var = np.zeros(num_features, dtype), np.ones(num_features, dtype)
        self.register_buffer("running_mean", Tensor._of(mean) if stats else None)
        self.register_buffer("running_var", Tensor._of(var) if stats else None)
        count = Tensor._of(np.zeros((), np.int64)) if stats else None
        self.register_buffer("num_batches_tracked", count)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """Running mean zeros, variance ones and the batch count 0, in place."""
        if self.track_running_stats:
            reset_affine(self.running_var, self.running_mean)
            self.num_batches_tracked._assign(Tensor._of(np.zeros((), np.int64)))

    def reset_parameters(self) -> None:
        """PyTorch's: the running statistics, then weight ones and bias zeros."""
        self.reset_running_stats()
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.ndims:
            raise ValueError(f"{type(self).__name__}: expected a {self.ndims}-d input, got "
                             f"{x.shape}")  # fmt: skip
        momentum = self.momentum
        use_batch = self.training or self.running_mean is None
        if self.training and self.track_running_stats:
            momentum = self._count_batch()
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            use_batch, 0.0 if momentum is None else momentum, self.eps)  # fmt: skip

    def _count_batch(self) -> Any:
        """Count a training batch; the momentum of this update: `momentum`, or a cumulative
        average's, from the count (a tensor when traced)."""
        count = self.num_batches_tracked
        count._assign(count + 1)
        if self.momentum is None:
            return (1.0 / count.astype(np.float64)).astype(self.running_mean.dtype)
        return self.momentum

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")  # fmt: skip


class BatchNorm1d(_BatchNorm):
    ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    ndims = (4,)


class BatchNorm3d(_BatchNorm):
    ndims = (5,)


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose statistics are those of every rank's batch together: in training across
    the ranks of a job (torch.distributed's group, or tracegrad.distributed's MPI world), the
    channels' sums and counts, then their squared deviations from the mean over all ranks, are
    all-reduced (differentiably: each rank's gradient is that of the whole batch's
    normalization; inside a compiled step, nodes of the plan). Alone, it is batch norm. (PyTorch
    refuses it on the CPU.)"""

    ndims = (2, 3, 4, 5)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group: Any = None):  # fmt: skip
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def forward(self, x: Tensor) -> Tensor:
        place = distributed.job_place()
        if not self.training or place is None or place[1] == 1:
            return super().forward(x)
        if x.ndim not in self.ndims:
            raise ValueError(f"SyncBatchNorm: expected a {self.ndims}-d input, got {x.shape}")
        axes = (0, *range(2, x.ndim))
        per_channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        local = x.sum(dim=axes)
        count = Tensor._of(bfloat16.full(1, x.numel() // x.shape[1], x._value.dtype))
        totals = P.allreduce(cat([local, count]), op="sum", timeout=None)
        n = totals[-1]
        mean = totals[:-1] / n
        centered = x - mean.reshape(per_channel)
        var = P.allreduce((centered * centered).sum(dim=axes), op="sum", timeout=None) / n
        y = centered / (var.reshape(per_channel) + self.eps).sqrt()
        if self.affine:
            y = y * self.weight.reshape(per_channel) + self.bias.reshape(per_channel)
        if self.track_running_stats:
            self._track(mean.detach(), (var * n / (n - 1)).detach())
        return y

    def _track(self, mean: Tensor, unbiased_var: Tensor) -> None:
        """The running statistics, as batch norm's."""
        m = self._count_batch()
        self.running_mean._assign(self.running_mean * (1 - m) + mean * m)
        self.running_var._assign(self.running_var * (1 - m) + unbiased_var * m)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        """`module` with each BatchNorm layer replaced by a SyncBatchNorm holding its tensors."""
        if isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNorm | cls):
            sync = cls(module.num_features, module.eps, module.momentum, module.affine,
                       module.track_running_stats)  # fmt: skip
            for name, value in (*module._parameters.items(), *module._buffers.items()):
                setattr(sync, name, value)
            sync.train(module.training)
            return sync
        for name, child in list(module.named_children()):
            setattr(module, name, cls.convert_sync_batchnorm(child, process_group))
        return module


class _InstanceNorm(_BatchNorm):
    """Normalizes each channel of each sample over its positions (F.instance_norm); PyTorch's
    defaults: no affine, no running statistics. Unbatched inputs are accepted."""

    dims = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False):  # fmt: skip
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == self.dims + 1:  # one sample: (C, *spatial)
            return self.forward(reshape(x, (1, *x.shape)))[0]
        if x.ndim != self.dims + 2:
            raise ValueError(f"{type(self).__name__}: expected a {self.dims + 2}-d (batched) or "
                             f"{self.dims + 1}-d input, got {x.shape}")  # fmt: skip
        return F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0,
                               self.eps)  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class InstanceNorm1d(_InstanceNorm):
    dims = 1


class InstanceNorm2d(_InstanceNorm):
    dims = 2


class InstanceNorm3d(_InstanceNorm):
    dims = 3


class GroupNorm(Module):
    """Normalizes each sample over groups of num_channels / num_groups channels (F.group_norm),
    then scales and shifts per channel (weight ones, bias zeros)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True):  # fmt: skip
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels {num_channels} must divide by "
                             f"num_groups {num_groups}")  # fmt: skip
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)  # fmt: skip
        self.weight = self.bias = None
        if affine:
            self.weight, self.bias = empty_parameter(num_channels), empty_parameter(num_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")  # fmt: skip


class _ListOf(Module):
    """A list of what its registry holds (`held`: "_modules" or "_parameters"), kept there as
    "0", "1", ... in order; `admit` checks or converts what is added."""

    held, admit = "_modules", staticmethod(lambda value: value)

    def __init__(self, values: Iterable[Any] | None = None):
        super().__init__()
        self.extend(values or ())

    def append(self, value: Any) -> Any:
        if value is None and self.held == "_modules":
            self.add_module(str(len(self)), None)  # PyTorch's ModuleList holds a None too
        else:
            setattr(self, str(len(self)), self.admit(value))
        return self

    def extend(self, values: Iterable[Any]) -> Any:
        for v in values:
            self.append(v)
        return self

    def _items(self) -> list[Any]:
        return list(getattr(self, self.held).values())

    def __getitem__(self, i: int | slice) -> Any:
        items = self._items()
        return type(self)(items[i]) if isinstance(i, slice) else items[i]

    def __setitem__(self, i: int, value: Any) -> None:
        setattr(self, str(range(len(self))[i]), self.admit(value))

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items())

    def __iadd__(self, values: Iterable[Any]) -> Any:
        return self.extend(values)


class _DictOf(Module):
    """What its registry holds (`held`) by name, in insertion order; `admit` as `_ListOf`'s."""

    held, admit = "_modules", staticmethod(lambda value: value)

    def __init__(self, values: Mapping[str, Any] | None = None):
        super().__init__()
        if values is not None:  # as PyTorch's: a subclass's own `update` (torchmetrics'
            self.update(values)  # MetricCollection) is not called for nothing

    def update(self, values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        for k, v in values.items() if isinstance(values, Mapping | _DictOf) else values:
            self[k] = v

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, self.admit(value))

    def __getitem__(self, key: str) -> Any:
        return getattr(self, self.held)[key]

    def __contains__(self, key: str) -> bool:
        return key in getattr(self, self.held)

    def __len__(self) -> int:
        return len(getattr(self, self.held))

    def __iter__(self) -> Iterator[str]:
        return iter(getattr(self, self.held))

    def keys(self) -> Iterable[str]:
        return getattr(self, self.held).keys()

    def values(self) -> Iterable[Any]:
        return getattr(self, self.held).values()

    def items(self) -> Iterable[tuple[str, Any]]:
        return getattr(self, self.held).items()

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        delattr(self, key)

    def pop(self, key: str) -> Any:
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        for key in list(self):
            del self[key]


def _as_parameter(value: Any) -> Parameter | Module:
    """PyTorch's parameter containers keep a Parameter as it is and make any other tensor one;
    a module (another ParameterList, nViT's) is held as a submodule."""
    if isinstance(value, Parameter | Module):
        return value
    if not isinstance(value, Tensor):
        raise TypeError(f"a parameter container holds tensors, not {type(value).__name__}")
    return Parameter(value.detach())


def _described(p: Any, kind: str) -> str:
    """A held value as PyTorch's parameter containers print it."""
    if not isinstance(p, Tensor):
        return f"Object of type: {type(p).__name__}"
    what = "Parameter" if isinstance(p, Parameter) else "Tensor"
    return f"{what} containing: [{kind} of size {'x'.join(str(n) for n in p.shape)}]"


class ModuleList(_ListOf):
    """A list of modules, registered as "0", "1", ...; after a delete or an insert they are
    numbered again by place, as PyTorch's (and so named in `state_dict`)."""

    def __init__(self, modules: Iterable[Module] | None = None):  # PyTorch's keyword
        super().__init__(modules)

    def __repr__(self) -> str:
        """PyTorch's: a run of equal modules as one line, `(0-5): 6 x Block(...)`."""
        runs: list[list[Any]] = []  # [first, last, repr]
        for i, m in enumerate(self._items()):
            text = repr(m)
            if runs and runs[-1][2] == text:
                runs[-1][1] = i
            else:
                runs.append([i, i, text])
        if not runs:
            return "ModuleList()"
        lines = [f"({a}): {text}" if a == b else f"({a}-{b}): {b - a + 1} x {text}"
                 for a, b, text in runs]  # fmt: skip
        return "ModuleList(\n  " + "\n  ".join(s.replace("\n", "\n  ") for s in lines) + "\n)"

    def __delitem__(self, i: int | slice) -> None:
        modules = self._items()
        del modules[i]
        renumber(self, self._modules, modules)

    def insert(self, index: int, module: Module) -> None:
        modules = self._items()
        modules.insert(index, module)
        renumber(self, self._modules, modules)

    def pop(self, i: int | slice) -> Module | ModuleList:
        module = self[i]
        del self[i]
        return module

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        """A new ModuleList of this one's modules, then `other`'s (the same modules)."""
        return ModuleList([*self, *other])


class ModuleDict(_DictOf):
    """Modules by name, in insertion order."""

    def __init__(self, modules: Mapping[str, Module] | None = None):
        super().__init__(modules)


class ParameterList(_ListOf):
    """A list of parameters, registered as "0", "1", ... (a tensor given is made a Parameter)."""

    held, admit = "_parameters", staticmethod(_as_parameter)

    def extra_repr(self) -> str:
        return "\n".join(f"  ({k}): {_described(p, str(p.dtype))}" for k, p in enumerate(self))

    def _items(self) -> list[Any]:
        """Parameters and modules, in the order of their indices."""
        both = {**self._parameters, **self._modules}
        return [both[k] for k in sorted(both, key=int)]


class ParameterDict(_DictOf):
    """Parameters by name, in insertion order (a tensor given is made a Parameter), with a
    dict's methods, as PyTorch's."""

    held, admit = "_parameters", staticmethod(_as_parameter)

    def extra_repr(self) -> str:
        return "\n".join(f"  ({k}): {_described(p, p.type())}" for k, p in self.items())

    def __init__(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None):
        super().__init__(parameters)

    def update(self, values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """From (key, value) pairs, an OrderedDict or a ParameterDict in their order, or from
        another mapping (a dict) in the order of its sorted keys, as PyTorch's."""
        if isinstance(values, OrderedDict | ParameterDict):
            pairs = values.items()
        elif isinstance(values, Mapping):
            pairs = sorted(values.items())
        else:
            pairs = values
        for k, v in pairs:
            self[k] = v

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self) -> tuple[str, Any]:
        """The last inserted (key, parameter), removed."""
        if not len(self):
            raise KeyError("popitem(): ParameterDict is empty")
        key = next(reversed(self))
        return key, self.pop(key)

    def copy(self) -> ParameterDict:
        """A new ParameterDict holding the same parameters."""
        return ParameterDict(OrderedDict(self.items()))

    def fromkeys(self, keys: Iterable[str], default: Any = None) -> ParameterDict:
        return ParameterDict((k, default) for k in keys)

    def __reversed__(self) -> Iterator[str]:
        return reversed(list(self))

    def __or__(self, other: Mapping[str, Any]) -> ParameterDict:
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: dict[str, Any]) -> dict[str, Any]:
        """`{...} | params`: a dict, as PyTorch's (the dict's copy, updated)."""
        merged = other.copy()
        merged.update(self)
        return merged

    def __ior__(self, other: Mapping[str, Any]) -> ParameterDict:
        self.update(other)
        return self


class NonDynamicallyQuantizableLinear(Linear):
    """PyTorch's class of MultiheadAttention's output projection: a Linear (it differs only in
    how PyTorch quantizes it), which checkpoints and isinstance tests name."""


class MultiheadAttention(Module):
    """PyTorch's layout: in_proj_weight (3 E, E) and in_proj_bias (q, k, v stacked), out_proj a
    Linear; with `kdim` or `vdim` other than E, q_proj_weight (E, E), k_proj_weight (E, kdim)
    and v_proj_weight (E, vdim) instead. `add_bias_kv` appends a learned key and value (bias_k,
    bias_v, (1, 1, E)) and `add_zero_attn` a zero one, after projection; masks attend them.
    A boolean attn_mask (L, S) or (N * heads, L, S) marks positions NOT attended (True),
    as in PyTorch's module (the opposite of scaled_dot_product_attention); a float one is added;
    so for key_padding_mask (N, S). `dropout` applies to the attention weights in training.
    Returns (output, weights averaged over heads or None); without masks and weights it is one
    fused op (F.scaled_dot_product_attention)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None,
                 dtype: Any = None):  # fmt: skip
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} must divide by "
                             f"num_heads {num_heads}")  # fmt: skip
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1], not {dropout}")
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim == self.vdim
        self.dropout, self.head_dim = float(dropout), embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = empty_parameter(3 * embed_dim, embed_dim)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight = empty_parameter(embed_dim, embed_dim)
            self.k_proj_weight = empty_parameter(embed_dim, self.kdim)
            self.v_proj_weight = empty_parameter(embed_dim, self.vdim)
            self.in_proj_weight = None
        self.in_proj_bias = empty_parameter(3 * embed_dim) if bias else None
        # PyTorch draws out_proj's weight first; tracegrad always drew in_proj_weight first,
        # and keeps that order, so that a seed gives the weights it gave
        self._init_projections()
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias)
        self.bias_k = empty_parameter(1, 1, embed_dim) if add_bias_kv else None
        self.bias_v = empty_parameter(1, 1, embed_dim) if add_bias_kv else None
        self.add_zero_attn = add_zero_attn
        self._init_biases()
        self.to(device, dtype)

    def _init_projections(self) -> None:
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight,
                  self.v_proj_weight):  # fmt: skip
            if w is not None:
                init.xavier_uniform_(w)

    def _init_biases(self) -> None:
        reset_affine(None, self.in_proj_bias)
        reset_affine(None, self.out_proj.bias)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def _reset_parameters(self) -> None:
        """PyTorch's (private, as there): the projections xavier uniform, the biases zeros,
        bias_k and bias_v xavier normal; out_proj's weight is its Linear's
        (`out_proj.reset_parameters()`)."""
        self._init_projections()
        self._init_biases()

    def _heads(self, x: Tensor, i: int) -> Tensor:
        """Project with the i-th third of in_proj (or q, k, v_proj_weight) and split heads:
        (N, heads, T, head_dim)."""
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight[i * e : (i + 1) * e]
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        y = x @ permute(w, (1, 0))
        if self.in_proj_bias is not None:
            y = y + self.in_proj_bias[i * e : (i + 1) * e]
        n, t = x.shape[:2]
        return permute(reshape(y, (n, t, self.num_heads, self.head_dim)), (0, 2, 1, 3))

    def _extra_keys(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, int]:
        """k and v (N, heads, S, head_dim) with bias_k and bias_v, then a zero key and value,
        appended along S; and how many were."""
        n, h, _, d = k.shape
        if self.bias_k is not None:
            k, v = (cat([t, broadcast_to(reshape(b, (1, h, 1, d)), (n, h, 1, d))], 2)
                    for t, b in ((k, self.bias_k), (v, self.bias_v)))  # fmt: skip
        if self.add_zero_attn:
            k, v = (cat([t, Tensor._of(np.zeros((n, h, 1, d), t.dtype))], 2) for t in (k, v))
        return k, v, (self.bias_k is not None) + bool(self.add_zero_attn)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True, is_causal: bool = False):  # fmt: skip
        query, key, value = (as_tensor(t) for t in (query, key, value))
        if query.ndim == 2:  # unbatched (L, E): a batch of one
            axis = 0 if self.batch_first else 1
            one = lambda t: reshape(t, (*t.shape[:axis], 1, *t.shape[axis:]))  # noqa: E731
            if key_padding_mask is not None:
                key_padding_mask = reshape(as_tensor(key_padding_mask), (1, -1))
            out, weights = self.forward(one(query), one(key), one(value), key_padding_mask,
                                        need_weights, attn_mask, average_attn_weights,
                                        is_causal)  # fmt: skip
            out = reshape(out, query.shape[:1] + out.shape[2:])
            return out, None if weights is None else weights[0]
        if not self.batch_first:
            query, key, value = (permute(t, (1, 0, 2)) for t in (query, key, value))
        n, length = query.shape[:2]
        q, k, v = self._heads(query, 0), self._heads(key, 1), self._heads(value, 2)
        k, v, extra = self._extra_keys(k, v)
        p = self.dropout if self.training else 0.0
        if not need_weights and key_padding_mask is None and (attn_mask is None or is_causal):
            # PyTorch's own path: is_causal is a hint that attn_mask is the causal mask
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=is_causal)
        else:
            scores = (q * (1.0 / math.sqrt(self.head_dim))) @ permute(k, (0, 1, 3, 2))
            scores = self._masked(scores, attn_mask, key_padding_mask, is_causal, extra)
            weights = F.dropout(F.softmax(scores, axis=-1), p)
            out = weights @ v
        out = permute(out, (0, 2, 1, 3))
        out = self.out_proj(reshape(out, (n, length, self.embed_dim)))
        if not self.batch_first:
            out = permute(out, (1, 0, 2))
        if not need_weights:
            return out, None
        return out, (weights.mean(axis=1) if average_attn_weights else weights)

    def _masked(self, scores: Tensor, attn_mask: Any, key_padding_mask: Any, is_causal: bool,
                extra: int):  # fmt: skip
        """scores with the masks applied; the `extra` keys appended last are attended."""
        n, h, length, s = scores.shape
        if attn_mask is None and is_causal:
            attn_mask = np.triu(np.ones((length, s - extra), np.bool_), 1)
        for mask, shape in ((attn_mask, None), (key_padding_mask, (n, 1, 1, s))):
            if mask is None:
                continue
            mask = mask if isinstance(mask, Tensor) else Tensor._of(np.asarray(mask))
            if extra:
                fill = Tensor._of(np.zeros((*mask.shape[:-1], extra), mask.dtype))
                mask = cat([mask, fill], -1)
            if shape is None and mask.ndim == 3:
                shape = (n, h, length, s)
            if shape is not None:
                mask = reshape(mask, shape)
            if mask.dtype == np.bool_:
                scores = where(mask, -np.inf, scores)
            else:
                scores = scores + mask.astype(scores.dtype)
        return scores


# --- bilinear, channel shuffle, local response norm, alpha dropout, fold, embedding bags --------


def multi_head_attention_forward(
    query: Any, key: Any, value: Any, embed_dim_to_check: int, num_heads: int,
    in_proj_weight: Any, in_proj_bias: Any, bias_k: Any, bias_v: Any, add_zero_attn: bool,
    dropout_p: float, out_proj_weight: Any, out_proj_bias: Any, training: bool = True,
    key_padding_mask: Any = None, need_weights: bool = True, attn_mask: Any = None,
    use_separate_proj_weight: bool = False, q_proj_weight: Any = None, k_proj_weight: Any = None,
    v_proj_weight: Any = None, static_k: Any = None, static_v: Any = None,
    average_attn_weights: bool = True, is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """PyTorch's `F.multi_head_attention_forward` (CLIP's attention pooling calls it): inputs
    (L, N, E) or unbatched (L, E); `MultiheadAttention`'s forward on the weights given, which
    stay the caller's."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k and static_v are not "
                                  "supported")  # fmt: skip
    query = as_tensor(query)
    if query.shape[-1] != embed_dim_to_check:
        raise ShapeError(f"multi_head_attention_forward: query of shape {query.shape}, "
                         f"expected embed_dim {embed_dim_to_check}")  # fmt: skip
    attention = object.__new__(MultiheadAttention)
    Module.__init__(attention)
    weights = {"in_proj_weight": None if use_separate_proj_weight else in_proj_weight,
               "q_proj_weight": q_proj_weight if use_separate_proj_weight else None,
               "k_proj_weight": k_proj_weight if use_separate_proj_weight else None,
               "v_proj_weight": v_proj_weight if use_separate_proj_weight else None}  # fmt: skip
    settings = {"embed_dim": embed_dim_to_check, "num_heads": num_heads, "batch_first": False,
                "_qkv_same_embed_dim": not use_separate_proj_weight, "dropout": float(dropout_p),
                "head_dim": embed_dim_to_check // num_heads, "in_proj_bias": in_proj_bias,
                "bias_k": bias_k, "bias_v": bias_v, "add_zero_attn": bool(add_zero_attn),
                "training": bool(training),
                "out_proj": lambda x: F.linear(x, out_proj_weight, out_proj_bias)}  # fmt: skip
    for name, setting in {**weights, **settings}.items():
        object.__setattr__(attention, name, setting)  # the caller's tensors, not registered
    return attention.forward(query, key, value, key_padding_mask, need_weights, attn_mask,
                             average_attn_weights, is_causal)  # fmt: skip


class Bilinear(Module):
    """y = x1 . W x2 + b, weight (out, in1, in2); weight and bias drawn from
    U(-1/sqrt(in1), 1/sqrt(in1)), as PyTorch's."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True):  # fmt: skip
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = empty_parameter(out_features, in1_features, in2_features)
        self.bias = empty_parameter(out_features) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_uniform(inverse_sqrt(self.weight.shape[1]), self.weight, self.bias)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")  # fmt: skip


class ChannelShuffle(FunctionLayer):
    repr_format = "groups={groups}"
    function = F.channel_shuffle

    def __init__(self, groups: int):
        super().__init__(groups=groups)


class LocalResponseNorm(FunctionLayer):
    repr_format = "{size}, alpha={alpha}, beta={beta}, k={k}"
    function = F.local_response_norm

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__(size=size, alpha=alpha, beta=beta, k=k)


class AlphaDropout(Dropout):
    """`functional.alpha_dropout` in training (for SELU networks); the mask as Dropout's."""

    def forward(self, x: Tensor) -> Tensor:
        return F.alpha_dropout(x, self.p, self.training, self.inplace, state=self.random_state)


class FeatureAlphaDropout(Dropout):
    """`functional.feature_alpha_dropout` (whole channels) in training."""

    def forward(self, x: Tensor) -> Tensor:
        return F.feature_alpha_dropout(x, self.p, self.training, self.inplace,
                                       state=self.random_state)  # fmt: skip


class Unfold(FunctionLayer):
    """im2col (`functional.unfold`)."""

    repr_format = (
        "kernel_size={kernel_size}, dilation={dilation}, padding={padding}, stride={stride}"
    )

    function = F.unfold

    def __init__(self, kernel_size: int | Sequence[int], dilation: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1):  # fmt: skip
        super().__init__(kernel_size=kernel_size, dilation=dilation, padding=padding,
                         stride=stride)  # fmt: skip


class Fold(FunctionLayer):
    """col2im (`functional.fold`)."""

    repr_format = (
        "output_size={output_size}, kernel_size={kernel_size}, dilation={dilation}, "
        "padding={padding}, stride={stride}"
    )

    function = F.fold

    def __init__(self, output_size: int | Sequence[int], kernel_size: int | Sequence[int],
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 stride: int | Sequence[int] = 1):  # fmt: skip
        super().__init__(output_size=output_size, kernel_size=kernel_size, dilation=dilation,
                         padding=padding, stride=stride)  # fmt: skip


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings (`functional.embedding_bag`) without the
    per-index rows in between; a table drawn from N(0, 1), `padding_idx`'s row zero."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: Tensor | None = None,
                 include_last_offset: bool = False, padding_idx: int | None = None,
                 device: Any = None, dtype: Any = None):  # fmt: skip
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset = include_last_offset
        if padding_idx is not None:
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:
            self.weight = Parameter(as_tensor(_weight).detach())
        else:
            self.weight = empty_parameter(num_embeddings, embedding_dim)
            self.reset_parameters()
        self.to(device, dtype)

    reset_parameters = Embedding.reset_parameters

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False,
                        padding_idx: int | None = None) -> EmbeddingBag:  # fmt: skip
        """A bag over the table `embeddings` (shared, as PyTorch's), trained unless `freeze`."""
        table = as_tensor(embeddings)
        if table.ndim != 2:
            raise ShapeError(f"EmbeddingBag.from_pretrained: embeddings {table.shape} must be 2-d")
        bag = cls(*table.shape, max_norm, norm_type, scale_grad_by_freq, mode, sparse, table,
                  include_last_offset, padding_idx)  # fmt: skip
        bag.weight.requires_grad = not freeze
        return bag

    def forward(self, input: Tensor, offsets: Tensor | None = None,
                per_sample_weights: Tensor | None = None) -> Tensor:  # fmt: skip
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse,
                               per_sample_weights, self.include_last_offset,
                               self.padding_idx)  # fmt: skip

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"

"""PyTorch's lazy layers (`LazyLinear`, `LazyConv1d`/`2d`/`3d`, `LazyConvTranspose1d`/`2d`/`3d`,
`LazyBatchNorm1d`/`2d`/`3d`, `LazyInstanceNorm1d`/`2d`/`3d`): the input size is read from the
first input. Until then the parameters are `UninitializedParameter`s (and the running statistics
`UninitializedBuffer`s); the first (eager) forward gives them their shapes, in place (the same
objects), the layer's `reset_parameters` draws them as the plain layer's does, and the layer
becomes the plain one. An optimizer keeps state shaped like its parameters from the start, so it
is built after that first forward (PyTorch's "dry run")."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.core.errors import TraceError
from tracegrad.frontend.tensor import Listeners, Tensor, get_default_dtype
from tracegrad.nn.layers import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
)
from tracegrad.nn.modules import Linear, Module, Parameter

__all__ = [
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "LazyLinear",
    "UninitializedBuffer",
    "UninitializedParameter",
]


def _empty(dtype: Any) -> np.ndarray:
    return np.empty(0, get_default_dtype() if dtype is None else dtype)


class UninitializedParameter(Parameter):
    """A parameter without a shape yet; `materialize(shape)` gives it one, in place."""

    __slots__ = ()

    def __init__(self, requires_grad: bool = True, device: Any = None, dtype: Any = None):
        super().__init__(_empty(dtype), requires_grad)

    def materialize(self, shape: tuple[int, ...], device: Any = None, dtype: Any = None) -> None:
        """Take `shape` (zeros, in its dtype or `dtype`) and become a plain Parameter; the
        layer's `reset_parameters` then draws its values."""
        self._value = np.zeros(shape, self._value.dtype if dtype is None else dtype)
        self.__class__ = Parameter

    def __repr__(self) -> str:
        return "<UninitializedParameter>"


class UninitializedBuffer(Tensor):
    """A buffer without a shape yet (a lazy batch norm's running statistics)."""

    __slots__ = ()

    def __init__(self, requires_grad: bool = False, device: Any = None, dtype: Any = None):
        self._init(_empty(dtype), None, requires_grad)

    def materialize(self, shape: tuple[int, ...], device: Any = None, dtype: Any = None) -> None:
        self._value = np.zeros(shape, self._value.dtype if dtype is None else dtype)
        self.__class__ = Tensor

    def __repr__(self) -> str:
        return "<UninitializedBuffer>"


class _Lazy(Module):
    """Materializes its parameters from the first input's size along `dim` (`_materialize`),
    draws them (`reset_parameters`) and becomes the plain layer `becomes`."""

    becomes: type = Module
    dim = 1

    def has_uninitialized_params(self) -> bool:
        lazy = (UninitializedParameter, UninitializedBuffer)
        return any(isinstance(t, lazy) for t in (*self._parameters.values(),
                                                 *self._buffers.values()))  # fmt: skip

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if self.has_uninitialized_params():
            if Listeners.tracers:
                raise TraceError(f"{type(self).__name__}: its parameters get their shapes at the "
                                 "first forward, which must run eagerly (a dry run before the "
                                 "traced step and the optimizer)")  # fmt: skip
            self._materialize(x.shape[self.dim])
            self.reset_parameters()
            self.__class__ = self.becomes
        return Module.__call__(self, x, *args, **kwargs)

    def reset_parameters(self) -> None:
        """The plain layer's, once the parameters have their shapes (nothing before)."""
        if not self.has_uninitialized_params():
            super().reset_parameters()

    def _materialize(self, size: int) -> None:
        raise NotImplementedError


class LazyLinear(_Lazy, Linear):
    becomes = Linear
    dim = -1

    def __init__(self, out_features: int, bias: bool = True) -> None:
        Module.__init__(self)
        self.in_features, self.out_features = 0, out_features
        self.weight = UninitializedParameter()
        self.bias = UninitializedParameter() if bias else None

    def _materialize(self, size: int) -> None:
        self.in_features = size
        self.weight.materialize((self.out_features, size))
        if self.bias is not None:
            self.bias.materialize((self.out_features,))


class _LazyConv(_Lazy):
    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros") -> None:  # fmt: skip
        # built as the plain layer with one input channel a group (drawing its weights, as
        # tracegrad always has: a seed gives the weights it gave), then made lazy
        self.becomes.__init__(self, groups, out_channels, kernel_size, stride, padding, dilation,
                              groups, bias, padding_mode)  # fmt: skip
        self._make_lazy(bias)

    def _make_lazy(self, bias: bool) -> None:
        self.in_channels = 0
        self.weight = UninitializedParameter()
        self.bias = UninitializedParameter() if bias else None

    def _materialize(self, size: int) -> None:
        if size % self.groups:
            raise ValueError(f"{type(self).__name__}: {size} input channels for groups "
                             f"{self.groups}")  # fmt: skip
        self.in_channels = size
        self.weight.materialize(self._weight_shape())
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))


class LazyConv1d(_LazyConv, Conv1d):
    becomes = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    becomes = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    becomes = Conv3d


class _LazyConvTranspose(_LazyConv):
    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros") -> None:  # fmt: skip
        self.becomes.__init__(self, groups, out_channels, kernel_size, stride, padding,
                              output_padding, groups, bias, dilation, padding_mode)  # fmt: skip
        self._make_lazy(bias)


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    becomes = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    becomes = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    becomes = ConvTranspose3d


class _LazyNorm(_Lazy):
    """PyTorch's `_LazyNormBase`: affine and running statistics by default (also for the
    instance norms, whose plain layers have neither by default)."""

    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True) -> None:  # fmt: skip
        self.becomes.__init__(self, 0, eps, momentum, False, False)
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight, self.bias = UninitializedParameter(), UninitializedParameter()
        if track_running_stats:
            self.register_buffer("running_mean", UninitializedBuffer())
            self.register_buffer("running_var", UninitializedBuffer())
            self.register_buffer("num_batches_tracked", Tensor._of(np.zeros((), np.int64)))

    def _materialize(self, size: int) -> None:
        self.num_features = size
        for t in (self.weight, self.bias, self.running_mean, self.running_var):
            if t is not None:
                t.materialize((size,))


class LazyBatchNorm1d(_LazyNorm, BatchNorm1d):
    becomes = BatchNorm1d


class LazyBatchNorm2d(_LazyNorm, BatchNorm2d):
    becomes = BatchNorm2d


class LazyBatchNorm3d(_LazyNorm, BatchNorm3d):
    becomes = BatchNorm3d


class LazyInstanceNorm1d(_LazyNorm, InstanceNorm1d):
    becomes = InstanceNorm1d


class LazyInstanceNorm2d(_LazyNorm, InstanceNorm2d):
    becomes = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNorm, InstanceNorm3d):
    becomes = InstanceNorm3d

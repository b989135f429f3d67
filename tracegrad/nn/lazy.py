"""PyTorch's lazy layers (`LazyLinear`, `LazyConv1d`/`2d`/`3d`): the input size is read from the
first input. Until then the parameters are `UninitializedParameter`s; the first (eager) forward
gives them their shapes and PyTorch's initialization, in place (the same parameter objects),
and the layer becomes the plain one. An optimizer keeps state shaped like its parameters from
the start, so it is built after that first forward (PyTorch's "dry run")."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core.errors import TraceError
from tracegrad.frontend.tensor import Listeners, get_default_dtype
from tracegrad.nn.layers import Conv1d, Conv2d, Conv3d
from tracegrad.nn.modules import Linear, Module, Parameter, init_generator

__all__ = ["LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyLinear", "UninitializedParameter"]


class UninitializedParameter(Parameter):
    """A parameter without a shape yet; `materialize(shape)` gives it one, in place."""

    __slots__ = ()

    def __init__(self, requires_grad: bool = True, device: Any = None, dtype: Any = None):
        super().__init__(np.empty(0, get_default_dtype() if dtype is None else dtype),
                         requires_grad)  # fmt: skip

    def materialize(self, shape: tuple[int, ...], bound: float) -> None:
        """Take `shape`, drawn from U(-bound, bound) (PyTorch's default initialization)."""
        values = init_generator().uniform(-bound, bound, shape).astype(self._value.dtype)
        self._value = values
        self.__class__ = Parameter

    def __repr__(self) -> str:
        return "<UninitializedParameter>"


class _Lazy(Module):
    """Builds the plain layer `becomes` from the first input's size along `dim`."""

    becomes: type = Module
    dim = 1

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self.weight, UninitializedParameter):
            if Listeners.tracers:
                raise TraceError(f"{type(self).__name__}: its parameters get their shapes at the "
                                 "first forward, which must run eagerly (a dry run before the "
                                 "traced step and the optimizer)")  # fmt: skip
            self._materialize(x.shape[self.dim])
            self.__class__ = self.becomes
        return Module.__call__(self, x, *args, **kwargs)

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
        bound = 1.0 / math.sqrt(size) if size else 0.0
        self.weight.materialize((self.out_features, size), bound)
        if self.bias is not None:
            self.bias.materialize((self.out_features,), bound)


class _LazyConv(_Lazy):
    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros") -> None:  # fmt: skip
        # built as the plain layer with one input channel a group, then made lazy
        self.becomes.__init__(self, groups, out_channels, kernel_size, stride, padding, dilation,
                              groups, bias, padding_mode)  # fmt: skip
        self.in_channels = 0
        self.weight = UninitializedParameter()
        self.bias = UninitializedParameter() if bias else None

    def _materialize(self, size: int) -> None:
        if size % self.groups:
            raise ValueError(f"{type(self).__name__}: {size} input channels for groups "
                             f"{self.groups}")  # fmt: skip
        self.in_channels = size
        fan_in = size // self.groups * math.prod(self.kernel_size)
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight.materialize((self.out_channels, size // self.groups, *self.kernel_size),
                                bound)  # fmt: skip
        if self.bias is not None:
            self.bias.materialize((self.out_channels,), bound)


class LazyConv1d(_LazyConv, Conv1d):
    becomes = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    becomes = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    becomes = Conv3d

"""Activation layers with PyTorch's arguments (ReLU, GELU, Tanh and Sigmoid are in `modules`).

`inplace=True` is accepted wherever PyTorch has it: a result autodiff records is computed
functionally (the same values), any other is written into the input (`functional._in_place`)."""

from __future__ import annotations

import numpy as np

from tracegrad.core.errors import ShapeError
from tracegrad.frontend.reductions import log_softmax, softmax
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import functional as F
from tracegrad.nn.modules import FunctionLayer, Module, empty_parameter, inplace_note

__all__ = ["CELU", "ELU", "GLU", "SELU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh",
           "LeakyReLU", "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "ReLU6", "SiLU", "Softmax",
           "Softmax2d", "Softmin", "Softplus", "Softshrink", "Softsign", "Tanhshrink",
           "Threshold"]  # fmt: skip


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}{inplace_note(self)}"


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{inplace_note(self)}"


class SELU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.selu(x, self.inplace)

    def extra_repr(self) -> str:
        return inplace_note(self, alone=True)


class SiLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x, self.inplace)

    def extra_repr(self) -> str:
        return inplace_note(self, alone=True)


class Mish(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x, self.inplace)

    def extra_repr(self) -> str:
        return inplace_note(self, alone=True)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val {max_val} must exceed min_val {min_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}{inplace_note(self)}"


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return softmax(x, axis=F.implicit_dim(self.dim, x.ndim, "softmax"))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return log_softmax(x, axis=F.implicit_dim(self.dim, x.ndim, "log_softmax"))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class ReLU6(FunctionLayer):
    repr_format = "{inplace_alone}"
    function = F.relu6

    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


class Hardsigmoid(FunctionLayer):
    repr_format = ""
    function = F.hardsigmoid

    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


class Hardswish(FunctionLayer):
    repr_format = ""
    function = F.hardswish

    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


class LogSigmoid(FunctionLayer):
    repr_format = ""
    function = F.logsigmoid


class Softsign(FunctionLayer):
    repr_format = ""
    function = F.softsign


class Tanhshrink(FunctionLayer):
    repr_format = ""
    function = F.tanhshrink


class Softshrink(FunctionLayer):
    repr_format = "{lambd}"
    function = F.softshrink

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)


class Hardshrink(FunctionLayer):
    repr_format = "{lambd}"
    function = F.hardshrink

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)


class CELU(FunctionLayer):
    repr_format = "alpha={alpha}{inplace}"
    function = F.celu

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(alpha=alpha, inplace=inplace)


class Threshold(FunctionLayer):
    repr_format = "threshold={threshold}, value={value}{inplace}"
    function = F.threshold

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__(threshold=threshold, value=value, inplace=inplace)


class GLU(FunctionLayer):
    repr_format = "dim={dim}"
    function = F.glu

    def __init__(self, dim: int = -1):
        super().__init__(dim=dim)


class Softmin(FunctionLayer):
    repr_format = "dim={dim}"
    function = F.softmin

    def __init__(self, dim: int | None = None):
        super().__init__(dim=dim)


class Softmax2d(Module):
    """Softmax over the channels of each position: dim -3 of (N, C, H, W) or (C, H, W)."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            raise ShapeError(f"Softmax2d: input {x.shape} must be 3-d or 4-d")
        return softmax(x, axis=-3)


class PReLU(Module):
    """`prelu` with a learned slope: one for all channels, or one per channel (dim 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = empty_parameter(num_parameters)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every slope `init` (PyTorch's `nn.init.constant_`)."""
        self.weight._assign(Tensor._of(np.full(self.weight.shape, self.init)))

    def forward(self, x: Tensor) -> Tensor:
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"

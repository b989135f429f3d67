"""`torch.ao.nn.quantized` (also `torch.nn.quantized`): `FloatFunctional`, the module a model
prepared for quantization calls its additions and concatenations through, so that conversion
can give them observers; in float, as here, plain ops. The quantized layers are not provided."""

from typing import Any

import tracegrad as _tg
from tracegrad.nn import Identity, Module
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["FloatFunctional"]


class FloatFunctional(Module):
    """`add`, `cat`, `mul`, `add_relu`, `add_scalar`, `mul_scalar`, `matmul` as the float ops."""

    def __init__(self) -> None:
        super().__init__()
        self.activation_post_process = Identity()

    def forward(self, x: Any) -> Any:
        raise RuntimeError("FloatFunctional is not meant to be called: use its methods (add, "
                           "cat, mul, ...)")  # fmt: skip

    def add(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(_tg.add(x, y))

    def add_scalar(self, x: Any, y: float) -> Any:
        return _tg.add(x, y)  # PyTorch observes no scalar addition either

    def mul(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(_tg.mul(x, y))

    def mul_scalar(self, x: Any, y: float) -> Any:
        return _tg.mul(x, y)

    def cat(self, x: list, dim: int = 0) -> Any:
        return self.activation_post_process(_tg.cat(x, dim=dim))

    def add_relu(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(_tg.relu(_tg.add(x, y)))

    def matmul(self, x: Any, y: Any) -> Any:
        return self.activation_post_process(_tg.matmul(x, y))


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.ao.quantization`: the stubs a model holds where quantization will go. Until a model is
converted (not provided) they are identities, as PyTorch's are."""

from typing import Any

from tracegrad.nn import Identity, Module
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["DeQuantStub", "QuantStub", "QuantWrapper"]


class QuantStub(Identity):
    """Where a float tensor will be quantized: an identity until conversion."""

    def __init__(self, qconfig: Any = None) -> None:
        super().__init__()
        self.qconfig = qconfig


class DeQuantStub(QuantStub):
    """Where a quantized tensor will turn float again: an identity until conversion."""


class QuantWrapper(Module):
    """`module` between a QuantStub and a DeQuantStub."""

    def __init__(self, module: Module) -> None:
        super().__init__()
        self.quant, self.dequant, self.module = QuantStub(), DeQuantStub(), module

    def forward(self, x: Any) -> Any:
        return self.dequant(self.module(self.quant(x)))


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.nn.quantized`: PyTorch's older name for `torch.ao.nn.quantized`."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.ao.nn.quantized import FloatFunctional

__all__ = ["FloatFunctional"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

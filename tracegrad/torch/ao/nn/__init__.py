"""`torch.ao.nn`: quantized modules' float forms (`quantized.FloatFunctional`)."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.ao.nn import quantized


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

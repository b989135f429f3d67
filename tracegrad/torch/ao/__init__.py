"""`torch.ao` (architecture optimization): quantization's float-side modules, as models prepared
for quantization-aware training use them before conversion (`QuantStub`, `FloatFunctional`).
Converting to integer kernels is not provided."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.ao import nn, quantization


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

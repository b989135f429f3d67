"""`torch.nn.parameter`: `Parameter` and `UninitializedParameter` (a lazy layer's)."""

from typing import Any

from tracegrad.nn import Parameter, UninitializedBuffer, UninitializedParameter
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Parameter", "UninitializedBuffer", "UninitializedParameter"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.nn.utils.parametrizations`: orthogonal, weight_norm and spectral_norm on
parametrizations (`tracegrad.nn.parametrize`)."""

from typing import Any

from tracegrad.nn.parametrize import orthogonal, spectral_norm, weight_norm
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.fft`: tracegrad's (`tracegrad.fft`, PyTorch's meanings)."""

from typing import Any

from tracegrad.frontend.fft import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

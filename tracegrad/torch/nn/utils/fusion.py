"""`torch.nn.utils.fusion`: a batch norm folded into the layer before it (`tracegrad.nn.fusion`)."""

from typing import Any

from tracegrad.nn.fusion import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

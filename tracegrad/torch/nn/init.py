"""`torch.nn.init`: tracegrad's (`tracegrad.nn.init`)."""

from typing import Any

from tracegrad.nn.init import *  # noqa: F403
from tracegrad.nn.init import (  # noqa: F401 (PyTorch's private names, which libraries call)
    _calculate_correct_fan,
    _calculate_fan_in_and_fan_out,
)
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

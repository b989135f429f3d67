"""`torch.nn.utils`: gradient clipping (`tracegrad.nn.utils`)."""

from typing import Any

from tracegrad.nn.utils import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

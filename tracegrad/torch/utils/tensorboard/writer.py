"""`torch.utils.tensorboard.writer`: `SummaryWriter`."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils.tensorboard import SummaryWriter

__all__ = ["SummaryWriter"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

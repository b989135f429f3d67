"""`torch.utils.tensorboard`: `SummaryWriter` (`tracegrad.utils.tensorboard`), which writes
TensorBoard's event files without TensorBoard installed."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.utils.tensorboard import writer
from tracegrad.utils.tensorboard import SummaryWriter

__all__ = ["SummaryWriter", "writer"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

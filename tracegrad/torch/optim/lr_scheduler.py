"""`torch.optim.lr_scheduler`: tracegrad's schedules (`tracegrad.optim.lr_scheduler`)."""

from typing import Any

from tracegrad.optim.lr_scheduler import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

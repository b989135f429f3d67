"""`torch.optim.swa_utils`: tracegrad's weight averaging (`tracegrad.optim.swa_utils`)."""

from typing import Any

from tracegrad.optim.swa_utils import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.optim`: tracegrad's optimizers (`tracegrad.optim`) and `lr_scheduler`."""

from typing import Any

from tracegrad.optim import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.optim import lr_scheduler


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils.data.dataset`: the names PyTorch defines there, from `tracegrad.utils.data`."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils.data import *  # noqa: F403


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

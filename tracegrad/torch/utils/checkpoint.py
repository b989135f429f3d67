"""`torch.utils.checkpoint`: `tracegrad.utils.checkpoint` (the function as written; a traced
step's memory planner decides what to keep)."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils.checkpoint import *  # noqa: F403


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

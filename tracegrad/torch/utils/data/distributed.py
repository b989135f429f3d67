"""`torch.utils.data.distributed`: `DistributedSampler`."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils.data import DistributedSampler

__all__ = ["DistributedSampler"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

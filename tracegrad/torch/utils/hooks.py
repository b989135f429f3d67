"""`torch.utils.hooks`: `RemovableHandle`, what registering a module's hook returns."""

from typing import Any

from tracegrad.nn.modules import RemovableHandle
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["RemovableHandle"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.storage`: the bytes under tensors (`UntypedStorage`, `tensor.untyped_storage()`);
PyTorch's typed storages (`TypedStorage`, `torch.FloatStorage`) are not provided."""

from typing import Any

from tracegrad.frontend.storage import UntypedStorage  # noqa: F401
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch._custom_ops` (PyTorch's older custom-op API), imported by packages that register fake
implementations: `get_ctx` exists for them and raises if called (no fake tensors here)."""

from typing import Any


def get_ctx() -> Any:
    raise NotImplementedError("torch._custom_ops.get_ctx: tracegrad has no fake-tensor mode")

"""`torch.amp`: mixed precision. tracegrad runs each op in its operands' dtype, so `autocast`
changes nothing (it warns once when asked for a lower precision) and `GradScaler` is disabled
(as PyTorch's is without CUDA): `scale(loss)` is the loss, `step(opt)` is `opt.step()`."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.amp import autocast_mode, grad_scaler
from tracegrad.torch.amp.autocast_mode import (
    autocast,
    custom_bwd,
    custom_fwd,
    is_autocast_available,
)
from tracegrad.torch.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd", "is_autocast_available"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

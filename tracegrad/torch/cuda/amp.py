"""`torch.cuda.amp`: PyTorch's older names of `torch.amp`'s autocast and GradScaler."""

from __future__ import annotations

from typing import Any

from tracegrad.torch import amp as _amp
from tracegrad.torch._support import not_provided as _not_provided

GradScaler = _amp.GradScaler


def autocast(enabled: bool = True, dtype: Any = None, cache_enabled: Any = None) -> Any:
    return _amp.autocast("cuda", dtype, enabled, cache_enabled)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.nn.attention`: `sdpa_kernel(backends)`, the context in which PyTorch chooses among its
attention kernels (flash, memory-efficient, math, cuDNN). tracegrad has one attention op (with
a Numba kernel each way) whatever is asked, so the context changes nothing; `SDPBackend` names
the choices. `bias` and `flex_attention` are its submodules, as in PyTorch."""

from __future__ import annotations

import contextlib
import enum
import importlib
from collections.abc import Iterator
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


@contextlib.contextmanager
def sdpa_kernel(backends: Any, set_priority: bool = False) -> Iterator[None]:
    """Accepted: the attention inside runs tracegrad's one attention op."""
    yield


def __getattr__(name: str) -> Any:
    if name in ("bias", "flex_attention"):  # submodules, for code that names them unimported
        return importlib.import_module(f"{__name__}.{name}")
    raise _not_provided(__name__, name)

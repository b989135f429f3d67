"""`torch.amp.autocast_mode`: `autocast`, which changes nothing here (ops run in their operands'
dtypes; it warns once when asked for a lower precision), and the custom-function decorators."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["autocast", "custom_bwd", "custom_fwd", "is_autocast_available"]


class autocast(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    """`with autocast(device_type, dtype):` runs its ops as they are, in their own dtypes."""

    def __init__(self, device_type: str = "cpu", dtype: Any = None, enabled: bool = True,
                 cache_enabled: Any = None) -> None:  # fmt: skip
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled
        if enabled:
            warn_once(
                f"autocast(device_type={device_type!r}) does nothing in tracegrad: ops run in "
                "their operands' dtypes (cast the model with .half() for float16)"
            )

    def __enter__(self) -> autocast:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast lowers precision on `device_type`: nowhere here (`autocast`)."""
    return False


@functools.cache
def warn_once(message: str) -> None:
    warnings.warn(message, stacklevel=4)


def custom_fwd(fwd: Callable | None = None, **kwargs: Any) -> Any:
    return fwd if fwd is not None else (lambda f: f)


custom_bwd = custom_fwd

"""`torch.amp`: mixed precision. tracegrad runs each op in its operands' dtype, so `autocast`
changes nothing (it warns once when asked for a lower precision) and `GradScaler` is disabled
(as PyTorch's is without CUDA): `scale(loss)` is the loss, `step(opt)` is `opt.step()`."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["GradScaler", "autocast", "is_autocast_available"]


class autocast(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    """`with autocast(device_type, dtype):` runs its ops as they are, in their own dtypes."""

    def __init__(self, device_type: str = "cpu", dtype: Any = None, enabled: bool = True,
                 cache_enabled: Any = None) -> None:  # fmt: skip
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled
        if enabled:
            _warn_once(
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
def _warn_once(message: str) -> None:
    warnings.warn(message, stacklevel=4)


class GradScaler:
    """PyTorch's loss scaler, disabled: there is no float16 CUDA training to protect from
    underflow (PyTorch disables its own, with a warning, when CUDA is not available)."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:  # fmt: skip
        if enabled:
            _warn_once("GradScaler is enabled, but tracegrad has no CUDA: disabling it")

    def scale(self, outputs: Any) -> Any:
        return outputs

    def unscale_(self, optimizer: Any) -> None:
        pass

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        pass

    def get_scale(self) -> float:
        return 1.0

    def is_enabled(self) -> bool:
        return False

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


def custom_fwd(fwd: Callable | None = None, **kwargs: Any) -> Any:
    return fwd if fwd is not None else (lambda f: f)


custom_bwd = custom_fwd


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

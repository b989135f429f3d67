"""`torch.accelerator`: there is none (tracegrad runs on the CPU)."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided


def is_available() -> bool:
    return False


def current_accelerator(check_available: bool = False) -> None:
    return None


def device_count() -> int:
    return 0


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.backends.mps`: Apple's Metal backend, not available."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

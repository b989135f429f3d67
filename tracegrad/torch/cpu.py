"""`torch.cpu`: the CPU as a device module, as `torch.cuda` is for GPUs (`torch.get_device_module`
gives it; code calls the same functions on either). Its work is synchronous, so `synchronize`
has nothing to wait for, and its streams run in order."""

from __future__ import annotations

import contextlib
from typing import Any

from tracegrad.torch import amp  # noqa: F401 (torch.cpu.amp.autocast)
from tracegrad.torch._support import not_provided as _not_provided


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def set_device(device: Any) -> None:
    """Only the CPU: there is no other to set."""


def synchronize(device: Any = None) -> None:
    """Nothing runs in the background to wait for."""


class Stream:
    """The CPU's one stream: work runs in order."""

    def __init__(self, priority: int = -1) -> None:
        self.priority = priority

    def wait_stream(self, stream: Stream) -> None:
        return None

    def synchronize(self) -> None:
        return None


_STREAM = Stream()


def current_stream(device: Any = None) -> Stream:
    return _STREAM


@contextlib.contextmanager
def stream(stream: Stream | None) -> Any:
    yield


StreamContext = stream


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

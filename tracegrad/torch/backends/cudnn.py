"""`torch.backends.cudnn`: not available; its flags are accepted and change nothing."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return False


def version() -> None:
    return None


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

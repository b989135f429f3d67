"""`torch.backends.mkldnn` (oneDNN): not available (tracegrad's kernels are its own); its
flags are accepted and change nothing."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

enabled = True
deterministic = False


def is_available() -> bool:
    return False


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

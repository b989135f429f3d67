"""`torch.nn.modules`: tracegrad's layers (`tracegrad.nn`), and PyTorch's submodule `module`
(the global forward hooks)."""

from typing import Any

from tracegrad.nn import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.nn.modules import module


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.nn.modules.module`: `Module` and the forward hooks of every module."""

from typing import Any

from tracegrad.nn.modules import (
    IncompatibleKeys as _IncompatibleKeys,
)
from tracegrad.nn.modules import (
    Module,
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Module", "register_module_forward_hook", "register_module_forward_pre_hook"]

_EXTRA_STATE_KEY_SUFFIX = "_extra_state"  # a module's `get_extra_state()` in its state dict


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

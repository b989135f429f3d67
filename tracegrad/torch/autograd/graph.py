"""`torch.autograd.graph`: where autograd keeps what backward needs. `saved_tensors_hooks`
packs each value an op saves for backward and unpacks it when backward reads it (compressing
or offloading activations). tracegrad's tensors live on the CPU, so `save_on_cpu` (offloading
saved activations from a GPU) has nothing to move."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from tracegrad.frontend.autodiff import SAVED_TENSORS_HOOKS
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["disable_saved_tensors_hooks", "save_on_cpu", "saved_tensors_hooks"]

_disabled: list[str] = []  # the messages of the disable_saved_tensors_hooks blocks entered


class saved_tensors_hooks:  # noqa: N801 (PyTorch's name)
    """`with saved_tensors_hooks(pack, unpack):` each tensor an op saves for backward inside is
    kept as `pack(tensor)`, and backward reads `unpack(packed)` (a tensor of its values), custom
    Functions' `save_for_backward` too."""

    def __init__(self, pack_hook: Callable[[Any], Any], unpack_hook: Callable[[Any], Any]) -> None:
        self.hooks = (pack_hook, unpack_hook)

    def __enter__(self) -> saved_tensors_hooks:
        if _disabled:
            raise RuntimeError(_disabled[-1])
        SAVED_TENSORS_HOOKS.append(self.hooks)
        return self

    def __exit__(self, *exc: Any) -> None:
        SAVED_TENSORS_HOOKS.remove(self.hooks)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message: str) -> Any:
    """Inside, entering `saved_tensors_hooks` raises `error_message`."""
    _disabled.append(error_message)
    try:
        yield
    finally:
        _disabled.pop()


class save_on_cpu(contextlib.nullcontext):  # noqa: N801 (PyTorch's name)
    """Saved tensors stay where they are: on the CPU already."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        super().__init__()


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.autograd.graph`: where autograd keeps what backward needs. tracegrad's tensors live on
the CPU, so `save_on_cpu` (offloading saved activations from a GPU) has nothing to move."""

from __future__ import annotations

import contextlib
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["save_on_cpu"]


class save_on_cpu(contextlib.nullcontext):  # noqa: N801 (PyTorch's name)
    """Saved tensors stay where they are: on the CPU already."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        super().__init__()


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

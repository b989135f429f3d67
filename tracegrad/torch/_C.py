"""`torch._C`, PyTorch's compiled core: the few names Python packages use at import or in
ordinary calls (torchvision's), meaning what they can here. Dispatch keys exist to be combined
and excluded (nothing is dispatched by key); the tracing state is None (no TorchScript tracer);
API-usage logging does nothing. Anything else says it is not provided."""

from __future__ import annotations

import contextlib
import enum
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided


class DispatchKey(enum.Enum):
    CPU = "CPU"
    CUDA = "CUDA"
    Autograd = "Autograd"
    AutogradCPU = "AutogradCPU"
    AutocastCPU = "AutocastCPU"
    AutocastCUDA = "AutocastCUDA"
    AutocastXPU = "AutocastXPU"
    Meta = "Meta"
    Python = "Python"


class DispatchKeySet:
    def __init__(self, *keys: DispatchKey) -> None:
        self.keys = frozenset(keys)

    def __or__(self, other: DispatchKeySet) -> DispatchKeySet:
        return DispatchKeySet(*self.keys, *other.keys)

    def has(self, key: DispatchKey) -> bool:
        return key in self.keys


class _ExcludeDispatchKeyGuard(contextlib.nullcontext):
    def __init__(self, keyset: DispatchKeySet) -> None:
        super().__init__()


class DisableTorchFunctionSubclass(contextlib.nullcontext):
    """No `__torch_function__` overrides run here, so there are none to disable."""


class DisableTorchFunction(contextlib.nullcontext):
    pass


def _get_tracing_state() -> None:
    return None


def _log_api_usage_once(event: str) -> None:
    return None


def _are_functorch_transforms_active() -> bool:
    """Whether a `torch.func` transform runs: code asks to take a path the transforms allow;
    tracegrad's transforms run any path, so it may take the usual one."""
    return False


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.autograd.function`: `Function`, `FunctionCtx` and `once_differentiable`."""

from typing import Any

from tracegrad.frontend.function import Function, FunctionCtx, once_differentiable
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

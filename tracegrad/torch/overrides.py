"""`torch.overrides`: PyTorch's `__torch_function__` protocol. tracegrad does not dispatch its
functions through it: no tensor or mode overrides what a torch function does, so
`has_torch_function` is False for everything, and a `TorchFunctionMode` may be entered (lightning
enters one around module construction) but its `__torch_function__` is never called."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["TorchFunctionMode", "handle_torch_function", "has_torch_function",
           "has_torch_function_unary", "has_torch_function_variadic", "is_tensor_like"]  # fmt: skip


def has_torch_function(relevant_args: Any) -> bool:
    return False


def has_torch_function_unary(arg: Any) -> bool:
    return False


def has_torch_function_variadic(*args: Any) -> bool:
    return False


def handle_torch_function(public_api: Any, relevant_args: Any, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(
        "torch.overrides.handle_torch_function: tracegrad does not dispatch through "
        "__torch_function__ (has_torch_function is always False)"
    )


def is_tensor_like(inp: Any) -> bool:
    from tracegrad.frontend.tensor import Tensor

    return isinstance(inp, Tensor) or hasattr(type(inp), "__torch_function__")


class TorchFunctionMode:
    """A mode that PyTorch would call for every torch function inside `with mode:`; here the
    block runs as it would without it (its `__torch_function__` is never called)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> TorchFunctionMode:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.overrides`: PyTorch's `__torch_function__` protocol, for functions of a user's that
take part as torch's do (`if has_torch_function(args): return handle_torch_function(...)`).
Tensor subclasses dispatch (tracegrad.frontend.torch_function); a `TorchFunctionMode` may be
entered (lightning enters one around module construction) but its `__torch_function__` is never
called."""

from __future__ import annotations

from typing import Any

from tracegrad.frontend.torch_function import dispatch, overloaded
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["TorchFunctionMode", "handle_torch_function", "has_torch_function",
           "has_torch_function_unary", "has_torch_function_variadic", "is_tensor_like"]  # fmt: skip


def has_torch_function(relevant_args: Any) -> bool:
    """Whether a subclass among `relevant_args` takes the call (outside a disabled block)."""
    return bool(overloaded(tuple(relevant_args), {}))


def has_torch_function_unary(arg: Any) -> bool:
    return has_torch_function((arg,))


def has_torch_function_variadic(*args: Any) -> bool:
    return has_torch_function(args)


def handle_torch_function(public_api: Any, relevant_args: Any, *args: Any, **kwargs: Any) -> Any:
    """`public_api(*args, **kwargs)` as the subclasses among `relevant_args` answer it."""
    return dispatch(public_api, overloaded(tuple(relevant_args), {}), args, kwargs)


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

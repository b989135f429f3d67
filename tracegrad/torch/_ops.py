"""`torch.ops`: the operators registered by namespace (`torch.ops.aten.add`, an extension's
`torch.ops.torchvision.nms`). tracegrad has no C++ operator registry: a namespace holds the ops
defined in Python with `torch.library.custom_op`, and `load_library` raises OSError, which
extensions' Python fronts (torchvision's `extension.py`) catch to go on without their compiled
operators, as they do where the library does not match the installed PyTorch."""

from __future__ import annotations

import types
from typing import Any


class _Namespace:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, op: str) -> Any:
        if op.startswith("__"):
            raise AttributeError(op)
        from tracegrad.torch.library import custom_ops

        found = custom_ops.get(f"{self._name}::{op}")
        if found is not None:
            return found
        if self._name == "aten":
            return _AtenOp(op)
        raise AttributeError(f"torch.ops.{self._name}.{op}: no such operator (tracegrad has no "
                             "C++ operators; see docs/pytorch.md)")  # fmt: skip


class _AtenOp:
    """`torch.ops.aten.<op>` and its overloads (`.default`, `.Tensor`): PyTorch's operator,
    which is the function of that name (`aten.clone.default(x)` is `torch.clone(x)`).
    Libraries key tables by them (PyG's `__torch_dispatch__` handlers, which nothing here
    calls: tracegrad does not dispatch to subclasses)."""

    def __init__(self, name: str, overload: str | None = None) -> None:
        self._name, self._overload = name, overload

    def __getattr__(self, overload: str) -> _AtenOp:
        if overload.startswith("__") or self._overload is not None:
            raise AttributeError(overload)
        return _AtenOp(self._name, overload)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import tracegrad  # the top level has torch's functions, with their meanings

        function = getattr(tracegrad, self._name, None) or getattr(tracegrad.Tensor, self._name,
                                                                   None)  # fmt: skip
        if function is None:
            raise NotImplementedError(f"torch.ops.aten.{self._name}: tracegrad has no such "
                                      "function (it runs no C++ operators)")  # fmt: skip
        return function(*args, **kwargs)

    def _key(self) -> tuple:
        return self._name, self._overload

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _AtenOp) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"aten.{self._name}" + (f".{self._overload}" if self._overload else "")


class _Ops(types.ModuleType):
    """`torch.ops`: `torch.ops.<namespace>.<op>` and `load_library`."""

    loaded_libraries: set = set()

    def load_library(self, path: str) -> None:
        raise OSError(f"torch.ops.load_library({path!r}): tracegrad cannot load PyTorch C++ "
                      "extensions")  # fmt: skip

    def __getattr__(self, namespace: str) -> Any:
        if namespace.startswith("__"):
            raise AttributeError(namespace)
        return _Namespace(namespace)


ops = _Ops("torch.ops", __doc__)

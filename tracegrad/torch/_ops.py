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
        raise AttributeError(f"torch.ops.{self._name}.{op}: no such operator (tracegrad has no "
                             "C++ operators; see docs/pytorch.md)")  # fmt: skip


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

"""`torch.utils.dlpack`: tensors to and from other array libraries without a copy, through
NumPy's DLPack support (CPU memory only)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.frontend.tensor import Tensor

__all__ = ["from_dlpack", "to_dlpack"]


def from_dlpack(ext_tensor: Any) -> Tensor:
    """A tensor sharing the memory of an object with `__dlpack__` (or of a DLPack capsule)."""
    if not hasattr(ext_tensor, "__dlpack__"):  # a capsule: NumPy reads objects, so wrap it
        ext_tensor = _Capsule(ext_tensor)
    return Tensor._of(np.from_dlpack(ext_tensor))


def to_dlpack(tensor: Tensor) -> Any:
    """A DLPack capsule of the tensor's memory."""
    return tensor._concrete("to_dlpack").__dlpack__()


class _Capsule:
    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

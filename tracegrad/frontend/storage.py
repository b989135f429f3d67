"""PyTorch's storages: the bytes under a tensor (`t.untyped_storage()`, `torch.UntypedStorage`).

Checkpoint readers work on them: safetensors maps a file (`UntypedStorage.from_file`), slices
each tensor's bytes out of it and reads them as a tensor (`torch.asarray(storage[a:b],
dtype=torch.uint8).view(dtype=...)`), and finds tied weights by the storage's `data_ptr()`.
Here a storage is a 1-d uint8 view of the array that owns the memory, so every tensor read out
of it shares that memory, as in PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.frontend.device import CPU, require_cpu
from tracegrad.frontend.dtypes import torch_dtype


def memory_owner(a: np.ndarray) -> np.ndarray:
    """The array that owns `a`'s memory (views share an owner, so their storages answer one
    `data_ptr()`)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _owner_bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(memory_owner(a)).reshape(-1).view(np.uint8)


class UntypedStorage:
    """Bytes shared with the tensors made of them. `UntypedStorage(n)` is n zero bytes;
    `storage[a:b]` the bytes a to b (shared); `np.asarray(storage)` or `torch.asarray(storage,
    dtype=...)` reads them as an array of that dtype (no copy). A tensor's `storage()` (PyTorch's
    typed storage) counts elements of the tensor's dtype in `size()` and `len()`."""

    def __init__(self, size: int = 0, *, device: Any = None) -> None:
        if device is not None:
            require_cpu(device, "UntypedStorage")
        self._bytes, self._dtype = np.zeros(int(size), np.uint8), np.dtype(np.uint8)

    @classmethod
    def of(cls, a: np.ndarray, typed: bool = False) -> UntypedStorage:
        """The storage under an array (a tensor's); `typed`: counted in the array's dtype."""
        s = cls._of_bytes(_owner_bytes(a))
        s._dtype = a.dtype if typed else s._dtype
        return s

    @classmethod
    def from_file(cls, filename: str, shared: bool = False, nbytes: int = 0,
                  size: int = 0) -> UntypedStorage:  # fmt: skip
        """The file's first `nbytes` bytes, mapped: changes reach the file when `shared`, and
        stay in memory (copy on write) otherwise, as PyTorch's (MAP_SHARED or MAP_PRIVATE)."""
        n = int(nbytes or size)
        mapped = np.memmap(filename, np.uint8, "r+" if shared else "c", shape=(n,)) if n else None
        return cls._of_bytes(np.zeros(0, np.uint8) if mapped is None else mapped.view(np.ndarray))

    @classmethod
    def _of_bytes(cls, b: np.ndarray) -> UntypedStorage:
        s = cls.__new__(cls)
        s._bytes, s._dtype = b, np.dtype(np.uint8)
        return s

    def untyped(self) -> UntypedStorage:
        return self._of_bytes(self._bytes)

    _untyped = untyped

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            if i.step not in (None, 1):
                raise RuntimeError("UntypedStorage: slices must have step 1")
            # its own owner (PyTorch's slice is a storage of its own: its own data_ptr)
            return self._of_bytes(np.frombuffer(memoryview(self._bytes[i]), np.uint8))
        return int(self._bytes[i])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The bytes read as `dtype` (PyTorch's asarray of a storage reinterprets, never
        casts), else as the storage's own dtype."""
        return self._bytes.view(np.dtype(dtype) if dtype is not None else self._dtype)

    def data_ptr(self) -> int:
        return self._bytes.ctypes.data

    def nbytes(self) -> int:
        return self._bytes.nbytes

    def size(self) -> int:
        return self._bytes.nbytes // self._dtype.itemsize

    __len__ = size

    def element_size(self) -> int:
        return self._dtype.itemsize

    def tolist(self) -> list:
        return self.__array__().tolist()

    device = property(lambda self: CPU)
    is_cuda = property(lambda self: False)
    dtype = property(lambda self: torch_dtype(self._dtype))


def storage_offset(a: np.ndarray) -> int:
    """How many elements into its storage an array starts (PyTorch's `storage_offset()`)."""
    return (a.ctypes.data - memory_owner(a).ctypes.data) // a.itemsize if a.size else 0

"""PyTorch's checkpoint files (`torch.save`'s zip: a pickle `data.pkl` whose tensors point at raw
storages `data/<key>`), read as PyTorch's `weights_only=True` reads them: the pickle may name
only tensors, parameters, storages, dtypes, devices and containers (`ALLOWED`); anything else
(a class of the script, a function) is refused by name, so no code from the file runs. What
comes back is what `tracegrad.load` gives: tensors, dicts, lists, tuples, numbers, strings."""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from typing import Any

import numpy as np

from tracegrad.frontend.device import device
from tracegrad.frontend.tensor import Tensor

# PyTorch's storage classes, by the dtype of their elements ("bfloat16": read as float32)
STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
            "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
            "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
            "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
            "ComplexDoubleStorage": "complex128"}  # fmt: skip
# PyTorch's dtype objects a pickle may name (`torch.float32`, or an alias: `torch.half`)
DTYPES = {**{n: n for n in ("float32", "float64", "float16", "int64", "int32", "int16", "int8",
                            "uint8", "bool", "complex64", "complex128")},
          "float": "float32", "double": "float64", "half": "float16", "long": "int64",
          "int": "int32"}  # fmt: skip


# Classes the user allowed (`torch.serialization.add_safe_globals`, `safe_globals`), as PyTorch's
# weights_only loader takes them: by (module, name), rebuilt by pickle's own rules
SAFE_GLOBALS: dict[tuple[str, str], Any] = {}


class Refused(pickle.UnpicklingError):
    """The pickle names something a checkpoint of tensors does not hold."""


def is_torch_checkpoint(members: list[str]) -> bool:
    return any(m.endswith("/data.pkl") or m == "data.pkl" for m in members)


def read(source: Any) -> Any:
    """The object a PyTorch zip checkpoint at `source` (a path or a binary file) holds."""
    with zipfile.ZipFile(source) as archive:
        names = archive.namelist()
        pkl = next(m for m in names if m.endswith("data.pkl"))
        prefix = pkl[: -len("data.pkl")]
        order = archive.read(prefix + "byteorder").decode() if prefix + "byteorder" in names \
            else "little"  # fmt: skip
        return _Unpickler(io.BytesIO(archive.read(pkl)), archive, prefix, order).load()


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str, order: str):
        super().__init__(file)
        self.archive, self.prefix, self.order = archive, prefix, order
        self.storages: dict[str, np.ndarray] = {}
        self.views: dict[tuple, Tensor] = {}  # a storage's same view twice: one tensor (tied)

    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED.get((module, name))
        if found is not None:
            return found if not isinstance(found, str) else getattr(self, found)
        if module == "torch" and name in STORAGES:
            return STORAGES[name]
        if module == "torch" and name in DTYPES:
            return np.dtype(DTYPES[name])
        if (module, name) in SAFE_GLOBALS:
            return SAFE_GLOBALS[module, name]
        raise Refused(f"the checkpoint names {module}.{name}, which tracegrad does not load "
                      "(only tensors, numbers, strings and containers, as PyTorch's "
                      "weights_only=True; allow a class with "
                      "torch.serialization.add_safe_globals)")  # fmt: skip

    def persistent_load(self, pid: Any) -> np.ndarray:
        """A storage: ('storage', its element dtype, key, location, size)."""
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise Refused(f"an unknown persistent id {pid!r} in the checkpoint")
        _, dtype, key, _, size = pid[:5]
        if key not in self.storages:
            raw = self.archive.read(f"{self.prefix}data/{key}")
            self.storages[key] = _elements(raw, dtype, self.order)[:size]
        return self.storages[key]

    def rebuild_tensor(self, storage: np.ndarray, offset: int, size: tuple, stride: tuple,
                       requires_grad: bool = False, *_: Any) -> Tensor:  # fmt: skip
        view = (id(storage), offset, tuple(size), tuple(stride))
        if view not in self.views:
            items = np.lib.stride_tricks.as_strided(
                storage[offset:], tuple(size), tuple(s * storage.itemsize for s in stride)
            )
            self.views[view] = Tensor._of(np.array(items), requires_grad=bool(requires_grad))
        return self.views[view]

    def rebuild_parameter(self, data: Tensor, requires_grad: bool, *_: Any) -> Tensor:
        """A saved `nn.Parameter`: its tensor, requiring grad as it did."""
        return data.requires_grad_(bool(requires_grad)) if data.is_leaf else data


def _elements(raw: bytes, dtype: str, order: str) -> np.ndarray:
    """A storage's bytes as its elements; bfloat16 widened to float32 (its high half)."""
    if dtype == "bfloat16":
        halves = np.frombuffer(raw, "<u2" if order == "little" else ">u2").astype(np.uint32)
        return (halves << 16).view(np.float32)
    kind = np.dtype(dtype).newbyteorder("<" if order == "little" else ">")
    return np.frombuffer(raw, kind).astype(np.dtype(dtype))


# What a checkpoint's pickle may name (the rest is refused), and what stands for it: a string
# names the unpickler's method, which reads the file's storages.
ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): "rebuild_tensor",
    ("torch._utils", "_rebuild_tensor"): "rebuild_tensor",
    ("torch._utils", "_rebuild_parameter"): "rebuild_parameter",
    ("torch._utils", "_rebuild_parameter_with_state"): "rebuild_parameter",
    ("torch", "Size"): tuple,
    ("torch", "device"): device,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
}

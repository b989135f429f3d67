"""PyTorch's checkpoint files (`torch.save`'s zip: a pickle `data.pkl` whose tensors point at raw
storages `data/<key>`), written as PyTorch writes them, so PyTorch loads what tracegrad saves.

They are read as PyTorch's `weights_only=True` reads them: the pickle may name only tensors,
parameters, storages, dtypes, devices, containers and NumPy arrays (`ALLOWED`); anything else
(a class of the script, a function) is refused by name, so no code from the file runs. With
`weights_only=False` (a whole module saved, as PyTorch allows) the pickle is trusted: it imports
and runs what it names."""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import functools
import io
import pickle
import random
import struct
import sys
import zipfile
from typing import IO, Any

import numpy as np

from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.frontend.device import device
from tracegrad.frontend.dtypes import dtype, torch_dtype, torch_dtype_named
from tracegrad.frontend.storage import memory_owner
from tracegrad.frontend.tensor import Size, Tensor
from tracegrad.frontend.torch_function import pickled_by_wrapper

# PyTorch's storage classes, by the dtype of their elements; dtypes without one (uint16 and
# wider) are untyped bytes, read by `_rebuild_tensor_v3`, which names the dtype
STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
            "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
            "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
            "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
            "ComplexDoubleStorage": "complex128"}  # fmt: skip
STORAGE_OF = {torch_dtype_named(d): name for name, d in STORAGES.items()}
ALIGNMENT = 64  # PyTorch aligns each record's bytes in the file, so a mapped load can view them

# Classes the user allowed (`torch.serialization.add_safe_globals`, `safe_globals`), as PyTorch's
# weights_only loader takes them: by (module, name), rebuilt by pickle's own rules
SAFE_GLOBALS: dict[tuple[str, str], Any] = {}
# nn.Parameter, set by tracegrad.nn (a layer above) when it loads: a saved parameter is written
# as one and loads as one
PARAMETER: type[Tensor] | None = None


class Refused(pickle.UnpicklingError):
    """The pickle names something a checkpoint of tensors does not hold."""


def is_torch_checkpoint(members: list[str]) -> bool:
    return any(m.endswith("/data.pkl") or m == "data.pkl" for m in members)


def read(source: Any, trusted: bool = False) -> Any:
    """The object a PyTorch zip checkpoint at `source` (a path or a binary file) holds;
    `trusted`: any class the pickle names is imported (PyTorch's `weights_only=False`)."""
    with zipfile.ZipFile(source) as archive:
        names = archive.namelist()
        pkl = next(m for m in names if m.endswith("data.pkl"))
        prefix = pkl[: -len("data.pkl")]
        order = archive.read(prefix + "byteorder").decode() if prefix + "byteorder" in names \
            else "little"  # fmt: skip
        kind = _Trusting if trusted else _Unpickler
        return kind(io.BytesIO(archive.read(pkl)), archive, prefix, order).load()


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str, order: str):
        super().__init__(file)
        self.archive, self.prefix, self.order = archive, prefix, order
        self.storages: dict[str, np.ndarray] = {}
        self.views: dict[tuple, Tensor] = {}  # a storage's same view twice: one tensor (tied)
        self.typed: dict[tuple, np.ndarray] = {}  # untyped storages read as a dtype

    def find_class(self, module: str, name: str) -> Any:
        # protocol 2 names Python 3's builtins by Python 2's names (`__builtin__.set`)
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        found = ALLOWED.get((module, name))
        if found is not None:
            return found if not isinstance(found, str) else getattr(self, found)
        if module == "torch" and name in STORAGES:
            return STORAGES[name]
        if module == "torch.storage" and name == "UntypedStorage":
            return "uint8"
        if module == "torch" and isinstance(kind := _dtype_named(name), dtype):
            return kind
        if (module, name) in SAFE_GLOBALS:
            return SAFE_GLOBALS[module, name]
        raise Refused(f"the checkpoint names {module}.{name}, which tracegrad does not load "
                      "(only tensors, numbers, strings, arrays and containers, as PyTorch's "
                      "weights_only=True; allow a class with "
                      "torch.serialization.add_safe_globals, or load with weights_only=False "
                      "if you trust the file: that runs the code it names)")  # fmt: skip

    def persistent_load(self, pid: Any) -> np.ndarray:
        """A storage: ('storage', its element dtype, key, location, size)."""
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise Refused(f"an unknown persistent id {pid!r} in the checkpoint")
        _, kind, key, _, size = pid[:5]
        if key not in self.storages:
            raw = self.archive.read(f"{self.prefix}data/{key}")
            self.storages[key] = _elements(raw, kind, self.order)[:size]
        return self.storages[key]

    def rebuild_tensor(self, storage: np.ndarray, offset: int, size: tuple, stride: tuple,
                       requires_grad: bool = False, *_: Any) -> Tensor:  # fmt: skip
        """A view of the storage, as PyTorch's: tensors saved sharing memory share it again."""
        view = (id(storage), offset, tuple(size), tuple(stride))
        if view not in self.views:
            n = storage.itemsize
            items = np.ndarray(tuple(size), storage.dtype, storage, offset * n,
                               tuple(s * n for s in stride))  # fmt: skip
            t = self.views[view] = Tensor._of(items, requires_grad=bool(requires_grad))
            t._permuted = not items.flags.c_contiguous  # `contiguous()` copies it
        return self.views[view]

    def rebuild_tensor_v3(
        self,
        storage: np.ndarray,
        offset: int,
        size: tuple,
        stride: tuple,
        requires_grad: bool,
        hooks: Any,
        kind: Any,
        *_: Any,
    ) -> Tensor:
        """A tensor over untyped bytes (uint16 and wider): the bytes read as `kind`, once per
        storage, so tensors saved sharing it share it again."""
        key = (id(storage), np.dtype(kind))
        if key not in self.typed:
            order = np.dtype(kind).newbyteorder("<" if self.order == "little" else ">")
            self.typed[key] = storage.view(order).astype(np.dtype(kind))
        return self.rebuild_tensor(self.typed[key], offset, size, stride, requires_grad)

    def rebuild_parameter(self, data: Tensor, requires_grad: bool, *_: Any) -> Tensor:
        """A saved `nn.Parameter`: a parameter again, requiring grad as it did."""
        if PARAMETER is None or not data.is_leaf:
            return data.requires_grad_(bool(requires_grad)) if data.is_leaf else data
        return PARAMETER(data.detach(), requires_grad=bool(requires_grad))


class _Trusting(_Unpickler):
    """PyTorch's `weights_only=False`: what the pickle names is imported, tensors and PyTorch's
    names as above. A module pickled whole by PyTorch names PyTorch's classes, which are not
    tracegrad's: refused, by name."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Refused:
            if module.partition(".")[0] == "torch":
                raise Refused(f"the checkpoint names PyTorch's {module}.{name}: an object "
                              "PyTorch pickled whole (a module?) does not load in tracegrad; "
                              "save its state_dict() instead") from None  # fmt: skip
            return pickle.Unpickler.find_class(self, module, name)


def _dtype_named(name: str) -> Any:
    try:
        return torch_dtype_named(ALIASES.get(name, name))
    except KeyError:
        return None


ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
           "int": "int32", "short": "int16"}  # fmt: skip


def _elements(raw: bytes, kind: str, order: str) -> np.ndarray:
    """A storage's bytes as its elements (bfloat16 as its bits, as tensors here hold it)."""
    if kind == "bfloat16":
        return np.frombuffer(raw, "<u2" if order == "little" else ">u2").astype("<u2")\
            .view(BFLOAT16)  # fmt: skip
    want = np.dtype(kind)
    return np.frombuffer(raw, want.newbyteorder("<" if order == "little" else ">")).astype(want)


# What a checkpoint's pickle may name (the rest is refused), and what stands for it: a string
# names the unpickler's method, which reads the file's storages. NumPy's arrays and scalars
# (what NumPy's own pickling names; their bytes are data, never code) load too, as tracegrad's
# own checkpoints always held them.
ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): "rebuild_tensor",
    ("torch._utils", "_rebuild_tensor"): "rebuild_tensor",
    ("torch._utils", "_rebuild_tensor_v3"): "rebuild_tensor_v3",
    ("torch._utils", "_rebuild_parameter"): "rebuild_parameter",
    ("torch._utils", "_rebuild_parameter_with_state"): "rebuild_parameter",
    ("torch", "Size"): Size,
    ("torch", "device"): device,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("_codecs", "encode"): codecs.encode,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    **{
        (m, name): getattr(np._core.multiarray, name)
        for m in ("numpy.core.multiarray", "numpy._core.multiarray")
        for name in ("_reconstruct", "scalar")
    },
}


# --- writing ------------------------------------------------------------------------------------


def write(obj: Any, file: IO[bytes], protocol: int = 2) -> None:
    """`obj` as PyTorch's zip checkpoint: the pickle (protocol 2 unless asked, as PyTorch's),
    then each storage's bytes, every record aligned as PyTorch aligns them."""
    pickled, storages = io.BytesIO(), {}
    _Pickler(pickled, storages, protocol).dump(obj)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED) as archive:
        records = {
            "data.pkl": pickled.getbuffer(),
            ".format_version": b"1",
            ".storage_alignment": str(ALIGNMENT).encode(),
            "byteorder": sys.byteorder.encode(),
            **{f"data/{key}": data for key, data in storages.values()},
            "version": b"3\n",
            ".data/serialization_id": str(random.getrandbits(128)).zfill(40).encode(),
        }
        for name, data in records.items():
            _record(archive, f"archive/{name}", data)


def _record(archive: zipfile.ZipFile, name: str, data: Any) -> None:
    """One stored record whose bytes start at a multiple of ALIGNMENT (padding in an extra
    field, as PyTorch's writer pads)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    size = memoryview(data).nbytes
    big = size >= zipfile.ZIP64_LIMIT
    start = archive.fp.tell() + 30 + len(name.encode()) + 4 + (20 if big else 0)
    pad = -start % ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    with archive.open(info, "w", force_zip64=big) as f:
        f.write(data)


class _Name:
    """One of PyTorch's globals (`torch._utils._rebuild_tensor_v2`, `torch.FloatStorage`),
    written by name: PyTorch need not be importable to write it."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:  # pickle writes only what it can call
        raise TypeError(f"{self.module}.{self.name} is only a name, written into checkpoints")


@functools.cache
def _name(module: str, name: str) -> _Name:
    return _Name(module, name)


class _Reduced:
    """An object pickled as `call(*args)` (a parameter's inner tensor)."""

    __slots__ = ("call", "args")

    def __init__(self, call: _Name, args: tuple):
        self.call, self.args = call, args


class _Storage:
    """A storage as PyTorch's pickle names it: by a persistent id, its bytes a record."""

    __slots__ = ("pid",)

    def __init__(self, pid: tuple):
        self.pid = pid


class _Pickler(pickle._Pickler):  # Python's own pickler: its dispatch table takes `_Name`
    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file: IO[bytes], storages: dict[int, tuple[str, np.ndarray]],
                 protocol: int = 2) -> None:  # fmt: skip
        super().__init__(file, protocol=protocol)
        self.storages = storages  # id(array owning the bytes) -> (key, the bytes)
        self.owners: dict[int, tuple[np.ndarray, Any]] = {}  # held, so no id is reused

    def save_name(self, obj: _Name) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    dispatch[_Name] = save_name

    def save_dtype(self, obj: dtype) -> None:
        self.save(_name("torch", obj.name))  # through the memo: a dtype named twice is one name

    dispatch[dtype] = save_dtype

    def persistent_id(self, obj: Any) -> Any:
        return obj.pid if type(obj) is _Storage else None

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is _Reduced:
            return obj.call, obj.args
        if isinstance(obj, Tensor):
            return self._tensor(obj)
        if type(obj).__module__.partition(".")[0] == "torch" and hasattr(obj, "detach"):
            return self._tensor(
                Tensor._of(obj.detach().cpu().numpy(), requires_grad=bool(obj.requires_grad))
            )
        if isinstance(obj, Size):
            return _name("torch", "Size"), (tuple(obj),)
        if isinstance(obj, device):
            return _name("torch", "device"), (str(obj),)
        return pickled_by_wrapper(obj) or NotImplemented

    def _tensor(self, t: Tensor) -> tuple:
        """PyTorch's reduction of a tensor (`_rebuild_tensor_v2(storage, offset, size, stride,
        requires_grad, hooks)`), of a parameter (`_rebuild_parameter(its data, ...)`)."""
        if t.is_symbolic:
            raise TypeError("save: a tensor computed inside a traced step has no value to save; "
                            "save after the step")  # fmt: skip
        a = t._value
        storage, offset, stride = self._storage(a)
        args = (storage, offset, tuple(a.shape), stride)
        kind, hooks = torch_dtype(a.dtype), collections.OrderedDict()

        def rebuilt(requires_grad: bool) -> tuple:
            if kind in STORAGE_OF:
                return _name("torch._utils", "_rebuild_tensor_v2"), (*args, requires_grad, hooks)
            return _name("torch._utils", "_rebuild_tensor_v3"), \
                (*args, requires_grad, hooks, kind)  # fmt: skip

        if PARAMETER is not None and isinstance(t, PARAMETER):
            return _name("torch._utils", "_rebuild_parameter"), \
                (_Reduced(*rebuilt(False)), t.requires_grad, hooks)  # fmt: skip
        return rebuilt(t.requires_grad)

    def _storage(self, a: np.ndarray) -> tuple[_Storage, int, tuple]:
        """The storage of the array owning `a`'s memory (tensors viewing one array share it, as
        PyTorch's do), `a`'s offset and strides in it counted in elements; a copy of `a` of its
        own where its layout cannot be said so (bytes read as another dtype, negative strides)."""
        owner, size = memory_owner(a), a.itemsize
        offset, rest = divmod(a.ctypes.data - owner.ctypes.data, size) if a.size else (0, 0)
        stride = [s // size for s in a.strides]
        fits = (owner.flags.c_contiguous or owner.flags.f_contiguous) and owner.nbytes % size == 0
        known = self.owners.get(id(owner))
        if not fits or rest or offset < 0 or any(s < 0 or s % size for s in a.strides) or \
                (known is not None and known[1] != a.dtype):  # fmt: skip
            owner = np.array(a, order="C")
            offset, stride = 0, [s // size for s in owner.strides]
        if id(owner) not in self.storages:
            key = str(len(self.storages))
            self.storages[id(owner)] = key, owner.ravel(order="K").view(np.uint8)
            self.owners[id(owner)] = owner, a.dtype
        key = self.storages[id(owner)][0]
        kind = torch_dtype(a.dtype)
        if kind in STORAGE_OF:
            pid = ("storage", _name("torch", STORAGE_OF[kind]), key, "cpu", owner.nbytes // size)
        else:
            pid = ("storage", _name("torch.storage", "UntypedStorage"), key, "cpu", owner.nbytes)
        return _Storage(pid), offset, tuple(stride)

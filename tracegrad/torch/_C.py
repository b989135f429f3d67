"""`torch._C`, PyTorch's compiled core: the few names Python packages use at import or in
ordinary calls (torchvision's), meaning what they can here. Dispatch keys exist to be combined
and excluded (nothing is dispatched by key); the tracing state is None (no TorchScript tracer);
API-usage logging does nothing. Anything else says it is not provided."""

from __future__ import annotations

import contextlib
import enum
import io
import struct
import types
import zipfile
from typing import Any

from tracegrad.core.errors import LinAlgError as _LinAlgError  # noqa: F401 (torch._C's name)
from tracegrad.frontend.device import device as _device
from tracegrad.frontend.dtypes import dtype as _dtype
from tracegrad.frontend.tensor import Tensor as _Tensor
from tracegrad.frontend.torch_function import DisableTorchFunctionSubclass  # noqa: F401
from tracegrad.frontend.torch_function import (  # noqa: F401
    disabled_torch_function_impl as _disabled_torch_function_impl,
)
from tracegrad.torch._support import not_provided as _not_provided

_TensorMeta = type(_Tensor)  # the class of tensor classes (lightning's lazy loader names it)


def _parse_to(*args: Any, **kwargs: Any) -> tuple[Any, Any, bool, Any]:
    """What `module.to(...)`'s arguments ask for, as PyTorch parses them: (device, dtype,
    non_blocking, memory_format); a tensor given stands for its device and dtype."""
    device, kind = kwargs.get("device"), kwargs.get("dtype")
    for a in args:
        if isinstance(a, _Tensor):
            device, kind = a.device, a.dtype
        elif isinstance(a, _dtype):
            kind = a
        elif isinstance(a, bool):  # before int: a bool is one
            kwargs.setdefault("non_blocking", a)
        elif isinstance(a, str | int | _device):
            device = a
    device = _device(device) if isinstance(device, str | int) else device
    return device, kind, bool(kwargs.get("non_blocking", False)), kwargs.get("memory_format")


_nn = types.SimpleNamespace(_parse_to=_parse_to)


class PyTorchFileReader:
    """The records of a checkpoint's zip (`torch.save`'s), named without the archive's folder,
    as PyTorch's reader names them."""

    def __init__(self, file: Any) -> None:
        self._zip = zipfile.ZipFile(file if not isinstance(file, bytes) else io.BytesIO(file))
        pickle = next(n for n in self._zip.namelist() if n.endswith("data.pkl"))
        self._prefix = pickle[: -len("data.pkl")]

    def get_all_records(self) -> list[str]:
        return [n[len(self._prefix) :] for n in self._zip.namelist()]

    def has_record(self, name: str) -> bool:
        return self._prefix + name in self._zip.namelist()

    def get_record(self, name: str) -> bytes:
        return self._zip.read(self._prefix + name)

    def get_record_offset(self, name: str) -> int:
        """Where the record's bytes start in the file."""
        info = self._zip.getinfo(self._prefix + name)
        self._zip.fp.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", self._zip.fp.read(4))
        return info.header_offset + 30 + name_length + extra_length

    def serialization_id(self) -> str:
        found = self.has_record(".data/serialization_id")
        return self.get_record(".data/serialization_id").decode() if found else ""


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


DisableTorchFunction = DisableTorchFunctionSubclass  # tracegrad has no torch function modes


def _get_tracing_state() -> None:
    return None


def _log_api_usage_once(event: str) -> None:
    return None


def _are_functorch_transforms_active() -> bool:
    """Whether a `torch.func` transform runs: code asks to take a path the transforms allow;
    tracegrad's transforms run any path, so it may take the usual one."""
    return False


class TensorType:
    """TorchScript's type of tensors, which annotations and schema code name (open_clip imports
    it); there is one, and `get()` gives it."""

    @classmethod
    def get(cls) -> TensorType:
        return cls()

    def __repr__(self) -> str:
        return "Tensor"


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

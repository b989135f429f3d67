"""What the `tracegrad.torch` modules share: PyTorch's dtype objects over NumPy's dtypes, the
error for a name tracegrad does not provide, and the import hook that makes `import torch` mean
`tracegrad.torch` (for `python -m tracegrad run`)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from tracegrad.core.errors import user_location


class _DtypeClass(type):
    """`isinstance(x.dtype, torch.dtype)` holds, as in PyTorch, though a tensor's dtype is
    NumPy's: code tells a dtype argument from others that way (`.to(torch.float16)` or
    `.to(device)`)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, np.dtype) or type.__instancecheck__(cls, obj)


class dtype(metaclass=_DtypeClass):  # noqa: N801 (PyTorch's name)
    """PyTorch's `torch.dtype`, standing for a NumPy dtype: `np.dtype(torch.float32)` is
    float32, and `x.dtype == torch.float32` holds (a tensor's dtype is NumPy's). A dtype with no
    NumPy counterpart (bfloat16) exists, so that code naming it runs, and raises when used."""

    __slots__ = ("name", "_numpy", "_why")

    def __init__(self, name: str, numpy: Any = None, why: str = "") -> None:
        self.name = name
        self._numpy = None if numpy is None else np.dtype(numpy)
        self._why = why

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype (NumPy reads this attribute in np.dtype(x), np.zeros(n, x), ...)."""
        if self._numpy is None:
            raise TypeError(f"torch.{self.name} is not provided by tracegrad: {self._why}")
        return self._numpy

    is_floating_point = property(lambda self: self._kind() == "f")
    is_complex = property(lambda self: self._kind() == "c")
    is_signed = property(lambda self: self._kind() in "fic")
    itemsize = property(lambda self: self.dtype.itemsize)

    def _kind(self) -> str:
        return "f" if self._numpy is None else self._numpy.kind

    def to_real(self) -> dtype:
        """The dtype of a complex dtype's parts (complex64: float32); a real dtype itself."""
        return DTYPES[_PARTS[self.name]] if self.name in _PARTS else self

    def to_complex(self) -> dtype:
        """The complex dtype of a float dtype's precision (float64: complex128)."""
        if self.name == "float64" or self.name == "complex128":
            return DTYPES["complex128"]
        return DTYPES["complex64"]

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, dtype):
            return self.name == other.name
        if self._numpy is None:
            return False
        try:
            return self._numpy == np.dtype(other)
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(self.name if self._numpy is None else self._numpy)


DTYPES = {
    "float32": dtype("float32", np.float32), "float64": dtype("float64", np.float64),
    "float16": dtype("float16", np.float16),
    "bfloat16": dtype("bfloat16", why="NumPy has no bfloat16; use float32 (or float16)"),
    **{name: dtype(name, why="NumPy has no float8 types; use float16 or float32")
       for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                    "float8_e8m0fnu")},
    "int8": dtype("int8", np.int8), "int16": dtype("int16", np.int16),
    "int32": dtype("int32", np.int32), "int64": dtype("int64", np.int64),
    "uint8": dtype("uint8", np.uint8), "uint16": dtype("uint16", np.uint16),
    "uint32": dtype("uint32", np.uint32), "uint64": dtype("uint64", np.uint64),
    "bool": dtype("bool", np.bool_),
    "complex64": dtype("complex64", np.complex64), "complex128": dtype("complex128", np.complex128),
}  # fmt: skip
_PARTS = {"complex64": "float32", "complex128": "float64"}
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "short": "int16",
           "int": "int32", "long": "int64", "cfloat": "complex64",
           "cdouble": "complex128"}  # fmt: skip


def torch_dtype(d: Any) -> dtype:
    """PyTorch's dtype object for a NumPy dtype (or anything np.dtype takes)."""
    return DTYPES[np.dtype(d).name]


# --- names tracegrad does not provide ----------------------------------------------------------


def torch_name(module: str) -> str:
    """ "torch.nn.functional" for "tracegrad.torch.nn.functional"."""
    return module.removeprefix("tracegrad.")


def not_provided(module: str, name: str) -> AttributeError:
    """The error for `torch.X` that tracegrad lacks: it names X and the user's line."""
    if name.startswith("__") and name.endswith("__"):  # Python's own probes (__path__, ...)
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return AttributeError(
        f"{torch_name(module)}.{name} is not provided by tracegrad (used at {user_location()}); "
        "see docs/pytorch.md for what is"
    )


def file_module(full: str, doc: str, names: dict[str, Any]) -> types.ModuleType:
    """A module `full` (PyTorch's file path for names tracegrad keeps elsewhere:
    `torch.nn.modules.conv`, `torch.optim.rmsprop`) holding `names`, registered so that an
    import or a pickle naming that path finds it; its other names say they are not provided."""
    module = types.ModuleType(full, doc)
    module.__dict__.update(names)
    module.__getattr__ = _missing(full)
    sys.modules[full] = module
    return module


def _missing(full: str) -> Any:
    def __getattr__(name: str) -> Any:
        raise not_provided(full, name)

    return __getattr__


def needs_process_group(module: str, name: str) -> Any:
    """`torch.distributed`'s function `name` of `module` (a collective, the process group's
    setup): scripts import it at the top, so it exists, and calling it raises: tracegrad's
    data parallelism is `tracegrad.distributed`, over MPI."""

    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{torch_name(module)}.{name} is not provided by tracegrad; its data parallelism is "
            "tracegrad.distributed, over MPI (docs/distributed.md)"
        )

    call.__name__ = name
    return call


# --- `import torch` as tracegrad.torch ----------------------------------------------------------


class _TorchAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `torch` and `torch.<sub>` as `tracegrad.torch` and `tracegrad.torch.<sub>`: the same
    module objects, so `torch.nn.Module is tracegrad.torch.nn.Module`."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        real = "tracegrad." + fullname
        if real not in sys.modules and importlib.util.find_spec(real) is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: tracegrad.torch does not provide it (imported "
                f"at {user_location()}); see docs/pytorch.md",
                name=fullname,
            )
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = importlib.import_module("tracegrad." + spec.name)
        self.specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        # the import system set the alias's spec on the module: give it its own back
        module.__spec__ = self.specs.pop(module.__spec__.name, module.__spec__)

    def __init__(self) -> None:
        self.specs: dict[str, Any] = {}


def alias_torch() -> None:
    """From now on in this process, `import torch` (and its submodules) is tracegrad.torch: a
    child of `python -m tracegrad run` calls this as its first `import torch`."""
    if not any(isinstance(f, _TorchAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchAlias())
    sys.modules["torch"] = importlib.import_module("tracegrad.torch")


CHILDREN_PATH = os.path.join(os.path.dirname(__file__), "_as_torch")  # for PYTHONPATH


def _is_torch(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


@contextlib.contextmanager
def imported_as_torch() -> Iterator[None]:
    """Inside, `import torch` (and `import torch.nn.functional as F`, `from torch.utils.data
    import DataLoader`, ...) gives tracegrad.torch's modules, even where PyTorch is installed.
    Afterwards the import system is as it was (PyTorch's modules, if they were imported before,
    are back)."""
    saved = {k: v for k, v in sys.modules.items() if _is_torch(k)}
    for k in saved:
        del sys.modules[k]
    finder = _TorchAlias()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if _is_torch(k)]:
            del sys.modules[k]
        sys.modules.update(saved)

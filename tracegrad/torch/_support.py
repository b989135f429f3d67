"""What the `tracegrad.torch` modules share: PyTorch's dtype objects (`frontend.dtypes`), the
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
from tracegrad.frontend.dtypes import ALIASES, DTYPES, dtype, torch_dtype  # noqa: E402, F401

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
        _register_loaded(skip=spec.name)
        return module

    def exec_module(self, module: Any) -> None:
        # the import system set the alias's spec on the module: give it its own back
        module.__spec__ = self.specs.pop(module.__spec__.name, module.__spec__)

    def __init__(self) -> None:
        self.specs: dict[str, Any] = {}


def _register_loaded(skip: str = "") -> None:
    """Every loaded tracegrad.torch module under its torch name too, as PyTorch's are once
    `import torch` ran: importing one then finds it, without setting it as an attribute of its
    package (`torch.nn.utils.weight_norm` the file would hide `weight_norm` the function)."""
    for key, module in list(sys.modules.items()):
        name = key.removeprefix("tracegrad.")
        if key.startswith("tracegrad.torch.") and name != skip:
            sys.modules.setdefault(name, module)


def alias_torch() -> None:
    """From now on in this process, `import torch` (and its submodules) is tracegrad.torch: a
    child of `python -m tracegrad run` calls this as its first `import torch`."""
    if not any(isinstance(f, _TorchAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchAlias())
    sys.modules["torch"] = _named_torch(importlib.import_module("tracegrad.torch"))
    _register_loaded()


def _named_torch(module: types.ModuleType) -> types.ModuleType:
    """`module` answering `__name__` "torch", as PyTorch's (pyro checks it at import): only while
    `import torch` means it, since imports of its submodules go by that name."""
    module.__name__ = "torch"
    return module


CHILDREN_PATH = os.path.join(os.path.dirname(__file__), "_as_torch")  # for PYTHONPATH


def _is_torch(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


@contextlib.contextmanager
def imported_as_torch() -> Iterator[None]:
    """Inside, `import torch` (and `import torch.nn.functional as F`, `from torch.utils.data
    import DataLoader`, ...) gives tracegrad.torch's modules, even where PyTorch is installed.
    Afterwards the import system is as it was (PyTorch's modules, if they were imported before,
    are back)."""
    # copies of sys.modules taken in one step: another thread may be importing meanwhile
    saved = {k: v for k, v in list(sys.modules.items()) if _is_torch(k)}
    for k in saved:
        del sys.modules[k]
    finder = _TorchAlias()
    sys.meta_path.insert(0, finder)
    root = _named_torch(importlib.import_module("tracegrad.torch"))
    _register_loaded()
    try:
        yield
    finally:
        root.__name__ = "tracegrad.torch"
        sys.meta_path.remove(finder)
        for k in [k for k in list(sys.modules) if _is_torch(k)]:
            sys.modules.pop(k, None)
        sys.modules.update(saved)

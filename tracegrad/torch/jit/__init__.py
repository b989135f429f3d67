"""`torch.jit`: TorchScript compiles Python functions and modules for PyTorch's C++ runtime.
tracegrad runs the Python itself (and compiles whole training steps with `torch.compile`), so
`script` and `trace` give back what they are given, which computes what the scripted one would;
the annotations are accepted. `save` pickles the module whole in a checkpoint that `load` reads
back here (a TorchScript archive holds compiled code tracegrad does not run: it is refused)."""

from __future__ import annotations

import builtins
import os
import types
import typing
import zipfile
from collections.abc import Callable
from typing import IO, Any, Final  # noqa: F401 (torch.jit.Final is typing's Final)

from tracegrad.frontend import serialization
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.futures import Future

__all__ = ["Attribute", "Final", "ScriptModule", "annotate", "export", "ignore", "interface",
           "is_scripting", "is_tracing", "isinstance", "load", "save", "script", "trace",
           "unused"]  # fmt: skip


def script(obj: Any = None, optimize: Any = None, _frames_up: int = 0, _rcb: Any = None,
           example_inputs: Any = None) -> Any:  # fmt: skip
    """The function or module itself: it runs as Python."""
    return obj


def trace(func: Any, example_inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The function or module itself. Unlike a TorchScript trace it keeps its Python control
    flow, so it computes what `func` computes for every input, not only the traced path."""
    return func


def _decorator(fn: Callable | None = None, **options: Any) -> Any:
    return fn if callable(fn) else (lambda f: f)


ignore = unused = export = _decorator


def interface(obj: Any) -> Any:
    """The class itself: a TorchScript interface is a type annotation to Python."""
    return obj


script_method = interface  # the legacy ScriptModule's method decorator: the method itself


def isinstance(obj: Any, target_type: Any) -> bool:  # noqa: A001 (PyTorch's name)
    """Python's isinstance that also checks what typed containers hold (`List[int]`,
    `Dict[str, Tensor]`, `Tuple[int, str]`, `Optional[...]`), as TorchScript's refinement."""
    if builtins.isinstance(target_type, tuple):
        return any(isinstance(obj, t) for t in target_type)
    origin, args = typing.get_origin(target_type), typing.get_args(target_type)
    if origin is None:
        return builtins.isinstance(obj, target_type)
    if origin in (typing.Union, types.UnionType):
        return any(isinstance(obj, t) for t in args)
    if not builtins.isinstance(obj, origin):
        return False
    if origin is dict:
        return all(isinstance(k, args[0]) and isinstance(v, args[1]) for k, v in obj.items())
    if origin is tuple:
        return len(obj) == len(args) and all(map(isinstance, obj, args))
    return all(isinstance(x, args[0]) for x in obj)  # a list


def Attribute(value: Any, type: Any = None) -> Any:  # noqa: N802, A002 (PyTorch's names)
    """The value itself (TorchScript's type annotation of a module attribute)."""
    return value


def _script_if_tracing(fn: Callable) -> Callable:
    """The function itself: PyTorch scripts it only under a TorchScript trace."""
    return fn


def _overload_method(fn: Callable) -> Callable:
    """A typed signature for TorchScript; the plain definition after it is what runs."""
    return fn


_overload = _overload_method


def annotate(the_type: Any, the_value: Any) -> Any:
    return the_value


def fork(func: Callable, *args: Any, **kwargs: Any) -> Future:
    """`func(*args, **kwargs)` run now (TorchScript's task parallelism, which interpreted code
    runs in order), as a completed future for `wait`; an exception is the future's."""
    future: Future = Future()
    try:
        future.set_result(func(*args, **kwargs))
    except Exception as error:  # noqa: BLE001 (waiting raises it, as PyTorch's)
        future.set_exception(error)
    return future


def wait(future: Future) -> Any:
    return future.wait()


def is_scripting() -> bool:
    return False


def is_tracing() -> bool:
    return False


_SAVED = "tracegrad.jit.save"  # the key of what `save` wrote


def save(m: Any, f: str | os.PathLike | IO[bytes], _extra_files: dict | None = None) -> None:
    """The (scripted, so plain) module `m` pickled whole, with `_extra_files` ({name: content}),
    for `load` in tracegrad."""
    serialization.save({_SAVED: m, "extra_files": dict(_extra_files or {})}, f)


def load(f: str | os.PathLike | IO[bytes], map_location: Any = None,
         _extra_files: dict | None = None) -> Any:  # fmt: skip
    """The module `save` wrote; `_extra_files`' names are filled with their contents."""
    if _is_torchscript(f):
        raise RuntimeError(
            f"torch.jit.load: {f!r} is a TorchScript archive (compiled code, which tracegrad "
            "does not run); build the model in Python and load its state_dict instead"
        )
    saved = serialization.load(f, map_location=map_location, weights_only=False)
    if not (builtins.isinstance(saved, dict) and _SAVED in saved):
        raise RuntimeError(f"torch.jit.load: {f!r} was not written by torch.jit.save")
    if _extra_files is not None:
        _extra_files.update({k: saved["extra_files"].get(k, "") for k in _extra_files})
    return saved[_SAVED]


def _is_torchscript(f: Any) -> bool:
    """Whether `f` is a zip with TorchScript's code/ folder (a file object is rewound)."""
    start = f.tell() if hasattr(f, "tell") else None
    try:
        with zipfile.ZipFile(f) as archive:
            return any("/code/" in name for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False
    finally:
        if start is not None:
            f.seek(start)


class ScriptModule:
    """TorchScript's compiled module, for isinstance checks (lightning's): nothing here is one,
    since `script` gives the module back as it is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torch.jit.ScriptModule is not provided by tracegrad (TorchScript is not: "
            "torch.jit.script returns its argument)"
        )


ScriptFunction = RecursiveScriptModule = ScriptModule


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

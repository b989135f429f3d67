"""`torch.jit`: TorchScript compiles Python functions and modules for PyTorch's C++ runtime.
tracegrad runs the Python itself (and compiles whole training steps with `torch.compile`), so
`script` and `trace` give back what they are given, which computes what the scripted one would;
the annotations are accepted. Saving and loading TorchScript archives is not provided."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final  # noqa: F401 (torch.jit.Final is typing's Final)

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.futures import Future

__all__ = ["Final", "ScriptModule", "annotate", "export", "ignore", "is_scripting",
           "is_tracing", "script", "trace", "unused"]  # fmt: skip


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

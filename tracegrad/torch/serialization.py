"""`torch.serialization`: `save` and `load` (PyTorch's checkpoint files), and PyTorch's
allow-list of classes that loading a checkpoint may rebuild (timm's hold its training
`argparse.Namespace`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import IO, Any

from tracegrad.frontend.serialization import load, save
from tracegrad.frontend.torch_checkpoint import SAFE_GLOBALS
from tracegrad.torch._support import not_provided as _not_provided

# PyTorch's constants of the format (monai passes DEFAULT_PROTOCOL to save)
DEFAULT_PROTOCOL, PROTOCOL_VERSION, MAGIC_NUMBER = 2, 1001, 0x1950A86A20F9469CFC6C
LONG_SIZE, INT_SIZE, SHORT_SIZE, STORAGE_KEY_SEPARATOR = 8, 4, 2, ","
# PyTorch's annotations of `load`'s arguments (pyro annotates with them)
FILE_LIKE = str | os.PathLike | IO[bytes]
MAP_LOCATION = Callable[[Any, str], Any] | str | dict[str, str] | None

__all__ = ["DEFAULT_PROTOCOL", "FILE_LIKE", "MAP_LOCATION", "add_safe_globals",
           "clear_safe_globals", "get_safe_globals", "load", "safe_globals", "save"]  # fmt: skip


def add_safe_globals(safe_globals: list[Any]) -> None:
    """Allow these classes (or (class, "module.name") pairs) in PyTorch checkpoints."""
    for entry in safe_globals:
        cls, full = entry if isinstance(entry, tuple) else (entry, None)
        module, name = full.rpartition(".")[::2] if full else (cls.__module__, cls.__qualname__)
        SAFE_GLOBALS[module, name] = cls


def get_safe_globals() -> list[Any]:
    return list(SAFE_GLOBALS.values())


def clear_safe_globals() -> None:
    SAFE_GLOBALS.clear()


@contextlib.contextmanager
def safe_globals(safe_globals: list[Any]) -> Iterator[None]:
    """Allow these classes while the block runs."""
    before = dict(SAFE_GLOBALS)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        SAFE_GLOBALS.clear()
        SAFE_GLOBALS.update(before)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

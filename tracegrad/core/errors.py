"""The errors tracegrad raises for the user's mistakes, and where in the user's code they were made.

Part of the core: it imports nothing of tracegrad, so the op table can raise them.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np

# Frames of these packages (and of generated plans) are ours: errors point past them.
INTERNAL_PACKAGES = frozenset({"tracegrad", "passes"})
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__))  # contextlib, functools, ...


class TraceError(RuntimeError):
    """A traced function needed a concrete value (Python control flow on a tensor, .item()).
    Names the user's line that asked, where the message does not (a library's line, when the
    refusal is deep in code the user called: torch_geometric's masking of self-loops)."""

    def __init__(self, message: str = ""):
        where = user_location()
        if where is not None and "(at " not in message and f"at {where}" not in message:
            message = f"{message} (at {where})"
        super().__init__(message)


class RangeError(ValueError, IndexError):
    """A value outside what an op accepts (an embedding's index, a class label): an IndexError
    too, as PyTorch raises for it."""


class ShapeError(ValueError, RuntimeError):
    """Operands whose shapes or dtypes an op cannot take; names the op, the shapes and the user's
    source line. A RuntimeError too, as PyTorch raises for the same mistakes."""

    def __init__(self, message: str):
        super().__init__(f"{message} (at {user_location()})")


class IndexShapeError(ShapeError, IndexError):
    """An index that does not fit the tensor (index arrays that do not broadcast together, more
    indices than axes): an IndexError too, as PyTorch raises for it."""


class LinAlgError(np.linalg.LinAlgError, RuntimeError):
    """A matrix a linear algebra op cannot take: singular where it is inverted or solved with,
    not positive definite where it is factored, a factorization that does not converge.
    PyTorch's `torch.linalg.LinAlgError` (a RuntimeError), and NumPy's `LinAlgError` too, which
    code written for NumPy catches."""


class MemoryBudgetError(MemoryError):
    """A memory budget no plan of the step fits: `minimum` is the smallest planned peak (bytes)
    the solver reached, and the message names the values that dominate it with their user
    lines."""

    def __init__(self, message: str, minimum: int):
        super().__init__(message)
        self.minimum = minimum


def module_name(namespace: dict) -> str:
    """The name of the module whose globals `namespace` is, by its spec: tracegrad.torch
    answers `__name__` "torch" while it stands for torch, and stays tracegrad's own."""
    return getattr(namespace.get("__spec__"), "name", None) or namespace.get("__name__", "")


def _internal(frame) -> bool:
    module = module_name(frame.f_globals)
    if module.split(".")[0] in INTERNAL_PACKAGES or frame.f_code.co_filename.startswith(
        ("<tracegrad", "<frozen ")  # the import system's frames are frozen modules
    ):
        return True
    path = os.path.abspath(frame.f_code.co_filename)
    return path.startswith(_STDLIB_DIR) and "site-packages" not in path


def user_frame() -> Any:
    """The innermost frame outside tracegrad: where the user's code called us (or None)."""
    frame = sys._getframe(1)
    while frame is not None and _internal(frame):
        frame = frame.f_back
    return frame


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the user's line (the innermost frame outside tracegrad), however deep in
    tracegrad the warning is raised."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and _internal(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level - 1 if frame is None else level)


def user_location() -> str | None:
    """The innermost "file:line" outside tracegrad: where the user's code called us."""
    frame = user_frame()
    if frame is None:
        return None
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"

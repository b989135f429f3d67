"""Checkpoints: `save(state, path)` and `load(path)` for nested dicts of arrays and numbers.

The file is an ordinary `.npz`: each array is a member `a0`, `a1`, ...; the dict structure and the
Python scalars live in a JSON manifest (member `__tracegrad__`), so nothing is pickled and loading
runs with `allow_pickle=False`. `save` writes a temporary file beside the target and renames it
over the target, so a crash mid-write never leaves a torn checkpoint.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from tracegrad.frontend.tensor import Tensor

MANIFEST = "__tracegrad__"
FORMAT = "tracegrad-checkpoint"
VERSION = 1
ZIP_MAGIC = b"PK\x03\x04"
# what NumPy, zipfile and json raise on a damaged file or a malformed manifest
_READ_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    zipfile.BadZipFile,
)


class CheckpointError(ValueError):
    """A file that is not a readable tracegrad checkpoint (corrupt, truncated or foreign)."""


def save(state: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write `state` (nested dicts of Tensors, arrays, numbers, strings, lists of numbers) to
    `path` atomically. Tensors are stored as their arrays; `load` gives back ndarrays."""
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(state, arrays, "state")
    if tree[0] != "dict":
        raise TypeError(f"save: state must be a dict, not {type(state).__name__}")
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".npz")
    except OSError as e:  # name the user's path, not the temporary file's
        why = e.strerror if os.path.isdir(directory) else f"no directory {directory}"
        raise type(e)(e.errno, f"save: cannot write the checkpoint ({why})", path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{MANIFEST: np.array(manifest)}, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode())  # mkstemp made it private; give it a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _default_mode() -> int:
    """0o666 less the umask, read without setting it (os.umask would change it for every
    thread for a moment: another thread's new file got mode 0666)."""
    try:
        with open("/proc/self/status") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = 0o022  # the usual one, where the kernel does not say
    return 0o666 & ~umask


def _encode(value: Any, arrays: dict[str, np.ndarray], where: str) -> list:
    """A JSON tree: ["dict", {key: tree}], ["array", member] or ["value", scalar/list]."""
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"save: key {key!r} in {where} is not a string")
        return ["dict", {k: _encode(v, arrays, f"{where}[{k!r}]") for k, v in value.items()}]
    if isinstance(value, Tensor | np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(f"save: {where} is an object array, which cannot be saved unpickled")
        member = f"a{len(arrays)}"
        arrays[member] = array
        return ["array", member]
    if _is_plain(value) or (
        isinstance(value, list | tuple) and all(_is_plain(v) and v is not None for v in value)
    ):
        return ["value", list(value) if isinstance(value, tuple) else value]
    raise TypeError(
        f"save: {where} is a {type(value).__name__}; checkpoints hold dicts, tensors, arrays, "
        "numbers, strings and lists of numbers"
    )


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def load(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by `save`: nested dicts with ndarrays where tensors were."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        if f.read(4) != ZIP_MAGIC:
            raise CheckpointError(f"{path} is not a tracegrad checkpoint (not an .npz file)")
    try:
        with np.load(path, allow_pickle=False) as data:
            if MANIFEST not in data.files:
                raise CheckpointError(f"{path} is an .npz file but not a tracegrad checkpoint")
            manifest = json.loads(str(data[MANIFEST]))
            if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
                raise CheckpointError(f"{path}: unsupported checkpoint format")
            return _decode(manifest["tree"], data)
    except CheckpointError:
        raise
    except _READ_ERRORS as e:
        raise CheckpointError(
            f"{path} is not a readable tracegrad checkpoint ({type(e).__name__}: {e})"
        ) from e


def _decode(tree: list, npz: Any) -> Any:
    kind, body = tree
    if kind == "dict":
        return {k: _decode(v, npz) for k, v in body.items()}
    if kind == "array":
        return npz[body]
    if kind == "value":
        return body
    raise CheckpointError(f"unknown entry kind {kind!r} in the checkpoint manifest")

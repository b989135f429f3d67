"""Checkpoints: `save(obj, path)` and `load(path)`, PyTorch's `torch.save` and `torch.load`.

`save` writes PyTorch's own format (a zip holding a pickle whose tensors point at raw storages;
`torch_checkpoint`), so PyTorch loads what tracegrad saves and the other way round; tensors
sharing memory (a tied weight under two names) share one storage. `save` to a path writes a
temporary file beside the target and renames it over the target, so a crash mid-write never
leaves a torn checkpoint.

`load` reads as PyTorch's `weights_only=True` (the default since PyTorch 2.6): the pickle may
name only tensors, containers, numbers and arrays; anything else is refused, so no code from the
file runs. `weights_only=False` trusts the file, as PyTorch's does (a whole module saved).
Checkpoints tracegrad wrote before (an `.npz` with a JSON manifest) load too. PyTorch's older
plain pickles are refused: `PICKLE_ADVICE` says how to convert one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import tempfile
import zipfile
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from tracegrad.frontend import torch_checkpoint
from tracegrad.frontend.device import require_cpu
from tracegrad.frontend.tensor import Tensor

MANIFEST = "__tracegrad__"
FORMAT = "tracegrad-checkpoint"
VERSION = 2  # 1: only dicts with string keys, tensors loaded as ndarrays, tuples as lists
ZIP_MAGIC = b"PK\x03\x04"
PICKLE_MAGIC = b"\x80"  # pickle's PROTO opcode, the first byte of protocols 2 and later
PICKLE_ADVICE = (
    "tracegrad reads PyTorch's zip checkpoints, not its legacy format. Convert it once where "
    "PyTorch is installed: `torch.save(torch.load(path, weights_only=True), 'model.pt')` "
    "writes the zip, then `tracegrad.load('model.pt')`"
)
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
    """A file that is not a readable checkpoint (corrupt, truncated or foreign)."""


def save(obj: Any, path: str | os.PathLike | IO[bytes], pickle_module: Any = pickle,
         pickle_protocol: int = 2, _use_new_zipfile_serialization: bool = True,
         _disable_byteorder_record: bool = False) -> None:  # fmt: skip
    """Write `obj` (what a pickle takes: state dicts, tensors, arrays, numbers, a whole module)
    as PyTorch's checkpoint to `path` atomically, or to a binary file object. PyTorch's
    options: the pickle protocol is taken; another pickle module and the legacy format are
    refused (tracegrad writes the zip checkpoint with Python's pickle)."""
    if pickle_module is not pickle:
        name = getattr(pickle_module, "__name__", pickle_module)
        raise NotImplementedError(f"save: pickle_module={name}: tracegrad writes checkpoints "
                                  "with Python's pickle only")  # fmt: skip
    if not _use_new_zipfile_serialization:
        raise NotImplementedError("save: PyTorch's legacy (pre-1.6) format is not written; "
                                  "tracegrad writes the zip checkpoint")  # fmt: skip
    write = functools.partial(torch_checkpoint.write, protocol=pickle_protocol)
    if hasattr(path, "write"):
        write(obj, path)
        return
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pt")
    except OSError as e:  # name the user's path, not the temporary file's
        why = e.strerror if os.path.isdir(directory) else f"no directory {directory}"
        raise type(e)(e.errno, f"save: cannot write the checkpoint ({why})", path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(obj, f)
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


def load(
    path: str | os.PathLike | IO[bytes], map_location: Any = None, weights_only: Any = None,
    mmap: bool | None = None,
) -> Any:  # fmt: skip
    """Read a checkpoint (`save`'s, PyTorch's, or tracegrad's older `.npz`) from a path or a
    seekable binary file object.

    `map_location` may name the CPU (or be a dict or function, ignored): everything loads there.
    `weights_only` (True unless False is given, as since PyTorch 2.6): only tensors, containers,
    numbers and arrays; False trusts the file: the classes and functions it names are imported
    and run (a whole module saved). `mmap` is accepted: the tensors are read into memory either
    way (PyTorch maps the file instead)."""
    if isinstance(map_location, str) or hasattr(map_location, "type"):
        require_cpu(map_location, "load(map_location=...)")
    if hasattr(path, "read"):
        name = str(getattr(path, "name", type(path).__name__))
        start = path.tell()
        head = path.read(4)
        path.seek(start)
        return _read(path, head, name, weights_only is False)
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(4)
    return _read(path, head, path, weights_only is False)


def _read_torch(source: Any, name: str, trusted: bool) -> Any:
    """A PyTorch zip checkpoint, its pickle read with only tensors and containers allowed
    unless `trusted`."""
    if hasattr(source, "seek"):
        source.seek(0)
    try:
        return torch_checkpoint.read(source, trusted)
    except torch_checkpoint.Refused as e:
        raise CheckpointError(f"{name}: {e}") from None
    except (*_READ_ERRORS, pickle.UnpicklingError) as e:
        raise CheckpointError(f"{name} is a damaged checkpoint ({e})") from None


def _read(source: Any, head: bytes, name: str, trusted: bool) -> Any:
    if head.startswith(PICKLE_MAGIC):
        raise CheckpointError(f"{name} is a Python pickle (PyTorch's legacy .pt format?): "
                              + PICKLE_ADVICE)  # fmt: skip
    if head != ZIP_MAGIC:
        raise CheckpointError(f"{name} is not a checkpoint (not a zip file)")
    try:
        with np.load(source, allow_pickle=False) as data:
            if MANIFEST not in data.files:
                if torch_checkpoint.is_torch_checkpoint(data.files):
                    return _read_torch(source, name, trusted)
                raise CheckpointError(f"{name} is a zip file but not a checkpoint")
            manifest = json.loads(str(data[MANIFEST]))
            if manifest.get("format") != FORMAT or manifest.get("version") not in (1, VERSION):
                raise CheckpointError(f"{name}: unsupported checkpoint format")
            return _decode(manifest["tree"], _cached(data))
    except CheckpointError:
        raise
    except _READ_ERRORS as e:
        raise CheckpointError(
            f"{name} is not a readable checkpoint ({type(e).__name__}: {e})"
        ) from e


def _cached(npz: Any) -> Callable[[str], np.ndarray]:
    """Member -> its array, read once: tensors saved as one array share one array again."""
    arrays: dict[str, np.ndarray] = {}

    def array(member: str) -> np.ndarray:
        if member not in arrays:
            arrays[member] = npz[member]
        return arrays[member]

    return array


def _decode(tree: list, array: Callable[[str], np.ndarray]) -> Any:
    kind, body, *rest = tree
    if kind == "dict":  # version 1 wrote {key: tree}
        items = body.items() if isinstance(body, dict) else body
        return {k: _decode(v, array) for k, v in items}
    if kind in ("list", "tuple"):
        items = [_decode(v, array) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "tensor":
        return Tensor._of(array(body), requires_grad=rest[0])
    if kind == "array":
        return array(body)
    if kind == "scalar":
        return array(body)[()]
    if kind == "value":
        return body
    if kind == "namespace":
        return argparse.Namespace(**_decode(body, array))
    raise CheckpointError(f"unknown entry kind {kind!r} in the checkpoint manifest")

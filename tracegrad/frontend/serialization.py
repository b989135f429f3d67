"""Checkpoints: `save(obj, path)` and `load(path)`, for what PyTorch scripts save with
torch.save: state dicts, dicts of them, lists, tuples, numbers, strings and None, holding tensors
and arrays. `load` gives back tensors where tensors went in, ndarrays where ndarrays went in.

The file is an ordinary `.npz`: each array is a member `a0`, `a1`, ...; the structure and the
Python scalars live in a JSON manifest (member `__tracegrad__`), so nothing is pickled and loading
runs with `allow_pickle=False`. Tensors that share one array (a tied weight listed under two names
in a state dict) are stored once and share one array again when loaded. `save` to a path writes a
temporary file beside the target and renames it over the target, so a crash mid-write never
leaves a torn checkpoint.

PyTorch's own files are pickles. Its zip checkpoints (what `torch.save` writes) load as PyTorch's
`weights_only=True` loads them: a pickle that names only tensors and containers
(`torch_checkpoint`); anything else it names is refused, so no code from the file runs. Its
older plain pickles are refused: `PICKLE_ADVICE` says how to convert one.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import zipfile
from collections.abc import Callable, Mapping
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
    "tracegrad does not load pickles, because unpickling runs whatever code the file holds. "
    "Convert it once where PyTorch is installed: "
    "`tracegrad.save(torch.load(path, weights_only=True), 'model.npz')` (it stores torch's "
    "tensors as arrays, nothing pickled), then `tracegrad.load('model.npz')`"
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
    """A file that is not a readable tracegrad checkpoint (corrupt, truncated or foreign)."""


def save(obj: Any, path: str | os.PathLike | IO[bytes]) -> None:
    """Write `obj` (tensors, arrays, numbers, strings, None, and dicts, lists and tuples of them;
    PyTorch's tensors are stored as arrays) to `path` atomically, or to a binary file object."""
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(obj, _Store(arrays), "obj")
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    if hasattr(path, "write"):
        np.savez(path, **{MANIFEST: np.array(manifest)}, **arrays)
        return
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


class _Store:
    """Gives each distinct array a member name; arrays viewing the same memory alike (a tied
    weight reached by two names) get the same one."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays, self.members = arrays, {}

    def __call__(self, array: np.ndarray, where: str) -> str:
        if array.dtype.hasobject:
            raise TypeError(f"save: {where} is an object array, which cannot be saved unpickled")
        key = (array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str)
        if key not in self.members:
            self.members[key] = f"a{len(self.arrays)}"
            self.arrays[self.members[key]] = array  # held, so its address is not reused
        return self.members[key]


def _encode(value: Any, store: _Store, where: str) -> list:
    """A JSON tree: ["dict", [[key, tree], ...]], ["list" or "tuple", [tree, ...]],
    ["tensor", member, requires_grad], ["array", member], ["scalar", member] (a NumPy scalar)
    or ["value", a Python scalar]."""
    if isinstance(value, Mapping):
        return ["dict", [[_key(k, where), _encode(v, store, f"{where}[{k!r}]")]
                         for k, v in value.items()]]  # fmt: skip
    if isinstance(value, Tensor):
        return ["tensor", store(value.numpy(), where), value.requires_grad]
    if _is_torch_tensor(value):
        return ["tensor", store(value.detach().cpu().numpy(), where), bool(value.requires_grad)]
    if isinstance(value, np.ndarray):
        return ["array", store(value, where)]
    if isinstance(value, np.generic):
        return ["scalar", store(np.asarray(value), where)]
    if _is_plain(value):
        return ["value", value]
    if isinstance(value, argparse.Namespace):  # a training script's arguments (timm's)
        return ["namespace", _encode(vars(value), store, where)]
    if isinstance(value, list | tuple):
        items = [_encode(v, store, f"{where}[{i}]") for i, v in enumerate(value)]
        return ["tuple" if isinstance(value, tuple) else "list", items]
    if hasattr(value, "state_dict"):
        raise TypeError(
            f"save: {where} is a {type(value).__name__}; save its state_dict() instead (a module "
            "or optimizer itself would need pickling)"
        )
    raise TypeError(
        f"save: {where} is a {type(value).__name__}; checkpoints hold tensors, arrays, numbers, "
        "strings, None, argparse Namespaces, and dicts, lists and tuples of them"
    )


def _key(key: Any, where: str) -> Any:
    if not _is_plain(key):
        raise TypeError(
            f"save: key {key!r} in {where} is a {type(key).__name__}; keys must be strings, "
            "numbers, booleans or None"
        )
    return key


def _is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.partition(".")[0] == "torch" and hasattr(value, "detach")


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def load(
    path: str | os.PathLike | IO[bytes], map_location: Any = None, weights_only: Any = None,
    mmap: bool | None = None,
) -> Any:  # fmt: skip
    """Read a checkpoint written by `save`, from a path or a seekable binary file object: tensors
    where tensors were saved (ndarrays for files written before tensors were told apart).

    `map_location` may name the CPU (or be a dict or function, ignored): everything loads there.
    `weights_only` is accepted for PyTorch's sake; nothing is ever unpickled. `mmap` too: the
    tensors are read into memory either way (PyTorch maps the file instead)."""
    if isinstance(map_location, str) or hasattr(map_location, "type"):
        require_cpu(map_location, "load(map_location=...)")
    if hasattr(path, "read"):
        name = str(getattr(path, "name", type(path).__name__))
        start = path.tell()
        head = path.read(4)
        path.seek(start)
        return _read(path, head, name)
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(4)
    return _read(path, head, path)


def _read_torch(source: Any, name: str) -> Any:
    """A PyTorch zip checkpoint, its pickle read with only tensors and containers allowed."""
    if hasattr(source, "seek"):
        source.seek(0)
    try:
        return torch_checkpoint.read(source)
    except torch_checkpoint.Refused as e:
        raise CheckpointError(f"{name}: {e}") from None
    except (*_READ_ERRORS, pickle.UnpicklingError) as e:
        raise CheckpointError(f"{name} is a damaged PyTorch checkpoint ({e})") from None


def _read(source: Any, head: bytes, name: str) -> Any:
    if head.startswith(PICKLE_MAGIC):
        raise CheckpointError(f"{name} is a Python pickle (PyTorch's legacy .pt format?): "
                              + PICKLE_ADVICE)  # fmt: skip
    if head != ZIP_MAGIC:
        raise CheckpointError(f"{name} is not a tracegrad checkpoint (not an .npz file)")
    try:
        with np.load(source, allow_pickle=False) as data:
            if MANIFEST not in data.files:
                if torch_checkpoint.is_torch_checkpoint(data.files):
                    return _read_torch(source, name)
                raise CheckpointError(f"{name} is an .npz file but not a tracegrad checkpoint")
            manifest = json.loads(str(data[MANIFEST]))
            if manifest.get("format") != FORMAT or manifest.get("version") not in (1, VERSION):
                raise CheckpointError(f"{name}: unsupported checkpoint format")
            return _decode(manifest["tree"], _cached(data))
    except CheckpointError:
        raise
    except _READ_ERRORS as e:
        raise CheckpointError(
            f"{name} is not a readable tracegrad checkpoint ({type(e).__name__}: {e})"
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

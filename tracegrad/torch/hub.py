"""`torch.hub`, as PyTorch's: weights downloaded once into a cache (`load_state_dict_from_url`:
torchvision's and timm's pretrained models) and models built by a repository's `hubconf.py`
(`load`, `list`, `help`), from a local directory or a GitHub repository downloaded into the
cache. The files are PyTorch's checkpoints, which `torch.load` reads. Its progress bar and the
names libraries import from it (timm's `HASH_REGEX`, `urlparse`) are here too."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import types
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import urlparse

from tracegrad.frontend.serialization import load as _load_checkpoint
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["HASH_REGEX", "download_url_to_file", "get_dir", "help", "list", "load",
           "load_state_dict_from_url", "set_dir", "tqdm"]  # fmt: skip

HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")  # PyTorch's: the hash in a checkpoint's file name
_CHUNK = 1 << 16

try:
    from tqdm import tqdm
except ImportError:  # PyTorch's hub has the same fallback: a bar that draws nothing

    class tqdm:  # type: ignore[no-redef] # noqa: N801 (tqdm's name)
        """Iterates over `iterable`; counts `update(n)` calls, draws nothing."""

        def __init__(self, iterable: Iterable | None = None, *args: Any, **kwargs: Any):
            self.iterable, self.n = iterable, 0

        def __iter__(self) -> Iterator:
            yield from self.iterable or ()

        def update(self, n: int = 1) -> None:
            self.n += n

        def set_description(self, *args: Any, **kwargs: Any) -> None:
            pass

        set_postfix = set_description

        def close(self) -> None:
            pass

        def __enter__(self) -> tqdm:
            return self

        def __exit__(self, *exc: Any) -> None:
            pass


_dir = [os.path.join(os.path.expanduser(os.getenv("TORCH_HOME", "~/.cache/torch")), "hub")]


def get_dir() -> str:
    """Where PyTorch keeps downloaded models: `$TORCH_HOME/hub`, or as set by `set_dir`."""
    return _dir[0]


def set_dir(d: str) -> None:
    _dir[0] = os.path.expanduser(d)


def _get_torch_home() -> str:
    return os.path.dirname(get_dir())


# --- downloads -------------------------------------------------------------------------------


def download_url_to_file(
    url: str, dst: str, hash_prefix: str | None = None, progress: bool = True
) -> None:
    """Download `url` to `dst` through a temporary file beside it, so that an interrupted
    download never leaves a file the cache would take for whole; if `hash_prefix` is given, the
    file's SHA-256 must start with it."""
    dst = os.path.abspath(os.path.expanduser(dst))
    request = urllib.request.Request(url, headers={"User-Agent": "torch.hub"})
    with urllib.request.urlopen(request) as response:
        size = response.headers.get("Content-Length") if hasattr(response, "headers") else None
        digest = hashlib.sha256()
        fd, partial = tempfile.mkstemp(prefix=os.path.basename(dst) + ".",
                                       suffix=".partial", dir=os.path.dirname(dst))  # fmt: skip
        try:
            with os.fdopen(fd, "wb") as f, tqdm(total=int(size) if size else None,
                                                disable=not progress, unit="B",
                                                unit_scale=True) as bar:  # fmt: skip
                while chunk := response.read(_CHUNK):
                    f.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
            if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
                raise RuntimeError(
                    f'invalid hash value (expected "{hash_prefix}", got "{digest.hexdigest()}")'
                )
            shutil.move(partial, dst)
        finally:
            if os.path.exists(partial):
                os.remove(partial)


def load_state_dict_from_url(
    url: str, model_dir: str | None = None, map_location: Any = None, progress: bool = True,
    check_hash: bool = False, file_name: str | None = None, weights_only: bool = False,
) -> Any:  # fmt: skip
    """The checkpoint at `url`, downloaded into `model_dir` (`get_dir()/checkpoints`) the first
    time and read from there after. `check_hash` holds a download to the hash its file name
    carries (`resnet18-f37072fd.pth`: the SHA-256 begins f37072fd)."""
    model_dir = os.path.expanduser(model_dir or os.path.join(get_dir(), "checkpoints"))
    os.makedirs(model_dir, exist_ok=True)
    cached = os.path.join(model_dir, file_name or os.path.basename(urlparse(url).path))
    if not os.path.exists(cached):
        sys.stderr.write(f'Downloading: "{url}" to {cached}\n')
        match = HASH_REGEX.search(os.path.basename(cached)) if check_hash else None
        download_url_to_file(url, cached, match.group(1) if match else None, progress=progress)
    if _is_legacy_zip(cached):  # PyTorch's older releases zipped a single checkpoint
        with zipfile.ZipFile(cached) as z:
            (member,) = z.infolist()
            z.extractall(model_dir)
        cached = os.path.join(model_dir, member.filename)
    return _load_checkpoint(cached, map_location=map_location, weights_only=weights_only)


def _is_legacy_zip(path: str) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        entries = z.infolist()
    return len(entries) == 1 and not entries[0].is_dir()


# --- hubconf.py entry points -------------------------------------------------------------------


def load(
    repo_or_dir: str, model: str, *args: Any, source: str = "github",
    trust_repo: bool | str | None = None, force_reload: bool = False, verbose: bool = True,
    skip_validation: bool = False, **kwargs: Any,
) -> Any:  # fmt: skip
    """`model(*args, **kwargs)`, the entry point of `repo_or_dir`'s `hubconf.py`: a local
    directory (`source="local"`) or "owner/name[:ref]" on GitHub, downloaded into the cache the
    first time (and again with `force_reload`)."""
    if source not in ("github", "local"):
        raise ValueError(f'Unknown source: "{source}". Allowed values: "github" | "local".')
    if source == "github":
        repo_or_dir = _repository(repo_or_dir, force_reload, trust_repo, verbose)
    with _hubconf(repo_or_dir) as hub:
        return _entry(hub, model)(*args, **kwargs)


def list(  # noqa: A001 (PyTorch's name)
    github: str, force_reload: bool = False, skip_validation: bool = False,
    trust_repo: bool | str | None = None, verbose: bool = True,
) -> builtins.list[str]:  # fmt: skip
    """The entry points `github`'s `hubconf.py` defines (its public callables)."""
    with _hubconf(_repository(github, force_reload, trust_repo, verbose)) as hub:
        return [n for n in dir(hub) if callable(getattr(hub, n)) and not n.startswith("_")]


def help(  # noqa: A001 (PyTorch's name)
    github: str, model: str, force_reload: bool = False, skip_validation: bool = False,
    trust_repo: bool | str | None = None,
) -> str | None:  # fmt: skip
    """The docstring of `github`'s entry point `model`."""
    with _hubconf(_repository(github, force_reload, trust_repo, True)) as hub:
        return _entry(hub, model).__doc__


@contextlib.contextmanager
def _hubconf(directory: str) -> Iterator[types.ModuleType]:
    """`directory/hubconf.py` imported, with `directory` first on the import path while it is
    used (its entry points import the repository's modules), after checking that the packages
    its `dependencies` names import."""
    path = os.path.join(directory, "hubconf.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no hubconf.py in {directory}")
    sys.path.insert(0, directory)
    try:
        spec = importlib.util.spec_from_file_location("hubconf", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        needed = getattr(module, "dependencies", [])
        missing = [d for d in needed if importlib.util.find_spec(d) is None]
        if missing:
            raise RuntimeError(f"Missing dependencies: {', '.join(missing)}")
        yield module
    finally:
        sys.path.remove(directory)


def _entry(hub: types.ModuleType, model: str) -> Callable:
    if not isinstance(model, str):
        raise ValueError("Invalid input: model should be a string of function name")
    entry = getattr(hub, model, None)
    if entry is None or not callable(entry):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return entry


def _repository(github: str, force_reload: bool, trust_repo: bool | str | None,
                verbose: bool) -> str:  # fmt: skip
    """The directory of GitHub's "owner/name[:ref]" in the cache (`get_dir()`), downloaded as
    GitHub's zip of the ref if it is not there. Without a ref, the one cached ("main", else
    "master"), or the default branch downloaded ("main", else "master")."""
    owner_name, _, ref = github.partition(":")
    owner, _, name = owner_name.partition("/")
    if not owner or not name:
        raise ValueError(f'Invalid input: repo_or_dir should be "owner/name[:ref]", not {github!r}')
    hub_dir = get_dir()
    os.makedirs(hub_dir, exist_ok=True)
    refs = [ref] if ref else ["main", "master"]
    targets = [os.path.join(hub_dir, f"{owner}_{name}_{r.replace('/', '_')}") for r in refs]
    cached = next((t for t in targets if os.path.exists(t)), None)
    _check_trusted(owner, name, hub_dir, trust_repo, cached is not None)
    if cached is not None and not force_reload:
        if verbose:
            sys.stderr.write(f"Using cache found in {cached}\n")
        return cached
    for r, target in zip(refs, targets, strict=True):
        try:
            _download_repository(f"https://github.com/{owner}/{name}/zipball/{r}", target)
            return target
        except urllib.error.HTTPError as e:
            if ref or e.code != 404:
                raise
    raise ValueError(f"{owner_name} has neither a main nor a master branch; give its ref")


def _download_repository(url: str, target: str) -> None:
    archive = target + ".zip"
    sys.stderr.write(f'Downloading: "{url}" to {archive}\n')
    download_url_to_file(url, archive, progress=False)
    try:
        with zipfile.ZipFile(archive) as z:
            top = z.infolist()[0].filename.split("/")[0]
            z.extractall(os.path.dirname(target))
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(os.path.join(os.path.dirname(target), top), target)
    finally:
        os.remove(archive)


_TRUSTED_OWNERS = ("facebookresearch", "facebookincubator", "pytorch", "fairinternal")


def _check_trusted(owner: str, name: str, hub_dir: str, trust_repo: bool | str | None,
                   cached: bool) -> None:  # fmt: skip
    """PyTorch's rule: a repository is trusted if listed in `hub_dir/trusted_list`, already in
    the cache, or PyTorch's own; `trust_repo=False`, or "check" of one not trusted, asks first.
    Any repository that runs is added to the list."""
    listed = os.path.join(hub_dir, "trusted_list")
    trusted: set[str] = set()
    if os.path.exists(listed):
        with open(listed) as f:
            trusted = {line.strip() for line in f}
    repo = f"{owner}_{name}"
    is_trusted = repo in trusted or cached or owner in _TRUSTED_OWNERS
    if trust_repo is False or (isinstance(trust_repo, str) and not is_trusted):  # "check"
        answer = input(
            f"The repository {repo} does not belong to the list of trusted repositories and as "
            "such cannot be downloaded. Do you trust this repository and wish to add it to the "
            "trusted list of repositories (y/N)?"
        ).lower()
        if answer in ("n", "no", ""):
            raise Exception("Untrusted repository.")  # noqa: TRY002 (PyTorch's exception)
        if answer not in ("y", "yes"):
            raise ValueError(f"Unrecognized response {answer}.")
    if not is_trusted:
        with open(listed, "a") as f:
            f.write(repo + "\n")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

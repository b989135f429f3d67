"""Where generated kernels live: an in-memory dict per process, and `.py` files on disk.

Numba's `cache=True` only works for functions defined in real files, imported as modules that are
in `sys.modules` under their own name before they run. So each kernel is written to
`<cache dir>/<module>.py` and imported from there; Numba keeps its machine code next to it in
`__pycache__`, and a new process loads it instead of compiling. The directory holds code we
execute, so it must be private: created with mode 0700, and one that another user owns is not
used. A file whose text is not exactly the generated source is rewritten, a kernel whose Numba
cache files name another generated module than its own (files swapped or copied between kernels:
Numba would load another kernel's machine code, `sigmoid` computing `tanh`) is compiled afresh,
and so is one whose Numba cache fails to load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numba
import numpy as np
from numba.core.caching import CacheImpl, UserProvidedCacheLocator, _CacheLocator

ENV_VAR = "TRACEGRAD_CACHE_DIR"


class GeneratedKernel:
    """A kernel of its own (`kernels.native`): the compiled function of a generated module, and
    the module's file, whose text is the kernel's `source`."""

    def __init__(self, compiled: Callable, path: Path):
        self.compiled, self.path = compiled, path

    @property
    def source(self) -> str:
        return self.path.read_text()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} at {self.path}>"


def in_c_order(a: np.ndarray) -> np.ndarray:
    """`a` C-contiguous and writeable, as a kernel's typed signature takes it: itself if it is."""
    return a if a.flags.c_contiguous and a.flags.writeable else np.array(a, order="C")


def named(prefix: str, source: str) -> tuple[str, str]:
    """A generated module's name (`tracegrad_<prefix>_<hash of its text>`) and its text."""
    return f"tracegrad_{prefix}_{hashlib.sha256(source.encode()).hexdigest()[:24]}", source


def cache_dir() -> Path:
    """$TRACEGRAD_CACHE_DIR, else $XDG_CACHE_HOME/tracegrad/kernels, else ~/.cache/..."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tracegrad" / "kernels"


def private_dir(path: Path) -> Path:
    """`path`, created with mode 0700 and tightened to it if it is ours; a fresh temporary
    directory (and a warning) if it belongs to someone else, cannot be created or cannot be
    written (a read-only cache would make every process compile every kernel, unsaid)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
        if info.st_uid != os.getuid():
            raise PermissionError(f"{path} belongs to another user")
        if stat.S_IMODE(info.st_mode) != 0o700:
            path.chmod(0o700)
        with tempfile.TemporaryFile(dir=path):
            pass  # writable: EROFS or EACCES would show here
        return path
    except OSError as e:
        fallback = Path(tempfile.mkdtemp(prefix="tracegrad-kernels-"))
        warnings.warn(
            f"tracegrad: kernel cache directory unusable ({e}); compiling into {fallback}, "
            f"which no later process will reuse. Set ${ENV_VAR} to a private directory.",
            RuntimeWarning,
            stacklevel=3,
        )
        return fallback


class KernelCache:
    """Kernels by key: from memory, else from `<directory>/<module>.py` (+ Numba's cache)."""

    def __init__(self, directory: Path):
        self.directory = private_dir(directory)
        self._kernels: dict[str, Callable] = {}
        self._lock = threading.Lock()

    def path(self, module_name: str) -> Path:
        return self.directory / f"{module_name}.py"

    def load(self, module_name: str, source: Callable[[], str]) -> Callable:
        """The `kernel` function of the generated module `module_name` whose text is `source()`
        (called only when the kernel is not in memory yet)."""
        with self._lock:
            if module_name not in self._kernels:
                self._kernels[module_name] = self._load(module_name, source())
            return self._kernels[module_name]

    def _load(self, module_name: str, source: str) -> Callable:
        path = self.path(module_name)
        if _read_text(path) != source:
            _write_atomically(path, source)
        if not self.compiled_for(module_name):
            self.forget_numba_cache(module_name)
        try:
            return _import(module_name, path).kernel
        except Exception as first:  # a truncated or foreign Numba cache entry: drop it, rebuild
            self.forget_numba_cache(module_name)
            try:
                return _import(module_name, path).kernel
            except Exception:
                raise first from None

    def load_all(
        self,
        sources: dict[str, str],
        done: Callable[[], None] = lambda: None,
        background: bool = False,
    ) -> None:
        """Load the kernels of many modules (`{module_name: source}`), calling `done()` after
        each. Numba compiles holding the GIL, so a second core helps only from another process:
        when those not in Numba's disk cache yet would take HELPER_MIN_S or more to compile, a
        child process compiles every other one into it meanwhile. `background=True` (from a
        thread beside a running step) sends them all to children, one per core, so that this
        process keeps its GIL for the step. If a child fails, this process compiles its share
        too; nothing but the time depends on the children."""
        for name, source in sources.items():
            if name not in self._kernels and _read_text(self.path(name)) != source:
                _write_atomically(self.path(name), source)
        cold = [n for n in sources if n not in self._kernels and not self._numba_files(n, ".nbi")]
        cold.sort(key=lambda n: -_compile_seconds(sources[n]))
        cores = os.cpu_count() or 1
        if background:
            shares = _deal(cold, [_compile_seconds(sources[n]) for n in cold],
                           min(cores, MAX_CHILDREN))  # fmt: skip
        elif sum(_compile_seconds(sources[n]) for n in cold) >= HELPER_MIN_S and cores > 1:
            shares = [cold[1::2]]
        else:
            shares = []
        helpers = [h for h in map(self._compile_in_child, filter(None, shares)) if h is not None]
        theirs = {n for share in shares for n in share}
        for name in sorted(sources, key=lambda n: n in theirs):  # ours first, then the children's
            if name in theirs:
                while helpers:
                    _wait(helpers.pop())
            self.load(name, lambda name=name: sources[name])
            done()

    def _compile_in_child(self, names: list[str]) -> subprocess.Popen | None:
        if getattr(sys, "frozen", False) or not sys.executable:
            return None  # sys.executable is not a Python interpreter (a frozen application)
        package_root = str(
            Path(importlib.util.find_spec("tracegrad").origin).parents[1]
        )  # its root
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, ENV_VAR: str(self.directory), "PYTHONPATH": path, **_numba_target()}
        command = [
            sys.executable,
            "-m",
            "tracegrad.compiler.kernels.cache",
            str(self.directory),
            *names,
        ]
        quiet = subprocess.DEVNULL
        try:
            return subprocess.Popen(command, env=env, stdin=quiet, stdout=quiet, stderr=quiet)
        except OSError:
            return None

    def _numba_files(self, module_name: str, suffix: str = "") -> list[Path]:
        """Numba's index and code files for a kernel, wherever Numba keeps them."""
        places = [self.directory / "__pycache__"]
        if numba.config.CACHE_DIR:  # $NUMBA_CACHE_DIR moves every cache there
            subpath = _CacheLocator.get_suitable_cache_subpath(str(self.path(module_name)))
            places.append(Path(numba.config.CACHE_DIR) / subpath)
        # with gufuncs' "guf-" files
        return [f for place in places for f in place.glob(f"*{module_name}.*{suffix}")]

    def compiled_for(self, module_name: str) -> bool:
        """Whether every Numba cache file of the kernel (its index and its machine code) was
        written for this module, whose name is the hash of its source: the names of the
        generated modules they mention must all be its own."""
        for entry in self._numba_files(module_name):
            try:
                named = set(GENERATED_NAME.findall(entry.read_bytes()))
            except OSError:
                continue  # gone meanwhile: Numba compiles
            if named != {module_name.encode()}:
                return False
        return True

    def forget_numba_cache(self, module_name: str) -> None:
        """Delete Numba's index and code files for a kernel."""
        for entry in self._numba_files(module_name):
            entry.unlink(missing_ok=True)


# A generated module's name (`named`) as it appears in Numba's cache files: in the index, the
# names of the code files; in the code, the mangled symbols.
GENERATED_NAME = re.compile(rb"tracegrad_[a-z_]+_[0-9a-f]{24}")


class _FallbackLocator(UserProvidedCacheLocator):
    """Numba's last resort for where to cache a `cache=True` function: under tracegrad's kernel
    cache directory. Without it, a read-only install with an unwritable home directory cannot
    even import tracegrad.compiler.kernels ("no locator available"), whatever
    $TRACEGRAD_CACHE_DIR says."""

    def __init__(self, py_func: Callable, py_file: str):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        subpath = self.get_suitable_cache_subpath(py_file)
        self._cache_path = str(default_cache().directory / "numba" / subpath)

    @classmethod
    def from_function(cls, py_func: Callable, py_file: str) -> _FallbackLocator | None:
        return super(UserProvidedCacheLocator, cls).from_function(py_func, py_file)


if _FallbackLocator not in CacheImpl._locator_classes:
    CacheImpl._locator_classes.append(_FallbackLocator)

# Less compilation than this is not worth starting a child for: the child first imports Numba,
# which takes most of a second. (`_compile_seconds` estimates a plan's compilation.)
HELPER_MIN_S = 2.0
MAX_CHILDREN = 4  # compiling away from a busy process: one child per core, up to this many
HELPER_TIMEOUT_S = 600.0


def _compile_seconds(source: str) -> float:
    """A guess at Numba's time for a module, to deal modules out to children: a fused kernel
    (one function) 0.15 s, 0.5 s if parallel; each further function about 0.6 s (a module of
    many helpers with unrolled loops, such as attention's, takes several seconds)."""
    return (0.5 if "parallel=True" in source else 0.15) + 0.6 * max(0, source.count("\ndef ") - 1)


def _deal(names: list[str], seconds: list[float], children: int) -> list[list[str]]:
    """Longest first, each to the child with the least work so far, so that the children
    finish together: dealt in turn, one child may get several of the longest modules."""
    shares: list[list[str]] = [[] for _ in range(children)]
    loads = [0.0] * children
    for name, cost in sorted(zip(names, seconds, strict=True), key=lambda p: -p[1]):
        k = loads.index(min(loads))
        shares[k].append(name)
        loads[k] += cost
    return shares


_caches: dict[Path, KernelCache] = {}


def _numba_target() -> dict[str, str]:
    """This process's Numba CPU name and features, as the environment of a child that compiles
    kernels for it: Numba's cache keys its machine code by them, and a child choosing its own
    (`kernels._full_width_vectors` runs only before Numba compiles anything) would compile
    kernels this process could not load."""
    from numba.core.registry import cpu_target

    _, name, features = cpu_target.target_context.codegen().magic_tuple()
    return {"NUMBA_CPU_NAME": name, "NUMBA_CPU_FEATURES": features}


def _wait(helper: subprocess.Popen) -> None:
    """Until the child has compiled its kernels (or failed: then this process compiles them)."""
    try:
        helper.wait(timeout=HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        helper.kill()
        helper.wait()


def default_cache() -> KernelCache:
    """The cache for the current `cache_dir()` (read on every call, so tests may switch it)."""
    directory = cache_dir()
    if directory not in _caches:
        _caches[directory] = KernelCache(directory)
    return _caches[directory]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a concurrent process never reads half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _import(module_name: str, path: Path) -> ModuleType:
    """Import a file as `module_name`, registered in sys.modules first (Numba's cache needs it)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


if (
    __name__ == "__main__"
):  # python -m tracegrad.compiler.kernels.cache DIR MODULE...: fill Numba's cache
    for name in sys.argv[2:]:
        _import(name, Path(sys.argv[1]) / f"{name}.py")

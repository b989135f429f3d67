"""The BLAS a plan uses: NumPy's OpenBLAS, its threads kept from spinning through the Numba
kernels between its GEMMs (`quiet_openblas`), and the GEMM routines lent to the Numba kernels
that run a plan's products on Numba's threads (`gemm_symbols`: MKL's where the `mkl` extra is
installed, else OpenBLAS's).

After each call OpenBLAS's worker threads spin for 2**28 cycles (about 0.1 s) waiting for the
next one. A plan runs a Numba kernel between most of its matrix products, and on a machine with
as many cores as threads the spinning workers take the cores the kernel's threads need, unless
they sleep at once (`OPENBLAS_THREAD_TIMEOUT`, 2**TIMEOUT cycles). OpenBLAS reads that variable
when it loads, which is before tracegrad in most scripts (`import numpy` comes first), so
`quiet_openblas` sets it, makes OpenBLAS read its environment again and restarts its idle
threads. A user's own `OPENBLAS_THREAD_TIMEOUT` is kept (and was read at load). (Since the products
moved to Numba's threads, OpenBLAS's own threads only run the products a plan still leaves to
NumPy: batched ones.)"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib.metadata
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
TIMEOUT = 4  # log2 of the cycles an idle worker spins; 4 is OpenBLAS's smallest
_done = threading.Lock()
_state = {"done": False}


def openblas_path() -> str | None:
    """NumPy's OpenBLAS library (Linux: /proc/self/maps), if NumPy uses one: the mapped OpenBLAS
    whose path names numpy (its wheels bundle their own; SciPy's, mapped once SciPy's linear
    algebra is imported, has threads and symbols of its own), else the first mapped."""
    try:
        with open("/proc/self/maps") as maps:
            found = [line.split()[-1] for line in maps]
    except OSError:
        return None
    found = [p for p in found if "openblas" in os.path.basename(p) and ".so" in p]
    return next((p for p in found if "numpy" in p), found[0] if found else None)


def quiet_openblas() -> bool:
    """Make OpenBLAS's idle workers sleep almost at once; True if it did. Once per process, from
    the thread that traces (no BLAS call may run meanwhile: the workers are restarted)."""
    with _done:
        if _state["done"] or VARIABLE in os.environ:
            return False
        _state["done"] = True
        path = openblas_path()
        if path is None:
            return False
        try:
            lib = ctypes.CDLL(path)
            read_env, shutdown = lib.openblas_read_env, lib.blas_thread_shutdown_
        except (OSError, AttributeError):
            return False
        os.environ[VARIABLE] = str(TIMEOUT)
        read_env()
        shutdown()  # the workers start again at the next call, with the new timeout
        return True


# Matrix products on Numba's threads (`kernels.gemm`, the convolutions, attention): each thread
# runs its share through a single-threaded GEMM routine. Intel's MKL (the `mkl` extra) where it
# is installed and runs the shapes plans make faster than OpenBLAS here (`mkl_is_faster`;
# docs/kernels.md, "Which BLAS"); else NumPy's OpenBLAS, its thread count set to one meanwhile. The
# thread-count routines are always NumPy's OpenBLAS's: its own threads must not run inside
# the kernels' threads, whichever library multiplies.
LIBRARY_VARIABLE = "TRACEGRAD_BLAS"  # "openblas" or "mkl": that library, not the faster here
MKL_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL: each call on its caller's thread alone
# How a library names its routines: (prefix, suffix, integer type of the sizes). NumPy's wheels
# are ILP64 with a scipy_ prefix, a system OpenBLAS is LP64; MKL has both, ILP64 with _64.
NAMINGS = (("scipy_", "64_", "int64"), ("", "64_", "int64"), ("", "", "int32"))
MKL_NAMINGS = (("", "_64", "int64"), ("", "", "int32"))
GEMMS = ("cblas_sgemm", "cblas_dgemm")
THREADS = ("openblas_get_num_threads", "openblas_set_num_threads")


def mkl_path() -> str | None:
    """MKL's single dynamic library (libmkl_rt) from the installed `mkl` distribution, or beside
    this Python (a conda environment's), if any."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    found = [str(f.locate()) for f in files if f.name.startswith("libmkl_rt.so")]
    found += sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    return next((p for p in found if os.path.exists(p)), None)


def _named(lib: ctypes.CDLL, routines: tuple[str, ...], namings: tuple) -> tuple[dict, str] | None:
    """{routine: the library's function} and the integer type of its sizes, by the first of
    `namings` under which the library has every routine."""
    for prefix, suffix, ints in namings:
        names = {r: f"{prefix}{r}{suffix}" for r in routines}
        if all(hasattr(lib, name) for name in names.values()):
            return {r: getattr(lib, name) for r, name in names.items()}, ints
    return None


class Routines(NamedTuple):
    """The BLAS routines a plan's kernels call (`gemm_library`)."""

    gemms: dict  # {"cblas_sgemm": function, "cblas_dgemm": function}
    ints: str  # the integer type of their sizes
    name: str  # the library's, for reports
    threads: dict  # NumPy's OpenBLAS's thread-count getter and setter, by routine


def _mkl_gemms() -> tuple[dict, str, str] | None:
    """MKL's GEMM routines, the integer type of their sizes and its name, with MKL made
    sequential; None if it is not installed or already runs threads of its own in this process
    (its calls would start threads inside the kernels')."""
    path = mkl_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        found = _named(lib, GEMMS, MKL_NAMINGS)
        if found is None or lib.MKL_Set_Threading_Layer(MKL_SEQUENTIAL) != MKL_SEQUENTIAL:
            return None
        version = ctypes.create_string_buffer(256)
        lib.MKL_Get_Version_String(version, len(version))
    except (OSError, AttributeError):
        return None
    number = re.search(r"Version ([\d.]+)", version.value.decode(errors="replace"))
    return *found, f"MKL {number.group(1) if number else ''}".strip()


# Products a plan makes, (m, k, n): a classifier's last layer, a recurrent step, a convolution's
# sample, a square block, a wide output (a decoder's). Each counts alike in the choice.
PROBES = ((64, 256, 16), (20, 200, 800), (32, 288, 256), (256, 256, 256), (128, 200, 1000))
CHOICE_FILE = "blas-choice.json"


def _sgemm(routines: tuple[dict, str]) -> Callable:
    """The library's `cblas_sgemm` (`routines`: by routine name, and the integer type of the
    sizes), callable from Python."""
    size = ctypes.c_int64 if routines[1] == "int64" else ctypes.c_int32
    matrix = [ctypes.c_void_p, size]  # an operand and its leading dimension
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_int] * 3, *[size] * 3, ctypes.c_float,
                                 *matrix * 2, ctypes.c_float, *matrix)  # fmt: skip
    return signature(ctypes.cast(routines[0]["cblas_sgemm"], ctypes.c_void_p).value)


def time_ratio(ours: tuple[dict, str], theirs: tuple[dict, str]) -> float:
    """The geometric mean over `PROBES` of the time one library's single-threaded GEMM takes over
    the other's (float32, on this thread; the fastest of runs taken in turns)."""
    import numpy as np

    gemms, logs = (_sgemm(ours), _sgemm(theirs)), []
    for m, k, n in PROBES:
        a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
        c = np.empty((m, n), np.float32)
        best = [math.inf, math.inf]
        for _ in range(7):
            for i, sgemm in enumerate(gemms):
                start = time.perf_counter()
                sgemm(101, 111, 111, m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, n, 0.0,
                      c.ctypes.data, n)  # fmt: skip
                best[i] = min(best[i], time.perf_counter() - start)
        logs.append(math.log(best[0] / best[1]))
    return math.exp(sum(logs) / len(logs))


def mkl_is_faster(mkl: tuple[dict, str, str], openblas: tuple[dict, str], threads: dict) -> bool:
    """Whether MKL's single-threaded GEMMs beat OpenBLAS's here (`time_ratio`). Which wins
    depends on the processor, not its vendor alone: MKL led on an Intel Xeon and on AMD's Zen 3,
    OpenBLAS's AVX-512 kernel on a later AMD EPYC (docs/kernels.md, "Which BLAS"). Measured once
    per processor and pair of libraries and remembered in the kernel cache, so that a machine's
    plans round alike from run to run."""
    from tracegrad.compiler.kernels.cache import default_cache

    key = f"{processor()} | {mkl[2]} | {os.path.basename(openblas_path() or '')}"
    path = default_cache().directory / CHOICE_FILE
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if key not in known:
        count = threads["openblas_get_num_threads"]()
        threads["openblas_set_num_threads"](1)
        try:
            known[key] = time_ratio(mkl[:2], openblas)
        finally:
            threads["openblas_set_num_threads"](count)
        with contextlib.suppress(OSError):
            path.write_text(json.dumps(known, indent=1), encoding="utf-8")
    return known[key] < 1.0


def processor() -> str:
    """The processor's model name and a digest of its features (Linux: /proc/cpuinfo; a virtual
    machine may name only the family, "AMD EPYC"), else what `platform` says."""
    import hashlib
    import platform

    found = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            name, _, value = line.partition(":")
            found.setdefault(name.strip(), value.strip())
    if "model name" not in found:
        return platform.processor() or platform.machine()
    features = hashlib.sha256(found.get("flags", "").encode()).hexdigest()[:8]
    return f"{found['model name']} ({features})"


@functools.cache
def gemm_library() -> Routines | None:
    """The routines plans call: MKL's GEMMs where it is installed and runs faster here than
    NumPy's OpenBLAS's (`mkl_is_faster`; `TRACEGRAD_BLAS=mkl` or `openblas` decides instead),
    else OpenBLAS's; and OpenBLAS's thread-count routines. None without those (NumPy's BLAS is
    not an OpenBLAS) or without GEMMs."""
    path = openblas_path()
    if path is None:
        return None
    openblas = ctypes.CDLL(path)
    threads = _named(openblas, THREADS, NAMINGS)
    if threads is None:
        return None
    gemms = _named(openblas, GEMMS, NAMINGS)
    user = os.environ.get(LIBRARY_VARIABLE, "").lower()
    mkl = None if user == "openblas" else _mkl_gemms()
    if mkl is not None and (
        gemms is None or user == "mkl" or mkl_is_faster(mkl, gemms, threads[0])
    ):
        return Routines(*mkl, threads=threads[0])
    if gemms is None:
        return None
    return Routines(*gemms, f"OpenBLAS ({os.path.basename(path)})", threads=threads[0])


@functools.cache
def gemm_symbols() -> str | None:
    """Register the routines (`gemm_library`) with LLVM as `tracegrad_cblas_sgemm`, ...,
    `tracegrad_openblas_set_num_threads`, which generated kernels call by name (so that Numba
    caches them); the integer type of the GEMMs' sizes, or None if there are none (products
    stay NumPy's)."""
    import llvmlite.binding as llvm

    routines = gemm_library()
    if routines is None:
        return None
    for routine, function in {**routines.gemms, **routines.threads}.items():
        llvm.add_symbol(f"tracegrad_{routine}", ctypes.cast(function, ctypes.c_void_p).value)
    return routines.ints

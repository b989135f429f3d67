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

import ctypes
import functools
import glob
import importlib.metadata
import os
import re
import sys
import threading
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
# is installed, since its GEMMs run faster than OpenBLAS's on the shapes plans make
# (docs/kernels.md, "Which BLAS"); else NumPy's OpenBLAS, its thread count set to one meanwhile. The
# thread-count routines are always NumPy's OpenBLAS's: its own threads must not run inside
# the kernels' threads, whichever library multiplies.
LIBRARY_VARIABLE = "TRACEGRAD_BLAS"  # "openblas": NumPy's OpenBLAS even where MKL is installed
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
    sequential; None if it is not installed, is declined (`LIBRARY_VARIABLE`), or already runs
    threads of its own in this process (its calls would start threads inside the kernels')."""
    path = None if os.environ.get(LIBRARY_VARIABLE, "").lower() == "openblas" else mkl_path()
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


@functools.cache
def gemm_library() -> Routines | None:
    """The routines plans call: MKL's GEMMs where it is installed (`_mkl_gemms`), else NumPy's
    OpenBLAS's, and OpenBLAS's thread-count routines; None without those (NumPy's BLAS is not
    an OpenBLAS) or without GEMMs."""
    path = openblas_path()
    if path is None:
        return None
    openblas = ctypes.CDLL(path)
    threads = _named(openblas, THREADS, NAMINGS)
    if threads is None:
        return None
    found = _mkl_gemms()
    if found is None:
        gemms = _named(openblas, GEMMS, NAMINGS)
        found = None if gemms is None else (*gemms, f"OpenBLAS ({os.path.basename(path)})")
    return None if found is None else Routines(*found, threads=threads[0])


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

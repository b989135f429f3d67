"""NumPy's OpenBLAS, as a plan uses it: its threads kept from spinning through the Numba kernels
between its GEMMs (`quiet_openblas`), and its GEMM routines lent to the Numba kernels that run
a plan's 2-D products on Numba's threads (`gemm_symbols`, `kernels.gemm`).

After each call OpenBLAS's worker threads spin for 2**28 cycles (about 0.1 s) waiting for the
next one. A plan runs a Numba kernel between most of its matrix products, and on a machine with
as many cores as threads the spinning workers take the cores the kernel's threads need, unless
they sleep at once (`OPENBLAS_THREAD_TIMEOUT`, 2**TIMEOUT cycles). OpenBLAS reads that variable
when it loads, which is before tracegrad in most scripts (`import numpy` comes first), so
`quiet_openblas` sets it, makes OpenBLAS read its environment again and restarts its idle
threads. A user's own `OPENBLAS_THREAD_TIMEOUT` is kept (and was read at load). (Since the products
moved to Numba's threads, OpenBLAS's own threads only run the products a plan still leaves to
NumPy: batched ones, and those inside the convolutions.)"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

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


# Matrix products on Numba's threads (`kernels.gemm`): each thread runs its share through NumPy's
# OpenBLAS, its thread count set to one meanwhile. How the library names its routines: (prefix,
# suffix, integer type of the sizes); NumPy's wheels are ILP64 with a scipy_ prefix, a system
# OpenBLAS is LP64.
NAMINGS = (("scipy_", "64_", "int64"), ("", "64_", "int64"), ("", "", "int32"))
ROUTINES = ("cblas_sgemm", "cblas_dgemm", "openblas_get_num_threads", "openblas_set_num_threads")


@functools.cache
def gemm_symbols() -> str | None:
    """Register NumPy's OpenBLAS's gemm routines and thread-count getter and setter with LLVM as
    `tracegrad_cblas_sgemm`, ..., `tracegrad_openblas_set_num_threads`, which generated kernels
    call by name (so that Numba caches them); the integer type of the sizes, or None if NumPy's
    library has not got them (another BLAS: products stay NumPy's)."""
    import llvmlite.binding as llvm

    path = openblas_path()
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    for prefix, suffix, ints in NAMINGS:
        names = {r: f"{prefix}{r}{suffix}" for r in ROUTINES}
        if all(hasattr(lib, name) for name in names.values()):
            for routine, name in names.items():
                llvm.add_symbol(
                    f"tracegrad_{routine}", ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                )
            return ints
    return None

"""Keep NumPy's OpenBLAS threads from spinning through the Numba kernels between its GEMMs.

After each call OpenBLAS's worker threads spin for 2**28 cycles (about 0.1 s) waiting for the
next one. A plan runs a Numba kernel between most of its matrix products, and on a machine with
as many cores as threads the spinning workers take the cores the kernel's threads need: the
traced GPT step of `benchmarks/models.py` took 0.37-0.41 s, and 0.32-0.36 s with the workers
sleeping at once (`OPENBLAS_THREAD_TIMEOUT`, 2**TIMEOUT cycles). OpenBLAS reads that variable
when it loads, which is before tracegrad in most scripts (`import numpy` comes first), so
`quiet_openblas` sets it, makes OpenBLAS read its environment again and restarts its idle
threads. A user's own `OPENBLAS_THREAD_TIMEOUT` is kept (and was read at load)."""

from __future__ import annotations

import ctypes
import os
import threading

VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
TIMEOUT = 4  # log2 of the cycles an idle worker spins; 4 is OpenBLAS's smallest
_done = threading.Lock()
_state = {"done": False}


def openblas_path() -> str | None:
    """The OpenBLAS library this process has loaded (Linux: /proc/self/maps), if any."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "openblas" in os.path.basename(path) and ".so" in path:
                    return path
    except OSError:
        pass
    return None


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

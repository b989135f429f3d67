"""Freed memory kept for the next allocation, not handed back to the kernel.

Every eager op returns a fresh array, and a training step frees and allocates the same large
arrays again and again. glibc gives a freed block back to the kernel when it was mapped on its
own (blocks over its adaptive threshold) or when the heap's free top exceeds the trim threshold;
the next array of that size then faults in every page anew, each one zeroed by the kernel. On
a virtual machine a fault costs microseconds, and an eager step of a convolutional network
takes tens of thousands of them (docs/benchmarks.md has the figures). PyTorch's CPU allocator
is malloc too; its guides advise jemalloc or tcmalloc for the same reason.

So at import tracegrad asks glibc to map blocks of their own only from 32 MiB (glibc's largest
adaptive threshold, now fixed) and never to trim the heap. The process keeps its peak footprint
in reserve for its next step rather than returning and refaulting it; peak RSS does not change.
`TRACEGRAD_KEEP_FREED_MEMORY=0` leaves glibc's defaults. Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
OWN_MAPPING_FROM = 32 << 20  # bytes: larger blocks are still mapped, and unmapped when freed


def keep_freed_memory() -> bool:
    """Set glibc's thresholds as above (once, at import); whether they were set."""
    if os.environ.get("TRACEGRAD_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # not glibc: its mallopt means other things
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    never = 2**31 - 1
    return bool(mallopt(M_MMAP_THRESHOLD, OWN_MAPPING_FROM) and mallopt(M_TRIM_THRESHOLD, never))

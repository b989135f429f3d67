"""Freed memory kept for reuse (frontend/heap.py): each process is new, as the thresholds are
set once at import."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# A step's pattern: four 16 MiB arrays alive, then all freed, twenty times; the page faults
# of the last ten rounds (the first ones fault the memory in once).
ROUNDS = """
import resource, numpy as np, tracegrad
def step():
    arrays = [np.ones(1 << 22, np.float32) for _ in range(4)]
    del arrays
for _ in range(10):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(keep: str) -> int:
    env = {**os.environ, "TRACEGRAD_KEEP_FREED_MEMORY": keep}
    done = subprocess.run([sys.executable, "-c", ROUNDS], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_a_steps_freed_arrays_are_reused_without_faulting_pages_in():
    kept, defaults = faults("1"), faults("0")
    assert kept < 10 * 4 * (16 << 20) // 4096 // 100  # under 1% of the pages
    assert defaults > 10 * kept  # glibc's defaults hand (some of) them back to the kernel

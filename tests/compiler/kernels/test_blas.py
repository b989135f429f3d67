"""NumPy's OpenBLAS threads sleep between a Numba plan's matrix products (`kernels.blas`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

QUIET = """
import numpy as np, ctypes, tracegrad as tg
from tracegrad.compiler.kernels.blas import openblas_path
tg.trace(lambda x: tg.tanh(x) @ x, backend="numba")(np.ones((3, 3)))
print(ctypes.CDLL(openblas_path()).openblas_thread_timeout() if openblas_path() else "none")
"""


@pytest.mark.parametrize("user", [None, "10"])
def test_a_numba_plan_makes_openblas_threads_sleep_unless_the_user_chose(user, tmp_path):
    env = {"TRACEGRAD_CACHE_DIR": str(tmp_path), "TRACEGRAD_BACKGROUND_COMPILE": "0"}
    if user is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = user
    out = subprocess.run([sys.executable, "-c", QUIET], env=env, capture_output=True, text=True,
                         check=True).stdout.split()[-1]  # fmt: skip
    if out == "none":
        pytest.skip("NumPy does not use OpenBLAS here")
    assert out == (user or "4")

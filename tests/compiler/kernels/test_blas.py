"""The BLAS of a Numba plan (`kernels.blas`): NumPy's OpenBLAS threads sleep between its matrix
products, which MKL runs where the `mkl` extra is installed and faster here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

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


PRODUCTS = """
import numpy as np, tracegrad as tg
from tracegrad.compiler.kernels import blas
rng = np.random.default_rng(0)
a, b = rng.standard_normal((300, 256)), rng.standard_normal((256, 100))  # big enough for kernels
x, w = rng.standard_normal((2, 4, 96, 96)), rng.standard_normal((5, 4, 3, 3))
step = tg.trace(lambda a, b, x, w: (a @ b, tg.nn.functional.conv2d(x, w, padding=1)),
                backend="numba")
(got, conv), want = step(a, b, x, w), a @ b
cols = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
                                                (3, 3), axis=(2, 3))
np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
np.testing.assert_allclose(conv.numpy(), np.einsum("ncxyij,ocij->noxy", cols, w), rtol=1e-10,
                           atol=1e-10)
assert "matmul kernel" in step.latest.source and "conv2d kernel" in step.latest.source
print(blas.gemm_library().name)
"""


def run(script: str, user: str | None, cache: Path | None = None) -> str:
    """The last line `script` prints under TRACEGRAD_BLAS=`user` (and a kernel cache)."""
    env = {**os.environ, "TRACEGRAD_BACKGROUND_COMPILE": "0", "TRACEGRAD_BLAS": user or ""}
    if cache is not None:
        env["TRACEGRAD_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, check=True).stdout.split("\n")[-2]  # fmt: skip


LIBRARY = "from tracegrad.compiler.kernels import blas; print(blas.gemm_library().name)"


@pytest.mark.parametrize("user", [None, "openblas"])
def test_plans_multiply_exactly_with_the_library_chosen(user):
    """The products and convolutions of a plan are exact on either library (PRODUCTS), and run
    on the library `gemm_library` names."""
    from tracegrad.compiler.kernels import blas

    if blas.openblas_path() is None:
        pytest.skip("NumPy does not use OpenBLAS here")
    assert run(PRODUCTS, user) == run(LIBRARY, user)


@pytest.mark.parametrize("user", [None, "openblas", "mkl"])
def test_the_library_is_the_one_the_user_names_or_the_faster_here(user, tmp_path):
    """TRACEGRAD_BLAS names the library; unset, MKL multiplies where the `mkl` extra is installed
    if it ran the probe products faster here, as the measurement remembered in the kernel
    cache says."""
    from tracegrad.compiler.kernels import blas

    if blas.openblas_path() is None:
        pytest.skip("NumPy does not use OpenBLAS here")
    used = run(LIBRARY, user, tmp_path)
    if blas.mkl_path() is None or user == "openblas":
        assert used.startswith("OpenBLAS"), used
    elif user == "mkl":
        assert used.startswith("MKL"), used
    else:
        (ratio,) = json.loads((tmp_path / blas.CHOICE_FILE).read_text()).values()
        assert used.startswith("MKL" if ratio < 1 else "OpenBLAS"), (used, ratio)


@pytest.mark.parametrize("ratio", [0.5, 2.0])
def test_the_measured_choice_is_remembered_and_followed(ratio, tmp_path):
    """A machine measures once: the ratio in the cache decides later processes' library."""
    from tracegrad.compiler.kernels import blas

    if blas.openblas_path() is None or blas.mkl_path() is None:
        pytest.skip("one library only here: nothing to choose")
    run(LIBRARY, None, tmp_path)  # measures, and writes down this machine's key
    path = tmp_path / blas.CHOICE_FILE
    (key,) = json.loads(path.read_text())
    path.write_text(json.dumps({key: ratio}))
    assert run(LIBRARY, None, tmp_path).startswith("MKL" if ratio < 1 else "OpenBLAS")
    assert json.loads(path.read_text()) == {key: ratio}


def test_the_kernels_of_products_pass_their_tests_on_the_other_library_too():
    """Where both libraries are installed, the kernel tests run once more on the one this machine
    did not choose, which another machine (or an install without the `mkl` extra) uses."""
    from tracegrad.compiler.kernels import blas

    if blas.mkl_path() is None or blas.openblas_path() is None:
        pytest.skip("one library only here: the suite itself ran its kernels")
    tests = [f"tests/compiler/kernels/test_{name}.py" for name in ("gemm", "conv")]
    other = "openblas" if blas.gemm_library().name.startswith("MKL") else "mkl"
    env = {**os.environ, "TRACEGRAD_BLAS": other}  # the kernels cached by either library
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                          env=env, capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]

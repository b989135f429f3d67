"""The package's import: the Numba target its kernels are compiled for. Each case runs in a fresh
interpreter, since Numba fixes its target once, at its first compilation in a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import llvmlite.binding as llvm
import pytest

llvm.initialize_native_target()
HOST = llvm.get_host_cpu_features().flatten()
AVX512 = "+avx512f" in HOST.split(",")

TARGET = """
import json, sys
{before}
import tracegrad.compiler.kernels
from tracegrad.compiler.kernels.cache import _numba_target
from numba.core.registry import cpu_target
_, name, features = cpu_target.target_context.codegen().magic_tuple()
print(json.dumps({{"features": features, "child": _numba_target()}}))
"""


def target(before: str = "", **env: str) -> dict:
    """The features Numba compiles for after `before` and importing the kernels, and the
    environment a kernel-compiling child would get."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    run = subprocess.run([sys.executable, "-c", TARGET.format(before=before)],
                         env=clean | env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_avx512_hosts_vectorize_kernels_512_bits_wide():
    got = target()
    expected = HOST + ",-prefer-256-bit" if AVX512 else HOST
    assert got["features"] == expected
    assert got["child"]["NUMBA_CPU_FEATURES"] == got["features"]


def test_a_users_numba_features_are_kept():
    got = target(NUMBA_CPU_FEATURES=HOST)
    assert got["features"] == HOST


def test_numba_compiled_first_keeps_its_target_and_children_get_it():
    got = target("import numba\nnumba.njit(lambda x: x + 1)(1)")
    assert got["features"] == HOST
    assert got["child"]["NUMBA_CPU_FEATURES"] == HOST


@pytest.mark.skipif(not AVX512, reason="the host has no AVX-512")
def test_a_float32_kernel_uses_512_bit_registers():
    code = """
import numpy as np, numba
import tracegrad.compiler.kernels
from tracegrad.compiler.kernels import fastmath
@numba.njit(fastmath=True)
def kernel(x, y):
    for i in range(x.size):
        y[i] = fastmath.tanh_f32(x[i])
x = np.ones(64, np.float32)
kernel(x, x)
print(next(iter(kernel.inspect_asm().values())).count("zmm"))
"""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    run = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) > 0

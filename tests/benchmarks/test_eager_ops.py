"""benchmarks/eager_ops.py: every case runs on tracegrad.torch (and gives PyTorch's values where
PyTorch is installed), the names are listed without a library, and a child prints its times."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
sys.path.insert(0, HERE)
import eager_ops  # noqa: E402

import tracegrad.torch  # noqa: E402


def test_the_cases_are_named_without_a_library_and_all_run():
    calls = eager_ops.cases(tracegrad.torch)
    assert eager_ops._names() == list(calls)
    for call in calls.values():
        call()  # raises if a case does not run


def test_cases_compute_what_pytorchs_do():
    torch = pytest.importorskip("torch")
    ours, theirs = eager_ops.cases(tracegrad.torch), eager_ops.cases(torch)
    for name in ("x + y", "x.mean()", "x.t()", "x[:, 1:3]", "softmax(x, -1)",
                 "cross_entropy(x, labels)"):  # fmt: skip
        np.testing.assert_allclose(np.asarray(ours[name]()), theirs[name]().numpy(), rtol=1e-5)


def test_a_child_prints_each_cases_time():
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "eager_ops.py"), "--child", "tracegrad", "--cases",
         "x + y", "x[0]"],  # fmt: skip
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    line = [ln for ln in done.stdout.splitlines() if ln.startswith(eager_ops.MARK)][-1]
    times = json.loads(line[len(eager_ops.MARK) :])
    assert set(times) == {"x + y", "x[0]"} and all(0 < t < 1e-2 for t in times.values())

"""Data parallelism over MPI: 2 ranks started with mpiexec (tests/distributed_worker.py) against
one process, and a failing rank stopping every rank instead of leaving them hanging."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the distributed extra (mpi4py, mpich) is not installed")
# the mpich wheel puts mpiexec next to the interpreter of its virtualenv
MPIEXEC = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                        os.environ.get("PATH", "")]))  # fmt: skip
if MPIEXEC is None:
    pytest.skip("no mpiexec (pip install mpich)", allow_module_level=True)

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"


def load_worker():
    spec = importlib.util.spec_from_file_location("distributed_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch(mode: str, out: Path | str = "-", ranks: int = 2) -> tuple[int, str, float]:
    start = time.monotonic()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "TRACEGRAD_BACKGROUND_COMPILE": "1",
    }  # the default, which dist.init() turns off
    # -P: tests/ is not put first on sys.path, where tests/numpy/ would shadow NumPy
    command = [MPIEXEC, "-n", str(ranks), sys.executable, "-P", str(WORKER), mode, str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """What 2 ranks with half the batch each computed (tests/distributed_worker.py)."""
    out = tmp_path_factory.mktemp("ranks") / "params.npz"
    code, output, _ = launch("equal", out)
    assert code == 0, output
    return dict(np.load(out))


ALIAS = re.compile(r"\s*\w+ = [\w\[\]]+")  # a name for a buffer: no work


def test_two_ranks_with_half_the_batch_each_match_one_process_with_all_of_it(two_ranks):
    got = two_ranks
    worker = load_worker()
    x, y = worker.batch()
    for opt in ("sgd", "adam"):
        expected, _ = worker.train("", opt, x, y)  # one process, eager, the whole batch
        alone, _ = worker.train("", opt, x[:8], y[:8])  # rank 0's half without the other's
        assert not np.allclose(alone[0], expected[0], rtol=1e-3)
        for trace in ("", "numpy", "numba"):
            for i, e in enumerate(expected):
                a, what = got[f"{trace}-{opt}-{i}"], f"{trace or 'eager'} {opt} parameter {i}"
                np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6, err_msg=what)
    for backend in ("numpy", "numba"):  # the plan shows each collective, its buffer in the arena
        lines = [s for s in str(got[f"{backend}-adam-source"]).splitlines()
                 if "del " not in s and "_commit" not in s and not ALIAS.fullmatch(s)]  # fmt: skip
        at = [i for i, line in enumerate(lines) if "allreduce" in line]
        assert len(at) == 4 and all("out=_arena[" in lines[i] for i in at)
        comments = [lines[i + 1].partition("  # ")[2] for i in at]
        assert all(" update:" in f" {c}" for c in comments)  # the optimizer reads it right away


def test_the_gradient_of_an_allreduce_is_the_allreduce_of_the_gradients(two_ranks):
    """Rank r computes c_r * sum(allreduce(w_r * x_r)) with c_r = r + 1, w_r = r + 2: the total
    loss over ranks reads x_r through every rank's result, so its gradient is (c_0 + c_1) * w_r."""
    got = two_ranks["vjp"]
    np.testing.assert_allclose(got, [[6.0, 6.0], [9.0, 9.0]])


def test_a_rank_that_raises_stops_every_rank_with_an_error_naming_it():
    code, output, seconds = launch("raise")
    assert code != 0 and "finished" not in output
    assert "rank 1 of 2 failed (RuntimeError: injected failure)" in output
    assert seconds < 20


def test_a_killed_rank_stops_the_other_within_seconds():
    code, output, seconds = launch("kill")
    assert code != 0 and "finished" not in output
    assert "BAD TERMINATION" in output and "signal 9" in output
    assert seconds < 20


def test_a_collective_times_out_when_a_rank_stalls():
    code, output, seconds = launch("stall")
    assert code != 0 and "finished" not in output
    assert "rank 0 of 2 failed (TimeoutError: allreduce on rank 0: no answer" in output
    assert seconds < 20

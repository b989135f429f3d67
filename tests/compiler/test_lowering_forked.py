"""A process forked after kernels ran on Numba's OpenMP threads (GNU OpenMP is not fork-safe:
Numba ends such a child at its first parallel launch) runs its ops as NumPy calls instead, eager
and traced (`lowering.FORKED_FROM_OPENMP`), and computes what the parent computes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORKED = """
import numba.np.ufunc.parallel as threads
import numpy as np
import tracegrad as tg
import tracegrad.torch as torch
import tracegrad.torch.multiprocessing as mp
from tracegrad.runtime.eager import wait_for_kernels

x, y = torch.randn(256, 512), torch.randint(0, 4, (256,))
big = torch.linspace(-1.0, 2.0, 1 << 18)


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(),
                                torch.nn.Linear(512, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def losses(step):
    return [float(step()) for _ in range(3)] + [float(torch.tanh(big * 3).sum())]


def child(queue, traced):
    # the parent's plans (their kernels loaded there), a step traced here, eager ops
    queue.put((losses(traced), losses(tg.trace(build()))))


if __name__ == "__main__":
    traced = tg.trace(build())
    losses(traced)
    traced.latest.adopt_kernels(wait=True)
    wait_for_kernels()
    losses(traced)
    if not (threads._is_initialized and threads._threading_layer == "omp"):
        print("no OpenMP threads started")
        raise SystemExit
    context = mp.get_context("fork")
    queue = context.Queue()
    worker = context.Process(target=child, args=(queue, traced))
    worker.start()
    got = queue.get(timeout=120)
    worker.join()
    assert worker.exitcode == 0, worker.exitcode
    np.testing.assert_allclose(got[0], losses(traced), rtol=1e-5)
    np.testing.assert_allclose(got[1], losses(build()), rtol=1e-5)
    print("ok")
"""


def test_a_forked_child_runs_numpy_calls_where_the_parents_kernels_would_end_it(tmp_path):
    script = tmp_path / "forked.py"
    script.write_text(textwrap.dedent(FORKED))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "no OpenMP threads started":
        pytest.skip("Numba's threading layer here is not OpenMP (or no kernel ran in parallel)")
    assert done.stdout.split() == ["ok"]

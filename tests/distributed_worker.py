"""Run by tests/test_distributed.py under `mpiexec -n 2`: the same small training run on every
rank with half the batch each (`equal`), or a rank failing mid-step (`raise`, `kill`, `stall`)."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import tracegrad as tg
from tracegrad import distributed as dist
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

BATCH, STEPS = 16, 3
COMBOS = [(trace, opt) for trace in ("", "numpy", "numba") for opt in ("sgd", "adam")]


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH)


def train(trace: str, opt: str, x, y, callback=None, distributed: bool = False) -> list:
    """STEPS steps of a small MLP, eager or traced on backend `trace`; the final parameters and
    the plan's source. (A 256-byte bucket sends the three small gradients together and the
    largest alone.)"""
    nn.manual_seed(1 + (dist.rank() if distributed else 0))  # ranks start apart...
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    if distributed:
        dist.broadcast_parameters(model.parameters())  # ...and broadcast makes them agree
    gm = tg.GradManager().attach(model.parameters(), callbacks=callback)
    make = optim.SGD if opt == "sgd" else optim.Adam
    o = make(model.parameters(), lr=0.1 if opt == "sgd" else 0.01)

    def step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        o.step()
        o.zero_grad()
        return loss

    if trace:
        step = tg.trace(step, backend=trace)
    for _ in range(STEPS):
        step(x, y)
        # ranks run the same plan at every step: kernels, if any, from the first call on
        assert not distributed or not trace or step.latest.pending is None
    return [p.numpy().copy() for p in model.parameters()], (step.source if trace else "")


def vjp_through_allreduce() -> list:
    """Every rank's d(sum over ranks s of c_s * sum(allreduce(w_r * x_r)))/dx_r, gathered."""
    r = dist.rank()
    x = tg.tensor(np.array([1.0, 2.0], np.float32))
    with tg.GradManager().attach(x) as gm:
        total = tg.allreduce(x * float(r + 2), op="sum", timeout=20)
        gm.backward((total * float(r + 1)).sum())
    from mpi4py import MPI

    return MPI.COMM_WORLD.gather(x.grad.numpy(), root=0)


def main(mode: str, out: str) -> None:
    lowering.KERNEL_MIN = 0  # these groups are small: compile them anyway, to run kernels
    dist.init()
    x, y = dist.shard(*batch())
    if mode == "equal":
        results = {}
        for trace, opt in COMBOS:
            cb = dist.make_allreduce_cb("mean", bucket_bytes=256, timeout=20)
            params, source = train(trace, opt, x, y, [cb], distributed=True)
            for i, p in enumerate(params):
                results[f"{trace}-{opt}-{i}"] = p
            results[f"{trace}-{opt}-source"] = np.array(source)
        results["vjp"] = np.array(vjp_through_allreduce())
        if dist.rank() == 0:
            np.savez(out, **results)
        return
    cb = dist.make_allreduce_cb("mean", timeout=2)

    def fail(param, grad):  # on rank 1, in the middle of backward of the second step
        if dist.rank() == 1 and fail.calls == 5:
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "stall":
                time.sleep(60)  # rank 0 gives up after its 2 s timeout
            raise RuntimeError("injected failure")
        fail.calls += 1
        return grad

    fail.calls = 0
    train("", "sgd", x, y, [fail, cb], distributed=True)
    print("finished", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Data-parallel scaling: 1 process against 2 MPI ranks, each with 1 BLAS thread, on a workload.

    python benchmarks/distributed.py [--workload gelu] [--steps 8] [--backend numba]

The baseline is one process running the traced step on the whole batch, no MPI. Then
`mpiexec -n 2` runs the same step on half the batch per rank, with the all-reduce callback
("mean", traced into the plan as an `allreduce` node). Both take the same global batch, so the
samples/s ratio is the ratio of step times (target >= 1.8 on 2 cores). A rank's step time is
taken between barriers, so it is the slower rank's. The communication share is the time spent
inside the plan's all-reduce calls (which includes waiting for the other rank to arrive) over
the step time; the pure transfer time of the same bytes, measured alone, is printed too, and
whether starting that all-reduce before 3 ms of compute and waiting after it saves anything.
Needs the distributed extra (`pip install -e ".[distributed]"`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "@@result "
ONE_THREAD = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                               "NUMBA_NUM_THREADS")}  # fmt: skip


def child(workload: str, steps: int, backend: str, distributed: bool) -> None:
    """One rank (or the lone baseline): time `steps` traced steps after a warm-up."""
    sys.path.insert(0, HERE)
    import numpy as np
    from steps import _tracegrad_step
    from workloads import WORKLOADS

    import tracegrad as tg
    from tracegrad.core import primitives as P

    w = WORKLOADS[workload]
    inside = [0.0]  # seconds inside the all-reduce during the timed steps

    def timed(fn):
        def run(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            inside[0] += time.perf_counter() - start
            return out

        return run

    barrier = lambda: None
    callbacks = None
    if distributed:
        from mpi4py import MPI

        from tracegrad import distributed as dist

        dist.init()
        barrier = MPI.COMM_WORLD.Barrier
        P.allreduce.impl = timed(P.allreduce.impl)  # traced: the plan calls the record's impl
        cb = dist.make_allreduce_cb("mean")
        cb.flush = timed(cb.flush)  # eager: the wait for every bucket, at the end of backward
        callbacks = [cb]
    train_step, (x, targets) = _tracegrad_step(w, callbacks)
    if distributed:
        x, targets = (tg.tensor(a) for a in dist.shard(x.numpy(), targets.numpy()))
    step = train_step if backend == "eager" else tg.trace(backend=backend)(train_step)
    step(x, targets)  # trace, compile, warm up
    if backend != "eager":
        step.wait_for_kernels()
    step(x, targets)
    inside[0] = 0.0
    times, cpu = [], []
    for _ in range(steps):
        barrier()
        start, start_cpu = time.perf_counter(), time.process_time()
        step(x, targets).item()
        cpu.append(time.process_time() - start_cpu)
        barrier()
        times.append(time.perf_counter() - start)
    result = {"step": statistics.median(times), "inside": inside[0] / steps, "batch": w.batch,
              "cpu": statistics.median(cpu)}  # fmt: skip
    if distributed:
        grads = sum(i * o + o for i, o in w.layer_shapes)
        buf, out = np.ones(grads, np.float32), np.empty(grads, np.float32)
        alone = []
        for _ in range(5):
            barrier()
            start = time.perf_counter()
            MPI.COMM_WORLD.Allreduce(buf, out)
            alone.append(time.perf_counter() - start)
        result.update(transfer=statistics.median(alone), bytes=buf.nbytes,
                      overlap=overlap_test(buf, out, barrier))  # fmt: skip
        if dist.rank() != 0:
            return
    print(MARK + json.dumps(result), flush=True)


def overlap_test(buf, out, barrier) -> tuple[float, float]:
    """Would a traced all-reduce gain from starting before compute and waiting after it? The
    median time of (all-reduce, then 3 ms of matmuls) against (start it, 3 ms of matmuls, wait)."""
    import numpy as np
    from mpi4py import MPI

    a = np.ones((256, 256), np.float32)

    def compute() -> None:
        start = time.perf_counter()
        while time.perf_counter() - start < 3e-3:
            a @ a

    times: dict[str, list[float]] = {"blocking": [], "overlapped": []}
    for _ in range(10):
        for mode, series in times.items():
            barrier()
            start = time.perf_counter()
            if mode == "blocking":
                MPI.COMM_WORLD.Allreduce(buf, out)
                compute()
            else:
                request = MPI.COMM_WORLD.Iallreduce(buf, out)
                compute()
                request.Wait()
            series.append(time.perf_counter() - start)
    return statistics.median(times["blocking"]), statistics.median(times["overlapped"])


def run(cmd: list[str]) -> dict:
    env = {**os.environ, **ONE_THREAD}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="gelu")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--backend", default="numba", choices=["eager", "numpy", "numba"])
    parser.add_argument("--child", choices=["alone", "rank"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.workload, args.steps, args.backend, args.child == "rank")
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    mpiexec = shutil.which("mpiexec", path=path)  # the mpich wheel's, next to the interpreter
    if mpiexec is None:
        sys.exit('no mpiexec: pip install -e ".[distributed]"')
    me = [sys.executable, os.path.abspath(__file__), "--workload", args.workload,
          "--steps", str(args.steps), "--backend", args.backend]  # fmt: skip
    one = run([*me, "--child", "alone"])
    two = run([mpiexec, "-n", "2", *me, "--child", "rank"])
    batch = one["batch"]
    print(f"workload {args.workload}, global batch {batch}, {args.backend}, 1 BLAS "
          f"thread per process, median of {args.steps} steps; machine load: "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    for name, r in (("1 process", one), ("2 ranks", two)):
        print(f"{name:9s}: {r['step'] * 1e3:7.1f} ms/step {batch / r['step']:7.0f} samples/s "
              f"(CPU time per step per process: {r['cpu'] * 1e3:.1f} ms)")  # fmt: skip
    print(f"samples/s ratio (target >= 1.8): {one['step'] / two['step']:.2f}; from CPU time, "
          f"as on 2 idle cores: {one['cpu'] / two['cpu']:.2f}")  # fmt: skip
    print(
        f"communication share of the 2-rank step: {two['inside'] / two['step']:.1%} "
        f"({two['inside'] * 1e3:.1f} ms inside all-reduce, waiting for the peer included; "
        f"{two['bytes'] / 1e6:.1f} MB of gradients alone: {two['transfer'] * 1e3:.1f} ms)"
    )
    blocking, overlapped = two["overlap"]
    print(f"the same all-reduce then 3 ms of matmuls: {blocking * 1e3:.2f} ms; started before "
          f"them and waited for after: {overlapped * 1e3:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()

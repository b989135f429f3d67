"""What a compiled plan's statements cost besides their work, on the zoo's small models:

    python benchmarks/plan_overhead.py [--models tiny mlp lstm] [--runs N]

Each model runs in a process of its own with one Numba thread and one BLAS thread, and every
figure is CPU time of the calling thread (`time.thread_time`): the whole plan then runs on that
thread, and other processes on a shared machine slow the figures only through the caches, not
by taking the core away (wall-clock time on a busy machine swings by several times). Per model:
the plan's statements and kernel launches, the plan's time (the fastest of N runs of its
function alone, as `zoo.py --profile` times it) and of the whole step, PyTorch eager's step
(one thread; NaN without torch: run it with the venv that has torch); from the profile (each
statement timed apart, the fastest of N runs, under a line tracer that adds a few us to each),
how many statements do little work (under 20 us each), their time and that per statement:
mostly what a statement costs in itself. Then the launch
of a small fused kernel (20 x 200, three ops) against its compiled function called directly,
and a few NumPy statements of the kinds a plan has, each alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = 20e-6  # a statement under this much CPU time does little work besides its call


def cpu_min(f, runs: int, number: int = 1) -> float:
    return min(timeit.Timer(f, timer=time.thread_time).repeat(number=number, repeat=runs)) / number


def model_figures(name: str, runs: int) -> dict:
    sys.path.insert(0, HERE)
    import zoo

    from tracegrad.runtime import viz

    run = zoo.make_step(zoo.MODELS[name], "tg-traced")
    for _ in range(2):  # the second call may trace again; kernels compile in the background
        run()
        run.wait_for_kernels()
    run()
    plan = run.traced.latest
    step_s = cpu_min(run, runs)
    plan_s = _plan_cpu(plan, runs)
    perf_counter = time.perf_counter
    time.perf_counter = time.thread_time  # the profile's clock: this thread's CPU time
    try:
        seconds = viz.profile(plan, repeat=runs).seconds
    finally:
        time.perf_counter = perf_counter
    small = [s for s in seconds if s < SMALL]
    return {"statements": len(seconds), "kernels": len(plan.kernels), "step_s": step_s,
            "plan_s": plan_s, "small": len(small), "small_s": sum(small)}  # fmt: skip


def torch_step(name: str, runs: int) -> dict:
    """PyTorch eager's step of the same model, on one thread (with /work/venv-torch's python)."""
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, HERE)
    import zoo

    run = zoo.make_step(zoo.MODELS[name], "torch")
    for _ in range(2):
        run()
    return {"step_s": cpu_min(run, runs)}


def _plan_cpu(plan, runs: int) -> float:
    import numpy as np

    graph, run = plan.graph, plan.run
    inputs = [np.zeros(v.shape, v.dtype) for v in graph.inputs]
    for k, (ref, via_grad) in enumerate(plan.capture.reads, start=len(plan.capture.args)):
        if ref.tensor is not None:
            inputs[k] = ref.tensor._grad._value if via_grad else ref.tensor._value
    views, lent = run.arena.lend(run.layout)
    try:
        with np.errstate(all="ignore"):
            return cpu_min(lambda: run.run(views, *inputs), runs)
    finally:
        if lent:
            run.arena.give_back()


def launch_figures() -> dict:
    """A small fused kernel's launch against its compiled function called directly, and NumPy
    statements of the kinds a plan runs, on (20, 200) float32 (an LSTM's gates)."""
    import numpy as np

    from tracegrad.compiler.kernels import compile_group
    from tracegrad.core.ir import Node, Value
    from tracegrad.core.primitives import PRIMITIVES

    x, y, b = Value((20, 200), np.float32), Value((20, 200), np.float32), Value((200,), np.float32)
    nodes: list = []

    def op(name, *args):
        out = Value(*PRIMITIVES[name].shape_rule(*args))
        nodes.append(Node(PRIMITIVES[name], args, [out], {}))
        return out

    out = op("tanh", op("mul", op("add", x, b), y))
    kernel = compile_group([x, y, b], nodes, [out])
    xs, ys, bs = (np.ones(v.shape, np.float32) for v in (x, y, b))
    outs, s = np.empty((20, 200), np.float32), np.ones((64, 10), np.float32)
    launch = getattr(kernel, "launch", kernel)
    direct = kernel.compiled
    n = 20000
    return {
        "kernel launch (20x200 add, mul, tanh)": cpu_min(lambda: launch(xs, ys, bs, outs), 7, n),
        "its compiled function, called directly": cpu_min(
            lambda: direct(xs, ys, bs, outs, *kernel.sizes, kernel.chunks), 7, n
        ),
        "the same as 3 NumPy calls with out=": cpu_min(
            lambda: np.tanh(np.multiply(np.add(xs, bs, out=outs), ys, out=outs), out=outs), 7, n
        ),
        "np.add(s, s, out=s) on 64x10": cpu_min(lambda: np.add(s, s, out=s), 7, n),
        "np.transpose(s, axes=(1, 0))": cpu_min(lambda: np.transpose(s, axes=(1, 0)), 7, n),
        "np.sum(s, axis=(1,), keepdims=True)": cpu_min(
            lambda: np.sum(s, axis=(1,), keepdims=True), 7, n
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "mlp", "lstm"])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child == "-":
            figures = launch_figures()
        elif args.child.startswith("torch:"):
            figures = torch_step(args.child[len("torch:") :], args.runs)
        else:
            figures = model_figures(args.child, args.runs)
        print(json.dumps(figures))
        return
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}  # fmt: skip

    def child(what: str) -> dict:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", what, "--runs", str(args.runs)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode:  # PyTorch's child, without torch
            return {"step_s": math.nan}
        return json.loads(out.stdout.strip().splitlines()[-1])

    print("CPU time of the calling thread, one Numba and one BLAS thread; ms unless said\n")
    print("| model | statements | kernels | step | PyTorch eager step | plan | small statements "
          "| their time | us each |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        f, torch_s = child(name), child(f"torch:{name}")["step_s"]
        each = f["small_s"] / max(f["small"], 1) * 1e6
        print(f"| {name} | {f['statements']} | {f['kernels']} | {f['step_s'] * 1e3:.2f} | "
              f"{torch_s * 1e3:.2f} | {f['plan_s'] * 1e3:.2f} | {f['small']} | "
              f"{f['small_s'] * 1e3:.2f} | {each:.1f} |", flush=True)  # fmt: skip
    print("\n| one statement | us |\n|---|---:|")
    for what, s in child("-").items():
        print(f"| {what} | {s * 1e6:.2f} |")


if __name__ == "__main__":
    main()

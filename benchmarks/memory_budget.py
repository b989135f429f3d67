"""A training step under `@trace(memory_budget=...)`: planned and measured peaks, and speed.

    python benchmarks/memory_budget.py [--batch 4096] [--depth 48] [--backend numba] [--steps 3]

Runs the `deep` workload (48 tanh-GELU layers of 512) unbudgeted, then at 100%, 50%, 25% and 12%
of the unbudgeted planned peak and at the smallest feasible budget (the `minimum` of the
`MemoryBudgetError` a 1-byte budget raises), each in a process of its own. Prints the planned
peak, the tracemalloc peak of one step (the arena the plan holds between steps included), the
peak RSS of that step, and the median step time relative to the unbudgeted step. Targets:
measured <= 1.05 x budget everywhere; at 25%, step time <= 1.35 x unbudgeted.

Then a depth sweep (12, 24, 48, 96 layers) of the smallest feasible budget, split into the new
parameter values (a step that fails must leave the old ones intact, so the new ones are held
until it ends: they grow with depth, whatever the checkpointing) and the rest, with
least-squares fits of the rest to `a + b sqrt(depth)` and `a + b depth`. One level of
checkpoints grows like sqrt(depth) (Chen et al. 2016); nested checkpoints need less.
`--batch` runs a smaller batch than the workload's 4096 (the machine may be shared); the table
says which batch ran.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
from harness import MARK, child_env, high_water_mb, reset_peak_rss
from workloads import WORKLOADS

SHARES = (1.0, 0.5, 0.25, 0.12)
DEPTHS = (12, 24, 48, 96)
MEASURED_TARGET, TIME_TARGET = 1.05, 1.35


# --- child side ---------------------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> dict:
    """Trace the step under the budget; unless only probing, run it and measure one step."""
    import tracemalloc

    from steps import _tracegrad_step

    import tracegrad as tg

    w = replace(WORKLOADS["deep"], batch=args.batch, depth=args.depth)
    fn, inputs = _tracegrad_step(w)
    budget = args.budget or None
    traced = tg.trace(fn, backend=args.backend, memory_budget=budget)
    if args.probe:  # trace and plan only: the capture runs no numeric work
        from tracegrad.tracer import capture

        try:
            traced._compile(capture(fn, inputs, {}))
        except tg.MemoryBudgetError as e:
            return {"minimum": e.minimum}
        return {"minimum": None}
    try:
        traced(*inputs)  # compiles, then runs once
    except tg.MemoryBudgetError as e:
        return {"refused": e.minimum, "message": str(e)}
    plan = traced.latest
    traced(*inputs)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        traced(*inputs)
        times.append(time.perf_counter() - start)
    reset = reset_peak_rss()
    tracemalloc.start()
    traced(*inputs)
    measured = tracemalloc.get_traced_memory()[1] + plan.run.arena.buffer.nbytes
    tracemalloc.stop()
    return {
        "planned": plan.memory.peak,
        "measured": measured,
        "rss_mb": high_water_mb() if reset else float("nan"),
        "median_s": statistics.median(times),
        "recomputed": len(plan.budget.recomputed) if plan.budget else 0,
        "estimated_extra": plan.budget.extra_s / plan.budget.step_s if plan.budget else 0.0,
    }


# --- parent side --------------------------------------------------------------------------------


def child(args: argparse.Namespace, budget: int, depth: int, probe: bool = False) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--batch",
        str(args.batch),
        "--depth",
        str(depth),
        "--backend",
        args.backend,
        "--steps",
        str(args.steps),
        "--budget",
        str(budget),
    ]
    proc = subprocess.run(
        cmd + (["--probe"] if probe else []),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=WORKLOADS["deep"].batch)
    parser.add_argument("--depth", type=int, default=WORKLOADS["deep"].depth)
    parser.add_argument("--backend", choices=["numpy", "numba"], default="numba")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-sweep", action="store_true", help="skip the depth sweep")
    args = parser.parse_args()
    if args.child:
        print(MARK + json.dumps(run_child(args)), flush=True)
        return
    w = replace(WORKLOADS["deep"], batch=args.batch, depth=args.depth)
    print(f"### memory budget, {w.describe()}, backend {args.backend}")
    print(f"(median of {args.steps} steps per row, each row its own process, busy machine)\n")
    base = child(args, 0, args.depth)
    if "planned" not in base:
        sys.exit(f"unbudgeted step failed: {base}")
    minimum = child(args, 1, args.depth, probe=True)["minimum"]
    rows = [("unbudgeted", None, base)]
    for share in SHARES:
        budget = int(base["planned"] * share)
        rows.append((f"{share:.0%}", budget, child(args, budget, args.depth)))
    rows.append(("smallest feasible", minimum, child(args, minimum, args.depth)))
    print(
        "| budget | MiB | planned MiB | measured MiB | measured / budget | step peak RSS MiB "
        "| recomputed | est. extra compute | step ms | step time / unbudgeted |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, budget, r in rows:
        if "planned" not in r:
            why = f"refused: minimum {mib(r['refused'])} MiB" if "refused" in r else r
            print(f"| {name} | {mib(budget)} | {why} |")
            continue
        share = "-" if budget is None else f"{r['measured'] / budget:.3f}"
        print(
            f"| {name} | {'-' if budget is None else mib(budget)} | {mib(r['planned'])} "
            f"| {mib(r['measured'])} | {share} | {r['rss_mb']:.0f} | {r['recomputed']} "
            f"| {r['estimated_extra']:.0%} | {r['median_s'] * 1e3:.0f} "
            f"| {r['median_s'] / base['median_s']:.2f} |"
        )
    for name, budget, r in rows[1:]:
        if "planned" in r:
            ok = r["measured"] <= MEASURED_TARGET * budget
            print(f"{name}: measured <= {MEASURED_TARGET} x budget {'met' if ok else 'NOT met'}")
    quarter = rows[3][2]
    if "median_s" in quarter:
        ratio = quarter["median_s"] / base["median_s"]
        met = "met" if ratio <= TIME_TARGET else "NOT met"
        print(f"25%: step time {ratio:.2f} x unbudgeted <= {TIME_TARGET} {met}")
    else:
        print("25%: refused, so the step-time target cannot be checked at this batch")
    for framework in ("torch", "jax"):
        if importlib.util.find_spec(framework) is None:
            print(f"{framework} comparison skipped: {framework} is not installed")
        else:
            print(f"{framework} comparison skipped: not written yet (optional)")
    if not args.no_sweep:
        sweep(args)


def sweep(args: argparse.Namespace) -> None:
    print(f"\n### smallest feasible budget by depth (batch {args.batch}, tracing only)\n")
    minima = [child(args, 1, d, probe=True)["minimum"] for d in DEPTHS]
    params = [parameter_bytes(replace(WORKLOADS["deep"], depth=d)) for d in DEPTHS]
    print("| depth | smallest feasible MiB | new parameter values MiB | the rest MiB |")
    print("|---:|---:|---:|---:|")
    for d, m, p in zip(DEPTHS, minima, params, strict=True):
        print(f"| {d} | {mib(m)} | {mib(p)} | {mib(m - p)} |")
    depth = np.array(DEPTHS, float)
    y = (np.array(minima, float) - np.array(params, float)) / 2**20
    for name, x in (("sqrt(depth)", np.sqrt(depth)), ("depth", depth)):
        a = np.stack([np.ones_like(x), x], 1)
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        resid = y - a @ coef
        spread = (y - y.mean()) @ (y - y.mean())
        r2 = 1 - (resid @ resid) / spread if spread > 1e-6 else float("nan")  # nan: flat
        print(f"fit: the rest = {coef[0]:.1f} + {coef[1]:.2f} {name} MiB, R^2 = {r2:.4f}")


def parameter_bytes(w) -> int:
    from workloads import init_params

    return sum(a.nbytes + b.nbytes for a, b in init_params(w))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()

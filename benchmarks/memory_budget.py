"""A training step under `@trace(memory_budget=...)`: planned and measured peaks, and speed.

    python benchmarks/memory_budget.py [--batch 4096] [--depth 48] [--backend numba] [--steps 3]
        [--momentum 0.9] [--shares 1,0.5,0.35,0.25,0.12]

Runs the `deep` workload (48 tanh-GELU layers of 512) unbudgeted, then at 100%, 50%, 25% and 12%
of the unbudgeted planned peak and at the smallest feasible budget (the `minimum` of the
`MemoryBudgetError` a 1-byte budget raises), each in a process of its own. Prints the planned
peak, the tracemalloc peak of one step (the arena the plan holds between steps included), the
peak RSS of that step, and the median step time relative to the unbudgeted step. Targets:
measured <= 1.05 x budget everywhere; at 25%, step time <= 1.35 x unbudgeted.

Then a depth sweep (12, 24, 48, 96 layers) of the smallest feasible budget, with least-squares
fits to `a + b sqrt(depth)` and `a + b depth`. One level of checkpoints grows like sqrt(depth)
(Chen et al. 2016); nested checkpoints need less. New parameter values no longer count: the
update writes them in place after the step's commit point (docs/architecture.md).
`--batch` runs a smaller batch than the workload's 4096 (the machine may be shared); the table
says which batch ran. `--momentum` gives SGD momentum (a buffer per parameter, updated in place
like the parameter), `--shares` other budgets (shares of the unbudgeted planned peak).

Unless `--no-peers`, and if PyTorch is installed, the same step with forward and loss under
`torch.compile` runs at several `torch._functorch.config.activation_memory_budget` settings, each
in its own process, and each tracegrad row is set beside the fastest of them whose step peak RSS
is no higher. Target: tracegrad is faster at equal peak. Likewise, if jax is installed, the whole
step under `jax.jit` (parameters donated) with `jax.checkpoint` policies (`JAX_SETTINGS`): none;
per layer with `nothing_saveable`, `dots_saveable` and `dots_with_no_batch_dims_saveable`; runs of
k layers with `nothing_saveable` (keeping only each run's input for the backward), k = 7 ~
sqrt(48) in the unrolled loop, and per layer and k = 4, 6, 8 as `lax.scan`s over stacked layers.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from harness import (
    MARK,
    busy_elsewhere,
    child_env,
    cpu_ticks,
    high_water_mb,
    reset_peak_rss,
    rss_mb,
    run_marked,
    timed,
)
from workloads import WORKLOADS, Workload

SHARES = (1.0, 0.5, 0.25, 0.12)
# activation_memory_budget: 1 saves what the min-cut partitioner saves for speed, 0 only the
# compiled region's inputs. It bounds the saved activations, not the peak: on `deep` the peak is
# lowest at 0.5-0.7, and lower budgets raise it again (the backward's recomputation holds more).
TORCH_BUDGETS = (1.0, 0.7, 0.5, 0.3, 0.1, 0.0)
# jax.checkpoint settings: (label, policy in jax.checkpoint_policies or None, layers per
# checkpoint, lax.scan over stacked layers). An MLP's matmuls have no dot_general batch
# dimensions, so `dots_with_no_batch_dims_saveable` should save what `dots_saveable` saves. In the
# unrolled loop XLA schedules the backward's recomputation early, which keeps most of what
# runs of k layers would drop; under lax.scan (k must divide the depth) the recomputation runs
# one run at a time.
JAX_SETTINGS = (
    ("no checkpointing", None, 1, False),
    ("per layer, dots_saveable", "dots_saveable", 1, False),
    ("per layer, dots_with_no_batch_dims_saveable", "dots_with_no_batch_dims_saveable", 1, False),
    ("per layer, nothing_saveable", "nothing_saveable", 1, False),
    ("every 7 layers, nothing_saveable", "nothing_saveable", 7, False),
    ("scan, per layer, nothing_saveable", "nothing_saveable", 1, True),
    ("scan, every 4 layers, nothing_saveable", "nothing_saveable", 4, True),
    ("scan, every 6 layers, nothing_saveable", "nothing_saveable", 6, True),
    ("scan, every 8 layers, nothing_saveable", "nothing_saveable", 8, True),
)
DEPTHS = (12, 24, 48, 96)
MEASURED_TARGET, TIME_TARGET = 1.05, 1.35


# --- child side ---------------------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> dict:
    """Trace the step under the budget; unless only probing, run it and measure one step."""
    import tracemalloc

    from steps import _tracegrad_step

    import tracegrad as tg

    w = replace(WORKLOADS["deep"], batch=args.batch, depth=args.depth)
    fn, inputs = _tracegrad_step(w, momentum=args.momentum)
    budget = args.budget or None
    traced = tg.trace(fn, backend=args.backend, memory_budget=budget)
    if args.probe:  # trace and plan only: the capture runs no numeric work
        from tracegrad.frontend.tracer import capture

        try:
            traced._compile(capture(fn, inputs, {}))
        except tg.MemoryBudgetError as e:
            return {"minimum": e.minimum}
        return {"minimum": None}
    try:
        traced(*inputs)  # compiles, then runs once
    except tg.MemoryBudgetError as e:
        return {"refused": e.minimum, "message": str(e)}
    traced.wait_for_kernels()  # unbudgeted, they compile in the background
    plan = traced.latest
    traced(*inputs)
    median, busy = time_steps(lambda: traced(*inputs), args.steps)
    reset = reset_peak_rss()
    tracemalloc.start()
    traced(*inputs)
    measured = tracemalloc.get_traced_memory()[1] + plan.run.arena.buffer.nbytes
    tracemalloc.stop()
    return {
        "planned": plan.memory.peak,
        "measured": measured,
        "rss_mb": high_water_mb() if reset else float("nan"),
        "idle_mb": idle_rss_mb(),  # after the peak is read
        "median_s": median,
        "busy": busy,
        "recomputed": len(plan.budget.recomputed) if plan.budget else 0,
        "estimated_extra": plan.budget.extra_s / plan.budget.step_s if plan.budget else 0.0,
    }


def run_peer_child(args: argparse.Namespace) -> dict:
    """The same step in PyTorch under `activation_memory_budget`, or in jax under a
    `jax.checkpoint` setting, measured as `run_child` measures tracegrad's: the step peak RSS,
    since tracemalloc sees neither torch's buffers nor XLA's."""
    w = replace(WORKLOADS["deep"], batch=args.batch, depth=args.depth)
    try:
        if args.torch_budget is not None:
            step = compiled_torch_step(w, args.torch_budget)
        else:
            from steps import build_jax

            remat = None if args.jax_remat == "none" else args.jax_remat
            step = build_jax(w, remat, args.jax_every, args.jax_scan)
        start = time.perf_counter()
        step()  # compiles forward and backward
        step()
    except Exception as e:  # a setting the peer cannot compile is a row, not a crash
        while (inner := getattr(e, "inner_exception", None) or e.__cause__) is not None:
            e = inner  # dynamo wraps the partitioner's or inductor's error
        return {"error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"}
    warmup = time.perf_counter() - start
    median, busy = time_steps(step, args.steps)
    reset = reset_peak_rss()
    step()
    return {
        "rss_mb": high_water_mb() if reset else float("nan"),
        "idle_mb": idle_rss_mb(),
        "median_s": median,
        "busy": busy,
        "warmup_s": warmup,
    }


def time_steps(step: Callable, n: int) -> tuple[float, float]:
    """The median of `n` steps, and the share of the cores other processes kept busy meanwhile
    (the machine is shared: rows timed under different loads are not comparable)."""
    ticks = cpu_ticks()
    times = [timed(step)[0] for _ in range(n)]
    return statistics.median(times), busy_elsewhere(ticks, sum(times))


def idle_rss_mb() -> float:
    """RSS with garbage collected and glibc's free pages handed back: what the process holds
    between steps (runtime, libraries, parameters, data, a plan's arena). The step peak is read
    without this, as before: the high-water mark then also counts what the allocator kept."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    return rss_mb()


def compiled_torch_step(w: Workload, budget: float) -> Callable[[], float]:
    """`build_torch`'s step with forward and loss under `torch.compile`: its backward then goes
    through AOTAutograd, whose partitioner applies the budget. The SGD update stays eager."""
    import torch
    import torch._functorch.config as functorch_config
    from steps import build_torch

    functorch_config.activation_memory_budget = budget
    return build_torch(w, torch.compile)


# --- parent side --------------------------------------------------------------------------------


def child(args: argparse.Namespace, budget: int, depth: int, probe: bool = False) -> dict:
    return spawn(args, depth, ["--budget", str(budget)] + (["--probe"] if probe else []))


def torch_child(args: argparse.Namespace, budget: float) -> dict:
    """With an empty inductor cache, so that the warm-up time includes the whole compile."""
    with tempfile.TemporaryDirectory() as cache:
        return spawn(
            args, args.depth, ["--torch-budget", str(budget)], TORCHINDUCTOR_CACHE_DIR=cache
        )


def jax_child(args: argparse.Namespace, policy: str | None, every: int, scan: bool) -> dict:
    """jax keeps no compilation cache unless told to, so the warm-up time includes the compile."""
    extra = ["--jax-remat", policy or "none", "--jax-every", str(every)]
    return spawn(args, args.depth, extra + (["--jax-scan"] if scan else []))


def spawn(args: argparse.Namespace, depth: int, extra: list[str], **env: str) -> dict:
    """Run this script as a child on `depth` layers; its JSON result, or {"error": ...}."""
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
        "--momentum",
        str(args.momentum),
    ]
    return run_marked(cmd + extra, child_env(**env))


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=WORKLOADS["deep"].batch)
    parser.add_argument("--depth", type=int, default=WORKLOADS["deep"].depth)
    parser.add_argument("--backend", choices=["numpy", "numba"], default="numba")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--shares", default=",".join(map(str, SHARES)))
    parser.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--torch-budget", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--jax-remat", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--jax-every", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--jax-scan", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-sweep", action="store_true", help="skip the depth sweep")
    parser.add_argument("--no-peers", action="store_true", help="skip the torch/jax comparison")
    args = parser.parse_args()
    if args.child:
        peer = args.torch_budget is not None or args.jax_remat is not None
        result = run_peer_child(args) if peer else run_child(args)
        print(MARK + json.dumps(result), flush=True)
        return
    w = replace(WORKLOADS["deep"], batch=args.batch, depth=args.depth)
    momentum = f", momentum {args.momentum}" if args.momentum else ""
    print(f"### memory budget, {w.describe()}{momentum}, backend {args.backend}")
    print(f"(median of {args.steps} steps per row, each row its own process, busy machine)\n")
    base = child(args, 0, args.depth)
    if "planned" not in base:
        sys.exit(f"unbudgeted step failed: {base}")
    minimum = child(args, 1, args.depth, probe=True)["minimum"]
    rows = [("unbudgeted", None, base)]
    shares = [float(s) for s in args.shares.split(",")]
    for share in shares:
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
    quarter = next((r for name, _, r in rows if name == "25%"), {})
    if "median_s" in quarter:
        ratio = quarter["median_s"] / base["median_s"]
        met = "met" if ratio <= TIME_TARGET else "NOT met"
        print(f"25%: step time {ratio:.2f} x unbudgeted <= {TIME_TARGET} {met}")
    else:
        print("25%: refused, so the step-time target cannot be checked at this batch")
    if not args.no_peers:
        peers(args, rows)
    if not args.no_sweep:
        sweep(args)


def peers(args: argparse.Namespace, rows: list[tuple[str, int | None, dict]]) -> None:
    if importlib.util.find_spec("torch") is None:
        print("torch comparison skipped: torch is not installed")
    else:
        compare_peer(
            rows,
            [(str(b), torch_child(args, b)) for b in TORCH_BUDGETS],
            "torch",
            "torch.compile, forward and loss compiled, same step (torch 2 threads)",
            "activation_memory_budget",
            "budget ",
        )
    if importlib.util.find_spec("jax") is None:
        print("jax comparison skipped: jax is not installed")
    else:
        compare_peer(
            rows,
            [(label, jax_child(args, *setting)) for label, *setting in JAX_SETTINGS],
            "jax",
            "jax.jit of the whole step, parameters donated, jax.checkpoint policies "
            "(XLA CPU, default threads)",
            "jax.checkpoint",
        )


def compare_peer(
    rows: list[tuple[str, int | None, dict]],
    runs: list[tuple[str, dict]],
    peer: str,
    title: str,
    setting: str,
    prefix: str = "",
) -> None:
    """The peer's runs (one per `setting`, labelled), then each tracegrad row beside the
    fastest run whose peak RSS is no higher: the peer's best at that peak, since its setting
    cannot be set to a peak directly. If none is that low, beside the run of the lowest peak,
    its ratio in parentheses. `prefix` goes before a run's label where a row names it."""
    print(f"\n### {title}\n")
    print(
        f"| {setting} | step peak RSS MiB | RSS between steps MiB | step ms "
        "| cores busy elsewhere | 2 warm-up steps s (cold compile) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for label, r in runs:
        if "median_s" not in r:
            print(f"| {label} | {r.get('error', r)} |")
            continue
        print(
            f"| {label} | {r['rss_mb']:.0f} | {r['idle_mb']:.0f} "
            f"| {r['median_s'] * 1e3:.0f} | {r['busy']:.0%} | {r['warmup_s']:.0f} |"
        )
    print(
        f"\nRSS counts the Python/{peer}/numba runtime and libraries, parameters and data: compare "
        "rows with each other, not with tracemalloc. Between steps: after gc and malloc_trim "
        "(tracegrad's includes the arena its plan keeps). A ratio in parentheses is against "
        f"{peer}'s lowest peak, higher than the tracegrad row's.\n"
    )
    print(
        "| tracegrad row | step peak RSS MiB | RSS between steps MiB | step ms "
        f"| cores busy elsewhere | fastest {peer} at or below that peak "
        f"| tracegrad / {peer} time |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    ran = [(b, r) for b, r in runs if "median_s" in r]
    for name, _, r in rows:
        if "rss_mb" not in r:
            continue
        head = (
            f"| {name} | {r['rss_mb']:.0f} | {r['idle_mb']:.0f} | {r['median_s'] * 1e3:.0f} "
            f"| {r['busy']:.0%}"
        )
        fits = [(b, t) for b, t in ran if t["rss_mb"] <= r["rss_mb"]]
        if not fits and ran:  # then set beside the peer's lowest peak, in parentheses
            b, t = min(ran, key=lambda bt: bt[1]["rss_mb"])
            print(
                f"{head} | none; lowest: {prefix}{b}, {t['rss_mb']:.0f} MiB, "
                f"{t['median_s'] * 1e3:.0f} ms | ({r['median_s'] / t['median_s']:.2f}) |"
            )
            continue
        if not fits:
            print(f"{head} | none ran | - |")
            continue
        b, t = min(fits, key=lambda bt: bt[1]["median_s"])
        print(
            f"{head} | {prefix}{b}: {t['rss_mb']:.0f} MiB, {t['median_s'] * 1e3:.0f} ms "
            f"| {r['median_s'] / t['median_s']:.2f} |"
        )


def sweep(args: argparse.Namespace) -> None:
    print(f"\n### smallest feasible budget by depth (batch {args.batch}, tracing only)\n")
    minima = [child(args, 1, d, probe=True)["minimum"] for d in DEPTHS]
    params = [parameter_bytes(replace(WORKLOADS["deep"], depth=d)) for d in DEPTHS]
    print("| depth | smallest feasible MiB | parameters MiB (updated in place, not counted) |")
    print("|---:|---:|---:|")
    for d, m, p in zip(DEPTHS, minima, params, strict=True):
        print(f"| {d} | {mib(m)} | {mib(p)} |")
    depth = np.array(DEPTHS, float)
    y = np.array(minima, float) / 2**20
    for name, x in (("sqrt(depth)", np.sqrt(depth)), ("depth", depth)):
        a = np.stack([np.ones_like(x), x], 1)
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        resid = y - a @ coef
        spread = (y - y.mean()) @ (y - y.mean())
        r2 = 1 - (resid @ resid) / spread if spread > 1e-6 else float("nan")  # nan: flat
        print(f"fit: smallest feasible = {coef[0]:.1f} + {coef[1]:.2f} {name} MiB, R^2 = {r2:.4f}")


def parameter_bytes(w) -> int:
    from workloads import init_params

    return sum(a.nbytes + b.nbytes for a, b in init_params(w))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()

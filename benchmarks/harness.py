"""Measure one method on one workload in a process of its own, so its peak RSS is its own.

The parent calls `measure(...)`, which runs this file as a child and reads back one JSON line:

    python benchmarks/harness.py METHOD WORKLOAD [--steps N] [--budget S] [--memory]

The child times the first call (set-up excluded), one warm-up call, then N calls, or fewer (at
least one) once they have taken S seconds, and reports the median. The first two calls
give the loss before and after one SGD update, which the parent compares across methods.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Collection, Sequence
from typing import Any

MARK = "@@result "
HERE = os.path.dirname(os.path.abspath(__file__))
# Set on some machines to pin OpenBLAS's kernel; they slow a current NumPy, so children run
# without them (both together) and report the kernel that OpenBLAS picked instead.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


# --- parent side --------------------------------------------------------------------------------


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_OVERRIDES}
    env.update(extra)
    return env


def method_env(method: str, env: dict[str, str]) -> dict[str, str]:
    """A peer's child (any method but tracegrad's own, "tg-...") runs with the C library's
    allocator defaults, as its users run it: it imports tracegrad (which builds the shared
    weights and data), whose import would hand it tracegrad's heap settings
    (tracegrad/frontend/heap.py); PyTorch gains from them as much as tracegrad does."""
    return env if method.startswith("tg") else {**env, "TRACEGRAD_KEEP_FREED_MEMORY": "0"}


def measure(
    method: str,
    workload: str,
    steps: int,
    budget: float = 10.0,
    memory: bool = False,
    env: dict[str, str] | None = None,
    timeout: float = 900.0,
) -> dict[str, Any]:
    """Run `method` on `workload` in a fresh process; its JSON result, or {"error": ...}."""
    cmd = [
        sys.executable,
        os.path.join(HERE, "harness.py"),
        method,
        workload,
        "--steps",
        str(steps),
        "--budget",
        str(budget),
    ] + (["--memory"] if memory else [])
    return run_marked(cmd, method_env(method, env or child_env()), timeout)


def run_marked(cmd: list[str], env: dict[str, str], timeout: float = 1800.0) -> dict[str, Any]:
    """Run a child that prints its result as one JSON line after MARK; that result, or
    {"error": ...} with the child's last line of output."""
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}


# --- rounds: several methods on one workload, and their table ---------------------------------


def cache_env(root: str) -> dict[str, str]:
    """The environment of a child whose compile caches all live under `root` (empty when it is
    new): tracegrad's kernels, Numba's own and torch.compile's."""
    return child_env(TRACEGRAD_CACHE_DIR=os.path.join(root, "tracegrad"),
                     NUMBA_CACHE_DIR=os.path.join(root, "numba"),
                     TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"))  # fmt: skip


def run_rounds(
    measure: Callable[[str, dict[str, str], bool], dict[str, Any]],
    methods: Sequence[str],
    rounds: int,
    warm: Collection[str] = (),
) -> list[dict[str, dict[str, Any]]]:
    """Every method's child once a round, round after round: a slow spell of the host then
    lands on every method, not on whichever ran during it. `measure(method, env, first_only)`
    runs one child. Each method's compile caches start empty (its own: kernels another method
    compiled would not be its first call's); in the first round each method of `warm` is
    followed by a child that times only the first call, with the caches its first child
    filled (`warm_first_s`; `warm_kernels_s`: when a traced step's kernels were ready). A list
    of {method: result} per round."""
    results: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="tracegrad-bench-") as cache:
        for r in range(rounds):
            results.append({})
            for method in methods:
                env = cache_env(os.path.join(cache, method))
                result = measure(method, method_env(method, env), False)
                if r == 0 and method in warm and "first_s" in result:
                    again = measure(method, method_env(method, env), True)
                    result["warm_first_s"] = again.get("first_s")
                    result["warm_kernels_s"] = again.get("kernels_s")
                results[r][method] = result
    return results


def paired(results: list[dict], method: str, against: Sequence[str]) -> list[float]:
    """`method`'s step time over the fastest of `against`'s in the same round, round by round:
    a ratio of neighbours in time, as free of the host's drift as it gets."""
    ratios = []
    for rnd in results:
        mine = rnd.get(method, {}).get("median_s")
        theirs = [rnd[m]["median_s"] for m in against if "median_s" in rnd.get(m, {})]
        if mine and theirs:
            ratios.append(mine / min(theirs))
    return ratios


TABLE = ("method", "step ms", "range ms", "x torch", "x floor", "first call s", "warm first s",
         "peak RSS MB", "loss", "after 1 update", "busy elsewhere")  # fmt: skip


def _cell(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def print_table(results: list[dict], reference: str = "torch", floor: str = "floor") -> None:
    """A Markdown table, one row per method: the median of its rounds' step medians and their
    range, its step over `reference`'s of the same round (the median of the rounds' ratios) and
    over the median `floor`, the first call (the first round's: empty compile caches, "kernels"
    when a traced step's background compilation was done) and again with warm caches, the
    largest peak RSS, the first round's losses and the largest share of the host that other
    processes kept busy while it was timed."""
    print("| " + " | ".join(TABLE) + " |\n|---|" + "---:|" * (len(TABLE) - 1))
    floors = [rnd[floor]["median_s"] for rnd in results if "median_s" in rnd.get(floor, {})]
    floor_s = statistics.median(floors) if floors else None
    for method, first in results[0].items():
        runs = [rnd[method] for rnd in results if "median_s" in rnd.get(method, {})]
        if not runs:
            why = first.get("na") or f"error: {first.get('error', first)}"
            print(f"| {method} | {why} |" + " |" * (len(TABLE) - 2))
            continue
        medians = [r["median_s"] * 1e3 for r in runs]
        ratios = paired(results, method, (reference,))
        first_call = _cell(first.get("first_s"), ".2f")
        if "kernels_s" in first:
            first_call += f" (kernels {first['kernels_s']:.1f})"
        warm_call = _cell(first.get("warm_first_s"), ".2f")
        if first.get("warm_kernels_s") is not None:
            warm_call += f" (kernels {first['warm_kernels_s']:.1f})"
        cells = [
            method,
            f"{statistics.median(medians):.1f}",
            f"{min(medians):.1f}-{max(medians):.1f}" if len(medians) > 1 else "",
            _cell(statistics.median(ratios) if ratios else None, ".2f"),
            _cell(statistics.median(medians) / 1e3 / floor_s if floor_s else None, ".2f"),
            first_call,
            warm_call,
            f"{max(r['peak_rss_mb'] for r in runs):.0f}",
            _cell(first.get("loss1"), ".6f"),
            _cell(first.get("loss2"), ".6f"),
            _cell(max(r.get("busy_elsewhere", 0.0) for r in runs), ".0%"),
        ]
        print("| " + " | ".join(cells) + " |")


def print_agreement(results: list[dict], reference: str = "torch") -> None:
    """Each first loss relative to `reference`'s (tracegrad traced's where it did not run)."""
    losses = {m: r["loss1"] for m, r in results[0].items() if r.get("loss1") is not None}
    ref = next((m for m in (reference, "tg-traced") if m in losses), None)
    if ref is None or len(losses) < 2:
        return
    diffs = ", ".join(f"{m} {abs(v / losses[ref] - 1):.1e}" for m, v in losses.items() if m != ref)
    print(f"first loss relative to {ref}'s: {diffs}")


def print_ratios(results: list[dict], method: str = "tg-traced") -> None:
    """`method`'s step over PyTorch eager's, and over the faster of eager and torch.compile,
    round by round (the targets' ratios)."""
    against = {"PyTorch eager": ("torch",), "the faster PyTorch": ("torch", "torch-compile")}
    for name, others in against.items():
        ratios = paired(results, method, others)
        if ratios:
            listed = ", ".join(f"{x:.2f}" for x in ratios)
            print(f"{method} / {name}, round by round: {listed} "
                  f"(median {statistics.median(ratios):.2f})")  # fmt: skip


def print_summary(summary: list[tuple[str, float]], column: str) -> None:
    """One row a model (its name, its median ratio: `column`) and their geometric mean."""
    print(f"\n| model | {column} |\n| --- | ---: |")
    for name, ratio in summary:
        print(f"| {name} | {ratio:.2f} |")
    if summary:
        print(f"| geometric mean | {statistics.geometric_mean(r for _, r in summary):.2f} |")


def model_parser(
    doc: str, models: Sequence[str], methods: Sequence[str]
) -> argparse.ArgumentParser:
    """The arguments of a script that trains models a step on tracegrad and PyTorch, each method
    in a child of its own (`compare_models`); `--profile` reports a traced step instead."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "MODEL"))
    parser.add_argument("--models", nargs="+", choices=list(models), default=list(models))
    parser.add_argument("--methods", nargs="+", choices=methods, default=["tg-traced", "torch"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=15, help="timed steps per child, at most")
    parser.add_argument("--budget", type=float, default=10.0, help="seconds of timed steps")
    parser.add_argument("--profile", choices=list(models), help="where the traced step's time "
                        "goes, instead (zoo.py's report)")  # fmt: skip
    return parser


def compare_models(script: str, args: argparse.Namespace, about: Callable[[str], str],
                   extra: Sequence[str] = ()) -> None:  # fmt: skip
    """`script --child METHOD MODEL` for each of `args.models` and `args.methods`, in rounds: a
    table per model (headed by `about(model)`), then traced / PyTorch eager per model and their
    geometric mean; `extra` arguments go to every child."""
    summary = []
    for name in args.models:

        def measure(method: str, env: dict, first_only: bool, name: str = name) -> dict:
            cmd = [sys.executable, script, "--child", method, name, "--steps",
                   str(0 if first_only else args.steps), "--budget", str(args.budget),
                   *extra]  # fmt: skip
            return run_marked(cmd, method_env(method, env))

        results = run_rounds(measure, args.methods, args.rounds)
        print(f"\n### {name}: {about(name)}\n")
        print_table(results)
        ratios = paired(results, "tg-traced", ("torch",))
        if ratios:
            summary.append((name, statistics.median(ratios)))
    print_summary(summary, "tg-traced / PyTorch eager (median of rounds)")
    print("\nBLAS: " + "; ".join(blas_info()))


def runnable(method: str, step: Callable[..., Any], args: tuple) -> Callable[[], float]:
    """`run()`: `step(*args)`'s loss as a float. A traced step's also has `traced`,
    `wait_for_kernels` and `arguments` (for its profile), an eager one's `wait_for_kernels`
    (its kernels load while the first steps run NumPy, as in zoo.py)."""

    def run() -> float:
        return float(step(*args).detach())

    if method == "tg-traced":
        run.traced, run.wait_for_kernels = step, step.wait_for_kernels
        run.arguments = lambda: args
    elif method == "tg-eager":
        from tracegrad.runtime.eager import wait_for_kernels

        run.wait_for_kernels = wait_for_kernels
    return run


# --- child side ---------------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Lower the kernel's RSS high-water mark to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def high_water_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return peak_rss_mb()


def blas_info() -> list[str]:
    """The BLAS libraries loaded now and the kernel each picked (threadpoolctl if present)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        import numpy as np

        config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return [f"{config['name']} {config['version']} (install threadpoolctl to see the kernel)"]
    return [
        f"{i['internal_api']} {i['version']} {i.get('architecture', '?')} "
        f"{i['num_threads']} threads ({os.path.basename(i['filepath'])})"
        for i in threadpool_info()
        if i["user_api"] == "blas"
    ]


def cpu_ticks() -> tuple[float, float]:
    """(busy seconds of the whole machine, CPU seconds of this process) so far."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    own = os.times()
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def busy_elsewhere(start: tuple[float, float], wall: float) -> float:
    """Share of the machine's cores that other processes kept busy since `start` (over a short
    `wall`, the clock ticks of /proc/stat make it rough: at most 1)."""
    busy, own = cpu_ticks()
    return min(1.0, max(0.0, (busy - start[0]) - (own - start[1])) / (wall * os.cpu_count()))


def timed(step) -> tuple[float, float]:
    start = time.perf_counter()
    loss = step()
    return time.perf_counter() - start, loss


def run_child(method: str, workload: str, steps: int, budget: float, memory: bool) -> dict:
    from steps import build, unavailable
    from workloads import WORKLOADS

    reason = unavailable(method)
    if reason:
        return {"na": reason}
    start = time.perf_counter()
    step = build(method, WORKLOADS[workload])
    result: dict[str, Any] = {"setup_s": time.perf_counter() - start, "rss_setup_mb": rss_mb()}
    result.update(time_step(step, steps, budget))
    if memory:
        result.update(measure_step_memory(step))
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def time_step(
    step: Callable[[], float], steps: int, budget: float, least: float = 0.0
) -> dict[str, Any]:
    """Time the first call (for a traced step also until its kernels, compiled in the
    background, were ready: `kernels_s`), then one warm-up call (its loss is the loss after one
    update), then `steps` calls, or fewer (at least one) once they have taken `budget` seconds,
    or more while they have taken less than `least` seconds (a step of a millisecond).
    The warm-up may trace again (a step that sets its grads to None first starts its second
    call with grads where the first had none), so the kernels are waited for once more."""
    result: dict[str, Any] = {"times_s": []}
    result["first_s"], result["loss1"] = timed(step)
    if hasattr(step, "wait_for_kernels"):  # a traced step's first calls run NumPy meanwhile
        result["kernels_s"] = result["first_s"] + timed(step.wait_for_kernels)[0]
    if steps > 0:
        result["loss2"] = timed(step)[1]
        if hasattr(step, "wait_for_kernels"):
            step.wait_for_kernels()
        ticks, times, spent = cpu_ticks(), result["times_s"], 0.0
        while not times or spent < min(least, budget) or len(times) < steps and spent < budget:
            times.append(timed(step)[0])
            spent += times[-1]
        result["median_s"] = statistics.median(times)
        result["busy_elsewhere"] = busy_elsewhere(ticks, spent)
    result["peak_rss_mb"] = peak_rss_mb()
    result["blas"] = blas_info()
    return result


def measure_step_memory(step) -> dict[str, float]:
    """Peak RSS and tracemalloc peak of one more step (after warm-up). A traced step's arena
    was allocated by the warm-up and is reused, so tracemalloc does not see it again: it is
    added to the step's peak (`held`). The warm-up ends with a step of its own: the first call
    after a plan's kernels are ready allocates that plan's arena (counted twice otherwise)."""
    step()
    before = rss_mb()
    reset = reset_peak_rss()
    tracemalloc.start()
    step()
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    held = getattr(step, "held_bytes", lambda: 0)()
    return {
        "step_rss_before_mb": before,
        "step_peak_rss_mb": high_water_mb() if reset else float("nan"),
        "step_held_mb": held / 2**20,
        "step_tracemalloc_peak_mb": (held + traced_peak) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("workload")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()
    result = run_child(args.method, args.workload, args.steps, args.budget, args.memory)
    print(MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

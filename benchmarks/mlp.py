"""Time one MLP training step (forward, backward, SGD) per method, against the GEMM floor.

    python benchmarks/mlp.py [--workload wide|gelu|deep|all] [--steps N] [--methods ...]

Every method runs in a process of its own (peak RSS is that process's), from the same init and
data (workloads.py). Per workload it prints a Markdown table: the median step time and its ratio
to the GEMM floor measured in the same run, the first call's time (for traced steps: with an
empty kernel cache, then again in a new process with the cache warm; the first calls run NumPy
while the kernels compile in the background, and the seconds until they were ready follow in
parentheses), the peak RSS, and the loss before and after one update, which must agree across
methods.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from typing import Any

from harness import child_env, measure
from workloads import WORKLOADS, Workload

METHODS = ["gemm", "numpy", "torch", "jax", "tg-eager", "tg-numpy", "tg-numba"]
TRACED = ("tg-numpy", "tg-numba")
LOSS_METHODS = ("numpy", "torch", "jax", "tg-eager", "tg-numpy", "tg-numba")
LOSS_TOLERANCE = 1e-4
NOISY = 0.2  # share of the cores used by other processes above which a row is not trusted
# The traced (numba) step's targets, per workload: the ratio to the GEMM floor.
FLOOR_TARGET = {"wide": 1.1, "gelu": 1.3, "deep": 1.3}


def run_method(method: str, w: Workload, steps: int, budget: float) -> dict[str, Any]:
    """Measure one method; a traced one twice: cold caches (tracegrad's kernels and Numba's own,
    both in a fresh directory), then the first call again in a new process with them warm."""
    if method not in TRACED:
        return measure(method, w.name, steps, budget)
    cache = tempfile.mkdtemp(prefix="tracegrad-bench-cache-")
    try:
        env = child_env(TRACEGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
        result = measure(method, w.name, steps, budget, env=env)
        if "first_s" in result:
            warm = measure(method, w.name, 0, budget, env=env)
            result["warm_first_s"] = warm.get("first_s")
        return result
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def faster(first: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """The GEMM floor is measured before and after the other methods; other work on the
    machine only ever slows it down, so the faster run is the floor."""
    best = min((first, again), key=lambda r: r.get("median_s", float("inf")))
    return {**best, "floor_runs_s": [r.get("median_s") for r in (first, again)]}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


COLUMNS = (
    "method",
    "median ms",
    "x GEMM",
    "steps",
    "busy elsewhere",
    "first call s",
    "warm first s",
    "peak RSS MB",
    "loss before",
    "loss after",
)


def row(method: str, r: dict[str, Any], floor: float | None) -> list[str]:
    if "median_s" not in r:
        return [method, r.get("na") or "error: " + r.get("error", "?")]
    return [
        method,
        f"{r['median_s'] * 1e3:.1f}",
        _fmt(r["median_s"] / floor if floor else None, ".2f"),
        str(len(r["times_s"])),
        f"{r['busy_elsewhere']:.0%}",
        f"{r['first_s']:.2f}" + (f" ({r['kernels_s']:.1f})" if "kernels_s" in r else ""),
        _fmt(r.get("warm_first_s"), ".2f"),
        f"{r['peak_rss_mb']:.0f}",
        _fmt(r.get("loss1"), ".6f"),
        _fmt(r.get("loss2"), ".6f"),
    ]


def table(w: Workload, results: dict[str, dict[str, Any]]) -> str:
    floor = results.get("gemm", {}).get("median_s")
    rows = [COLUMNS, ("---",) + ("---:",) * (len(COLUMNS) - 1)]
    rows += [row(method, r, floor) for method, r in results.items()]
    lines = ["| " + " | ".join(cells) + " |" for cells in rows]
    if floor:
        runs = ", ".join(_fmt(t and t * 1e3, ".1f") for t in results["gemm"]["floor_runs_s"])
        lines.append(
            f"\nGEMM floor: {w.matmul_flops / floor / 1e9:.1f} GFLOP/s "
            f"({w.matmul_flops / 1e9:.1f} GFLOP per step; the faster of {runs} ms, measured "
            "first and last)"
        )
    return "\n".join(lines)


def loss_check(results: dict[str, dict[str, Any]]) -> str:
    """Each method's loss before the first update and its decrease over one update, relative to
    NumPy's: the first checks the forward pass, the second the gradients."""
    ref = results.get("numpy", {})
    if "loss2" not in ref:
        return "loss check: no NumPy reference"
    parts, worst = [], 0.0
    for method in LOSS_METHODS[1:]:
        r = results.get(method, {})
        if "loss2" not in r:
            continue
        before = abs(r["loss1"] - ref["loss1"]) / abs(ref["loss1"])
        drop = r["loss1"] - r["loss2"], ref["loss1"] - ref["loss2"]
        step = abs(drop[0] - drop[1]) / abs(drop[1])
        worst = max(worst, before, step)
        parts.append(f"{method} {before:.1e}/{step:.1e}")
    if not parts:
        return "loss check: no method to compare with numpy"
    verdict = "OK" if worst <= LOSS_TOLERANCE else "MISMATCH"
    return (
        "loss check, relative to numpy (loss before / its decrease over one update): "
        f"{', '.join(parts)} -> {verdict} (tolerance {LOSS_TOLERANCE:g})"
    )


def targets(w: Workload, results: dict[str, dict[str, Any]]) -> str:
    """The targets for the traced numba step on this workload, met or not."""
    tg = results.get("tg-numba", {})
    if "median_s" not in tg:
        return "targets: tg-numba not measured"
    lines = []
    floor = results.get("gemm", {}).get("median_s")
    if floor:
        ratio, goal = tg["median_s"] / floor, FLOOR_TARGET[w.name]
        lines.append(_verdict(f"x GEMM floor {ratio:.2f} <= {goal}", ratio <= goal))
    if w.name in ("gelu", "deep"):
        for peer in ("jax", "torch"):
            if "median_s" in results.get(peer, {}):
                speedup = results[peer]["median_s"] / tg["median_s"]
                lines.append(_verdict(f"speed {speedup:.2f}x {peer}'s > 1", speedup > 1))
    eager = results.get("tg-eager", {})
    if w.name == "deep" and "peak_rss_mb" in eager:
        share = tg["peak_rss_mb"] / eager["peak_rss_mb"]
        lines.append(_verdict(f"peak RSS {share:.2f} of eager's <= 0.5", share <= 0.5))
    if w.name == "gelu":
        lines.append(_verdict(f"first call cold {tg['first_s']:.2f} s < 3", tg["first_s"] < 3))
        warm = tg.get("warm_first_s")
        if warm is not None:
            lines.append(_verdict(f"first call warm {warm:.2f} s < 0.5", warm < 0.5))
    return "targets (tg-numba): " + "; ".join(lines)


def _verdict(text: str, ok: bool) -> str:
    return f"{text} {'met' if ok else 'NOT met'}"


def machine_line(results: dict[str, dict[str, Any]], load: tuple[float, ...]) -> str:
    blas = results.get("gemm", {}).get("blas") or ["?"]
    return (
        f"{os.cpu_count()} cores, load average {load[0]:.2f} before and {os.getloadavg()[0]:.2f} "
        f"after; BLAS: {'; '.join(blas)}; children run without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE"
    )


def noise_warning(results: dict[str, dict[str, Any]]) -> str:
    """Name the rows timed while other processes took a real share of the 2 cores."""
    noisy = [m for m, r in results.items() if r.get("busy_elsewhere", 0) > NOISY]
    if not noisy:
        return f"quiet: no row ran while other processes used more than {NOISY:.0%} of the cores"
    return (
        f"NOISY: {', '.join(noisy)} ran while other processes used more than {NOISY:.0%} "
        "of the cores; rerun them on a quiet machine"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all")
    parser.add_argument("--steps", type=int, help="timed steps per method (default per workload)")
    parser.add_argument(
        "--budget",
        type=float,
        default=10.0,
        help="stop timing a method after about this many seconds (>= 1 step)",
    )
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS)
    parser.add_argument("--json", help="also write all results to this file")
    args = parser.parse_args()
    names = list(WORKLOADS) if args.workload == "all" else [args.workload]
    methods = ["gemm"] + [m for m in args.methods if m != "gemm"]
    everything = {}
    for name in names:
        w = WORKLOADS[name]
        load = os.getloadavg()
        steps = args.steps or w.steps
        results = {m: run_method(m, w, steps, args.budget) for m in methods}
        results["gemm"] = faster(results["gemm"], run_method("gemm", w, steps, args.budget))
        everything[name] = results
        print(f"\n### {w.describe()}\n")
        print(table(w, results))
        print(machine_line(results, load))
        print(noise_warning(results))
        print(loss_check(results))
        print(targets(w, results), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=1)


if __name__ == "__main__":
    main()

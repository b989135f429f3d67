"""Peak memory of one training step, eager vs traced, each in a process of its own.

    python benchmarks/memory.py [--workload deep] [--methods tg-eager tg-numpy tg-numba numpy]

After the first call (the warm-up), one more step runs with the kernel's RSS high-water mark
reset and tracemalloc on (NumPy reports its buffers to tracemalloc). A traced step reuses the
arena its warm-up allocated, so that arena ("held") is added to its tracemalloc peak. Prints both
peaks per method and the ratio of each traced method to tracegrad eager; the target is
traced/eager <= 0.6 on `deep`.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from harness import child_env, measure
from workloads import WORKLOADS

TARGET = 0.6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=list(WORKLOADS), default="deep")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["tg-eager", "tg-numpy", "tg-numba", "numpy"],
        choices=["numpy", "tg-eager", "tg-numpy", "tg-numba"],
    )
    args = parser.parse_args()
    w = WORKLOADS[args.workload]
    results = {}
    with tempfile.TemporaryDirectory(prefix="tracegrad-bench-cache-") as cache:
        env = child_env(TRACEGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
        for method in args.methods:
            results[method] = measure(method, w.name, steps=0, memory=True, env=env)
    print(f"\n### peak memory of one step, {w.describe()}\n")
    print(
        "| method | RSS before step MB | step peak RSS MB | held MB | tracemalloc peak MB "
        "| RSS / eager | tracemalloc / eager |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    eager = results.get("tg-eager", {})
    for method, r in results.items():
        if "step_peak_rss_mb" not in r:
            print(f"| {method} | {r.get('na') or 'error: ' + r.get('error', '?')} |")
            continue
        print(
            f"| {method} | {r['step_rss_before_mb']:.0f} | {r['step_peak_rss_mb']:.0f} "
            f"| {r['step_held_mb']:.0f} | {r['step_tracemalloc_peak_mb']:.0f} "
            f"| {_ratio(r, eager, 'step_peak_rss_mb')} "
            f"| {_ratio(r, eager, 'step_tracemalloc_peak_mb')} |"
        )
    for method in ("tg-numpy", "tg-numba"):
        r = results.get(method, {})
        if "step_tracemalloc_peak_mb" in r and "step_tracemalloc_peak_mb" in eager:
            share = r["step_tracemalloc_peak_mb"] / eager["step_tracemalloc_peak_mb"]
            met = "met" if share <= TARGET else "NOT met"
            print(f"{method}: traced/eager tracemalloc peak {share:.2f} <= {TARGET} {met}")


def _ratio(r: dict, eager: dict, key: str) -> str:
    return f"{r[key] / eager[key]:.2f}" if key in eager else "-"


if __name__ == "__main__":
    main()

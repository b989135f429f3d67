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
import time
import tracemalloc
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
    return run_marked(cmd, env or child_env(), timeout)


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
    """Share of the machine's cores that other processes kept busy since `start`."""
    busy, own = cpu_ticks()
    return max(0.0, (busy - start[0]) - (own - start[1])) / (wall * os.cpu_count())


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
    result["first_s"], result["loss1"] = timed(step)
    if hasattr(step, "wait_for_kernels"):  # a traced step's first calls run NumPy meanwhile
        result["kernels_s"] = result["first_s"] + timed(step.wait_for_kernels)[0]
    times = []
    if steps > 0:
        result["loss2"] = timed(step)[1]
        ticks = cpu_ticks()
        while len(times) < steps and (not times or sum(times) < budget):
            times.append(timed(step)[0])
        result["median_s"] = statistics.median(times)
        result["busy_elsewhere"] = busy_elsewhere(ticks, sum(times))
    result["times_s"] = times
    if memory:
        result.update(measure_step_memory(step))
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

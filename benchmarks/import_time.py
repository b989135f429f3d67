"""How long `import tracegrad` takes beside `import numpy`, each in fresh processes.

    python benchmarks/import_time.py [--runs 10]

Each import runs in a new interpreter under `python -X importtime`; the time of a run is the
cumulative microseconds of its top-level module. Prints the median of each, their difference and
their ratio. The target is tracegrad <= numpy + 0.3 s: the import loads NumPy and what eager
autodiff needs; Numba, llvmlite, networkx, matplotlib and SciPy load when a step first needs them
(a trace that compiles kernels, a pass that uses networkx, a picture).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 0.3
HEAVY = ("numba", "llvmlite", "networkx", "matplotlib", "scipy")


def import_seconds(module: str) -> float:
    """Seconds `import module` takes in a fresh interpreter, by `-X importtime`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT,
           os.environ.get("PYTHONPATH")]))}  # fmt: skip
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                         capture_output=True, text=True, env=env, check=True)  # fmt: skip
    for line in out.stderr.splitlines():  # "import time: self | cumulative | name"
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module:
            return int(parts[1]) / 1e6
    raise RuntimeError(f"-X importtime printed no line for {module}:\n{out.stderr[-500:]}")


def heavy_modules_loaded() -> list[str]:
    """Which of the heavy libraries `import tracegrad` loads (none is the intent)."""
    code = f"import sys, tracegrad; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)  # fmt: skip
    return out.stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per import (10)")
    args = parser.parse_args()
    # an install has its bytecode; a checkout run under PYTHONDONTWRITEBYTECODE would otherwise
    # compile every changed module in every process and time the compiler
    compileall.compile_dir(os.path.join(ROOT, "tracegrad"), quiet=1)
    numpy_s = statistics.median(import_seconds("numpy") for _ in range(args.runs))
    tracegrad_s = statistics.median(import_seconds("tracegrad") for _ in range(args.runs))
    print(f"import numpy:     {numpy_s * 1e3:7.1f} ms (median of {args.runs} fresh processes)")
    print(f"import tracegrad: {tracegrad_s * 1e3:7.1f} ms (NumPy included)")
    extra = tracegrad_s - numpy_s
    print(f"tracegrad - numpy: {extra * 1e3:.1f} ms (target <= {TARGET_S * 1e3:.0f} ms); "
          f"ratio tracegrad / numpy: {tracegrad_s / numpy_s:.2f}")  # fmt: skip
    heavy = heavy_modules_loaded()
    print(f"heavy libraries loaded by the import: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()

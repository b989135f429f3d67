"""`import tracegrad` stays light: NumPy and what eager autodiff needs. Numba, llvmlite,
networkx, matplotlib and SciPy load when first needed (a trace that compiles kernels, a pass that
cuts with networkx, a picture); benchmarks/import_time.py times it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numba", "llvmlite", "networkx", "matplotlib", "scipy")


def loaded_after(code: str) -> set[str]:
    """The heavy libraries a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACEGRAD_BACKGROUND_COMPILE": "0"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         timeout=300, check=True)  # fmt: skip
    return set(out.stdout.split())


def test_import_loads_no_heavy_library():
    assert loaded_after("import tracegrad") == set()


def test_eager_autodiff_and_a_numpy_trace_load_no_compiler():
    code = (
        "import numpy as np, tracegrad as tg\n"
        "w = tg.tensor(np.ones(3, np.float32), requires_grad=True)\n"
        "(tg.tanh(w) * w).sum().backward()\n"
        "step = tg.trace(lambda x: (w * x).sum(), backend='numpy', passes=[])\n"
        "step(np.ones(3, np.float32))"
    )
    assert loaded_after(code) == set()


def test_what_needs_them_loads_them():
    code = (
        "import numpy as np, tracegrad as tg\n"
        "w = tg.tensor(np.ones((256, 256), np.float32), requires_grad=True)\n"
        "def step(x):\n"
        "    loss = tg.tanh(x @ w).sum()\n"
        "    loss.backward()\n"
        "    return loss\n"
        "tg.trace(step)(np.ones((256, 256), np.float32))"
    )
    assert {"numba", "networkx"} <= loaded_after(code)


def test_import_quiets_numpy_floating_warnings_of_ops_only():
    """log(0), 0 / 0, exp(1000) as PyTorch gives them: silently, eager and traced (under -W error,
    where a warning would raise); NumPy called by the user still warns."""
    code = (
        "import numpy as np, tracegrad as tg\n"
        "x = tg.zeros(2)\n"
        "print(tg.log(x)[0].item(), (x / x)[0].item(), tg.exp(x + 1000)[0].item())\n"
        "step = tg.trace(lambda x: tg.log(x).sum(), backend='numpy')\n"
        "print(step(x).item())\n"
        "try:\n    np.log(np.zeros(1))\nexcept RuntimeWarning as e:\n    print(e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACEGRAD_BACKGROUND_COMPILE": "0"}
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                         text=True, env=env, timeout=300, check=True)  # fmt: skip
    assert out.stdout.split("\n")[:3] == [
        "-inf nan inf",
        "-inf",
        "divide by zero encountered in log",
    ]

"""Kernels on read-only file systems: a read-only install with an unwritable home, and a
read-only kernel cache directory. Each case runs in a child process against real read-only
mounts (tmpfs and bind mounts), so it is skipped where this process may not mount."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import warnings, numpy as np
warnings.simplefilter("always")
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value
from tracegrad.compiler.kernels import compile_group
x, y = Value((64,), np.float32), Value((64,), np.float32)
kernel = compile_group([x], [Node(P.exp, [x], [y])], [y])
out = np.empty(64, np.float32)
kernel(np.zeros(64, np.float32), out)
assert (out == 1.0).all()
print("ok")
"""


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def read_only(tmp_path):
    """`make(path, source=None)`: `path` becomes a read-only mount (of `source`, if given)."""
    mounted = []

    def make(path: Path, source: Path | None = None) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        try:
            if source is None:
                mount("-t", "tmpfs", "-o", "ro,size=1m,mode=0700", "tmpfs", str(path))
            else:
                mount("--bind", str(source), str(path))
                mounted.append(path)
                mount("-o", "remount,ro,bind", str(path))
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            pytest.skip(f"cannot make a read-only mount here: {e}")
        if path not in mounted:
            mounted.append(path)
        return path

    yield make
    for path in reversed(mounted):
        subprocess.run(["umount", str(path)], capture_output=True)


def run_child(extra: dict[str, str], pythonpath: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "TRACEGRAD_"))}
    env |= {"PYTHONPATH": str(pythonpath), "PYTHONDONTWRITEBYTECODE": "1"} | extra
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=120, cwd="/")  # fmt: skip


def test_a_read_only_install_with_an_unwritable_home_still_caches_kernels(tmp_path, read_only):
    source = tmp_path / "src"
    for package in ("tracegrad", "passes"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    install = read_only(tmp_path / "install", source)
    home = read_only(tmp_path / "home")
    cache = tmp_path / "cache"
    child = run_child(
        {"HOME": str(home), "XDG_CACHE_HOME": str(home), "TRACEGRAD_CACHE_DIR": str(cache)},
        install,
    )
    assert child.returncode == 0, child.stderr
    assert list((cache / "numba").rglob("*.nbi")), "the helpers' Numba cache went elsewhere"


def test_a_read_only_cache_directory_says_so_and_compiles_elsewhere(tmp_path, read_only):
    cache = read_only(tmp_path / "cache")  # empty, 0700, ours: only writing fails
    child = run_child({"TRACEGRAD_CACHE_DIR": str(cache)}, ROOT)
    assert child.returncode == 0, child.stderr
    assert "kernel cache directory unusable" in child.stderr and "Read-only" in child.stderr


SIGMOID_AND_TANH = """
import numpy as np
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value
from tracegrad.compiler.kernels import compile_group
for name in ("sigmoid", "tanh"):
    x, y = Value((64,), np.float32), Value((64,), np.float32)
    kernel = compile_group([x], [Node(getattr(P, name), [x], [y])], [y])
    out = np.empty(64, np.float32)
    kernel(np.full(64, 0.5, np.float32), out)
    print(name, kernel.path.stem, repr(float(out[0])))
"""


@pytest.mark.parametrize("suffix", [".nbc", ".nbi"])
def test_kernel_files_swapped_in_the_cache_are_not_used_for_each_other(tmp_path, suffix):
    """Numba's cache files of sigmoid's and tanh's kernels swapped: the next process checks
    that each file names its own kernel's module and compiles both afresh, rather than loading
    tanh's machine code for sigmoid."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "TRACEGRAD_"))}
    env |= {"PYTHONPATH": str(ROOT), "TRACEGRAD_CACHE_DIR": str(tmp_path)}

    def run() -> dict[str, tuple[str, float]]:
        child = subprocess.run([sys.executable, "-c", SIGMOID_AND_TANH], env=env, cwd="/",
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert child.returncode == 0, child.stderr
        return {name: (module, float(value))
                for name, module, value in map(str.split, child.stdout.splitlines())}  # fmt: skip

    want = run()
    assert want["sigmoid"][1] == pytest.approx(1 / (1 + np.exp(-0.5)), rel=1e-6)
    assert want["tanh"][1] == pytest.approx(np.tanh(0.5), rel=1e-6)
    cached = tmp_path / "__pycache__"
    files = {kind: next(cached.glob(f"{module}.*{suffix}")) for kind, (module, _) in want.items()}
    warm = {f: f.read_bytes() for f in cached.iterdir()}
    assert run() == want and {f: f.read_bytes() for f in cached.iterdir()} == warm  # reused
    a, b = files["sigmoid"], files["tanh"]
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    assert run() == want

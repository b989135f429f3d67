"""Train a deep MLP where its eager step does not fit: a child process whose address space is
capped with `resource.setrlimit(RLIMIT_AS, ...)` runs the step eagerly (MemoryError), another
runs it with `@tracegrad.trace(memory_budget=...)` under the same cap (it trains).

    python examples/train_under_budget.py [--depth 32] [--width 256] [--batch 1024] [--steps 5]

Each child builds the model and data first, then caps its address space at what it maps now plus
`--room` MiB. The eager step keeps two arrays of batch x width per layer for backward (a
layer's input and its GELU's); the traced step under a budget keeps a few layers' worth and
recomputes the rest (Linux only).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

import numpy as np

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.nn import functional as F

MARK = "@@outcome "


def mapped_bytes() -> int:
    """The address space this process maps now (VmSize)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def make_step(args: argparse.Namespace):
    """A deep tanh-GELU MLP with SGD, its training step, and one batch of data."""
    nn.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.GELU(approximate="tanh")]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10))
    gm = tg.GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.5)
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((args.batch, args.width), dtype=np.float32))
    labels = tg.tensor(rng.integers(0, 10, args.batch))

    def step(x, labels):
        with gm:
            loss = F.cross_entropy(model(x), labels)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    return step, (x, labels)


def child(mode: str, args: argparse.Namespace) -> dict:
    """Run `args.steps` steps under the address-space cap; what happened."""
    step, data = make_step(args)
    if mode == "traced":
        step = tg.trace(step, backend="numpy", memory_budget=f"{args.budget}MiB")
    warm = np.ones((args.batch, args.width), np.float32)
    warm.T @ (warm @ warm[: args.width])  # BLAS maps its work buffers on first use
    del warm
    cap = mapped_bytes() + args.room * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        losses = [float(step(*data)) for _ in range(args.steps)]
    except MemoryError as e:
        return {"mode": mode, "outcome": "MemoryError", "error": str(e)[:200]}
    return {"mode": mode, "outcome": "trained", "losses": losses}


def run(mode: str, args: argparse.Namespace) -> dict:
    """`child(mode)` in a process of its own (one BLAS thread: fewer mappings to count)."""
    cmd = [sys.executable, __file__, "--child", mode] + [
        f"--{k}={v}" for k, v in vars(args).items() if k != "child" and v is not None
    ]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return {"mode": mode, "outcome": "crashed", "error": proc.stderr.strip()[-500:]}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--depth", type=int, default=32, help="GELU layers (%(default)s)")
    p.add_argument("--width", type=int, default=256, help="features per layer (%(default)s)")
    p.add_argument("--batch", type=int, default=1024, help="rows per step (%(default)s)")
    p.add_argument("--steps", type=int, default=5, help="steps each child runs (%(default)s)")
    p.add_argument("--room", type=int, default=40, help="MiB the cap leaves for the step "
                   "(%(default)s)")  # fmt: skip
    p.add_argument("--budget", type=int, default=14, help="MiB of the traced step's budget "
                   "(%(default)s)")  # fmt: skip
    p.add_argument("--child", choices=["eager", "traced"], help=argparse.SUPPRESS)
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    return parser().parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, dict]:
    args = parse(argv)
    if args.child:
        print(MARK + json.dumps(child(args.child, args)), flush=True)
        return {}
    print(f"address space capped at what each process maps + {args.room} MiB; "
          f"{args.depth} GELU layers of {args.width}, batch {args.batch}")  # fmt: skip
    outcomes = {mode: run(mode, args) for mode in ("eager", "traced")}
    eager, traced = outcomes["eager"], outcomes["traced"]
    print(f"eager step: {eager['outcome']}" + (f" ({eager['error']})" if "error" in eager else ""))
    if sys.platform != "linux":
        print("(RLIMIT_AS and /proc are Linux's: elsewhere the outcomes mean little)")
    if traced["outcome"] == "trained":
        shown = ", ".join(f"{v:.4f}" for v in traced["losses"])
        print(f"traced step, memory_budget={args.budget}MiB: trained, losses {shown}")
    else:
        print(f"traced step, memory_budget={args.budget}MiB: {traced['outcome']} "
              f"({traced.get('error', '')})")  # fmt: skip
    return outcomes


if __name__ == "__main__":
    main()

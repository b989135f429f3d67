"""What one eager op costs, tracegrad's against PyTorch's, on tensors small enough that the
call is all there is to it (8 x 16 float32):

    python benchmarks/eager_ops.py [--rounds 3] [--cases ...]

Unchanged PyTorch code runs eagerly until a step is compiled, and a small model's eager step is
its ops' fixed costs summed: dispatch, the shape rule, the tape. Each case is written once as a
function of the library (`tracegrad.torch` or `torch`); each library runs in a process of its
own (PyTorch on 2 threads), alternating in `--rounds` rounds; a case's time is the median over
7 repeats of the mean over as many calls as fill 20 ms, and a row gives each library's median
over the rounds and the median of the rounds' ratios. Run it with the environment that has
PyTorch; without it only tracegrad's column is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

MARK = "EAGER_OPS "


def cases(torch: Any) -> dict[str, Callable[[], Any]]:
    """Each case's call, its operands made once (the same data in both libraries; the layers'
    weights are each library's own draw)."""
    F, nn, Categorical = torch.nn.functional, torch.nn, torch.distributions.Categorical
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x, y = (torch.tensor(rng.standard_normal((8, 16)).astype(np.float32)) for _ in range(2))
    w = torch.tensor(rng.standard_normal((16, 16)).astype(np.float32), requires_grad=True)
    labels = torch.tensor(rng.integers(0, 16, 8))
    lin = nn.Linear(16, 16)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    z = x.clone()
    opt = torch.optim.SGD(mlp.parameters(), lr=0.01)

    def no_grad_block():
        with torch.no_grad():
            return x * 2 + 1

    def backward():
        lin(x).sum().backward()

    def mlp_step():
        opt.zero_grad()
        F.cross_entropy(mlp(x), labels).backward()
        opt.step()

    def assign():
        z[:, 0] = 0.0

    def tanh_backward():  # the tape's cost per node: a chain of ten small ops and back
        h = w
        for _ in range(10):
            h = torch.tanh(h)
        h.sum().backward()

    return {
        "x + y": lambda: x + y,
        "x * 2": lambda: x * 2,
        "x.exp()": lambda: x.exp(),
        "relu(x)": lambda: torch.relu(x),
        "x.sum()": lambda: x.sum(),
        "x.mean()": lambda: x.mean(),
        "x.sum(1)": lambda: x.sum(1),
        "x.max(1)": lambda: x.max(1),
        "x.view(-1)": lambda: x.view(-1),
        "x.t()": lambda: x.t(),
        "x.transpose(0, 1)": lambda: x.transpose(0, 1),
        "x.unsqueeze(0)": lambda: x.unsqueeze(0),
        "x[0]": lambda: x[0],
        "x[:, 1:3]": lambda: x[:, 1:3],
        "torch.cat([x, y])": lambda: torch.cat([x, y]),
        "x @ w (w requires grad)": lambda: x @ w,
        "linear(x)": lambda: lin(x),
        "softmax(x, -1)": lambda: F.softmax(x, -1),
        "cross_entropy(x, labels)": lambda: F.cross_entropy(x, labels),
        "x * 2 + 1 under no_grad": no_grad_block,
        "dropout(x) (training)": lambda: F.dropout(x, 0.5),
        "x[:, 0] = 0.0": assign,
        "z.zero_()": lambda: z.zero_(),
        "Categorical(logits=x).sample()": lambda: Categorical(logits=x).sample(),
        "10 tanh, sum, backward": tanh_backward,
        "linear(x).sum().backward()": backward,
        "MLP step (2 layers, SGD)": mlp_step,
    }


def time_case(call: Callable[[], Any]) -> float:
    """Seconds a call: the median over 7 repeats of the mean over calls filling ~20 ms."""
    timer = timeit.Timer(call)
    number, _ = timer.autorange()  # calls that take at least 0.2 s
    number = max(1, number // 10)
    return statistics.median(t / number for t in timer.repeat(repeat=7, number=number))


def child(lib: str, names: list[str]) -> None:
    if lib == "torch":
        import torch

        torch.set_num_threads(2)
    else:
        import tracegrad.torch as torch
    calls = cases(torch)
    for name in names:  # warm: the shape rules' caches, PyTorch's first-call paths
        for _ in range(50):
            calls[name]()
    print(MARK + json.dumps({name: time_case(calls[name]) for name in names}))


def run_child(lib: str, names: list[str]) -> dict[str, float] | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", lib, "--cases", *names]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    if done.returncode != 0 or not lines:
        print(f"{lib}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1][len(MARK) :])


def main() -> None:
    import importlib.util

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=("torch", "tracegrad"))
    parser.add_argument("--cases", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = args.cases or _names()
    if args.child:
        return child(args.child, names)
    libs = ["tracegrad"] + (["torch"] if importlib.util.find_spec("torch") else [])
    rounds: list[dict[str, dict[str, float]]] = []
    for _ in range(args.rounds):
        found = {lib: run_child(lib, names) for lib in libs}
        rounds.append({lib: times for lib, times in found.items() if times is not None})
    print("| op | tracegrad us | PyTorch us | tracegrad / PyTorch |\n|---|---:|---:|---:|")
    ratios = []
    for name in names:
        ours = [r["tracegrad"][name] for r in rounds if "tracegrad" in r]
        theirs = [r["torch"][name] for r in rounds if "torch" in r]
        paired = [r["tracegrad"][name] / r["torch"][name] for r in rounds if len(r) == 2]
        ratio = statistics.median(paired) if paired else float("nan")
        ratios.append(ratio)
        torch_us = f"{statistics.median(theirs) * 1e6:.1f}" if theirs else "n/a"
        print(f"| {name} | {statistics.median(ours) * 1e6:.1f} | {torch_us} | {ratio:.1f} |")
    if all(r == r for r in ratios):
        print(f"\ngeometric mean of the ratios: {statistics.geometric_mean(ratios):.2f}")


def _names() -> list[str]:
    """The cases' names, without making their tensors (no library is imported here)."""

    class Stub:
        def __getattr__(self, name: str) -> Any:
            return self

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return self

    return list(cases(Stub()))


if __name__ == "__main__":
    main()

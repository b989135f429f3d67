"""PyTorch's data parallelism, as PyTorch scripts write it: one DistributedDataParallel training
script (below, `rank_main`) started by torchrun on tracegrad (eager, and with the step under
`torch.compile`) and on PyTorch (gloo), with 1 and 2 processes of 1 thread each.

    python benchmarks/ddp.py [--model mlp|cnn] [--steps 20] [--rounds 3]
                             [--torch-python /path/to/python-with-torch]

Every method starts from the same float32 weights and sees the same global batch (split over
the ranks by DistributedSampler's rule: every n-th sample), so their first losses must agree.
A step is timed between barriers on rank 0 (the slower rank's time); each round runs every
method once, and the table gives medians over rounds, the ratio to PyTorch's DDP with the same
number of processes measured in the same round, and the samples/s ratio of 2 processes to 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed import MARK, run  # noqa: E402 (one process per method, one thread each)

MODELS = {"mlp": 512, "cnn": 64}  # global batch


def build(torch, model: str):
    nn = torch.nn
    if model == "mlp":
        return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 10))  # fmt: skip
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10),
    )  # fmt: skip


def data(model: str, steps: int):
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (784,) if model == "mlp" else (3, 32, 32)
    x = rng.standard_normal((steps, MODELS[model], *shape), dtype=np.float32)
    return x, rng.integers(0, 10, (steps, MODELS[model]))


def rank_main(model_name: str, steps: int, compiled: bool) -> None:
    """One rank of the job torchrun started (tracegrad's or PyTorch's `torch`)."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    model = build(torch, model_name)
    rng = np.random.default_rng(1)
    with torch.no_grad():  # the same weights for every library
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.uniform(-0.05, 0.05, tuple(p.shape)).astype(np.float32)))
    net = DDP(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xs, ys = data(model_name, steps + 2)

    def step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    run = torch.compile(step) if compiled else step
    times, losses = [], []
    for i in range(steps + 2):
        x, y = torch.from_numpy(xs[i][rank::size]), torch.from_numpy(ys[i][rank::size])
        dist.barrier()
        start = time.perf_counter()
        loss = run(x, y)
        dist.all_reduce(loss)  # (gloo has no AVG)
        dist.barrier()
        times.append(time.perf_counter() - start)
        losses.append(loss.item() / size)
    if rank == 0:
        result = {"step": statistics.median(times[2:]), "losses": losses[:3]}
        print(MARK + json.dumps(result), flush=True)
    dist.destroy_process_group()


def launch(python: str, on_tracegrad: bool, nproc: int, args: argparse.Namespace,
           compiled: bool) -> dict:  # fmt: skip
    runner = ["-m", "tracegrad", "run", "-m"] if on_tracegrad else ["-m"]
    command = [python, *runner, "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", os.path.abspath(__file__), "--rank", args.model,
               str(args.steps), str(int(compiled))]  # fmt: skip
    return run(command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp", choices=sorted(MODELS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--torch-python",
        default=None,
        help="an interpreter with PyTorch (default: this one, if it has it)",
    )
    parser.add_argument("--rank", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        return rank_main(args.rank[0], int(args.rank[1]), args.rank[2] == "1")
    torch_python = args.torch_python or sys.executable
    methods = {"tracegrad eager": (sys.executable, True, False),
               "tracegrad compiled": (sys.executable, True, True),
               "PyTorch DDP": (torch_python, False, False)}  # fmt: skip
    seen: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.rounds):
        for nproc in (1, 2):
            for name, (python, on_tracegrad, compiled) in methods.items():
                result = launch(python, on_tracegrad, nproc, args, compiled)
                seen.setdefault((name, nproc), []).append(result)
    batch = MODELS[args.model]
    print(f"model {args.model}, global batch {batch}, SGD momentum, 1 thread per process, "
          f"medians of {args.rounds} rounds of {args.steps} steps")  # fmt: skip
    print("| method | processes | ms/step | x PyTorch DDP | 2 processes / 1 (samples/s) | "
          "first losses |\n| --- | ---: | ---: | ---: | ---: | --- |")  # fmt: skip
    for name in methods:
        for nproc in (1, 2):
            runs = seen[name, nproc]
            torch_runs = seen["PyTorch DDP", nproc]
            ratio = statistics.median(
                r["step"] / t["step"] for r, t in zip(runs, torch_runs, strict=True)
            )
            pairs = zip(seen[name, 1], runs, strict=True)
            scaling = (
                ""
                if nproc == 1
                else f"{statistics.median(o['step'] / t['step'] for o, t in pairs):.2f}"
            )
            losses = " ".join(f"{v:.5f}" for v in runs[0]["losses"])
            print(f"| {name} | {nproc} | {statistics.median(r['step'] for r in runs) * 1e3:.1f} "
                  f"| {ratio:.2f} | {scaling} | {losses} |")  # fmt: skip


if __name__ == "__main__":
    main()

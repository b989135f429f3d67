"""GPT-2 small's architecture trained on the CPU, every method in a process of its own:

    python benchmarks/gpt2.py [--methods ...] [--budgets 1200MB ...] [--rounds R] [--steps N]
                              [--layers L] [--context T]

The model (written here, PyTorch's idiom, once for both libraries): vocabulary 50,257, d 768,
12 layers of 12 heads, learned positions for a context of 1,024 used at T = 256, pre-LayerNorm
blocks with causal `scaled_dot_product_attention` and a tanh-GELU MLP of 3,072, the output
projection tied to the token embedding (no bias), no dropout; batch 4 of random tokens, AdamW
(lr 3e-4, weight decay 0.1) in nanoGPT's order (gradients set to None after each update).
tracegrad builds it first and PyTorch loads its float32 weights, so the first losses agree.

Methods: `tg-traced` (`tracegrad.trace`, Numba backend), `tg-traced@SIZE` (the same under
`memory_budget=SIZE`, one per `--budgets` entry), `torch` (eager), `torch-compile`. Rounds are
`zoo.py`'s (round-robin, medians, the first call with empty and warm compile caches, peak RSS
of each process); for tracegrad the plan's planned peak is printed too, and every row's peak
RSS over PyTorch eager's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from functools import partial
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402
from harness import (  # noqa: E402
    MARK,
    print_agreement,
    print_ratios,
    print_table,
    run_marked,
    run_rounds,
    time_step,
)

CONFIG = dict(vocab=50257, positions=1024, context=256, batch=4, d=768, layers=12, heads=12,
              lr=3e-4, weight_decay=0.1)  # fmt: skip


def gpt2_nets(lib: Any, c: dict) -> dict:
    """GPT-2: token and position embeddings, pre-LayerNorm blocks, a final LayerNorm and the
    token embedding again as the output projection."""
    nn, F = lib.nn, lib.nn.functional
    d, heads = c["d"], c["heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            n, t, _ = x.shape
            qkv = self.c_attn(self.ln_1(x)).reshape(n, t, 3, heads, d // heads)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(n, t, d))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(c["vocab"], d), nn.Embedding(c["positions"], d)
            self.h = nn.ModuleList(Block() for _ in range(c["layers"]))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, c["vocab"], bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2's
            for m in self.modules():  # GPT-2's initialization (layer norms keep theirs)
                if isinstance(m, nn.Linear | nn.Embedding):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(lib.arange(idx.shape[1]))
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return {"model": GPT2()}


def gpt2_data(c: dict) -> tuple[tuple, tuple]:
    tokens = np.random.default_rng(1).integers(0, c["vocab"], (c["batch"], c["context"] + 1))
    return (tokens[:, :-1], tokens[:, 1:]), ()


def gpt2_train(lib: Any, nets: dict, c: dict):
    """nanoGPT's training step: forward, loss, backward, AdamW's step, then
    `zero_grad(set_to_none=True)`: no gradient outlives the step, in either library (with
    `zero_grad()` first instead, both keep the last step's gradients between steps)."""
    model, F = nets["model"], lib.nn.functional
    opt = zoo.adamw(lib, model.parameters(), c)

    def step(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


GPT2 = zoo.Model(gpt2_nets, gpt2_train, gpt2_data, CONFIG,
                 about="GPT-2 small's architecture, T 256, batch 4, AdamW")  # fmt: skip


def run_child(method: str, steps: int, budget: float, c: dict) -> dict[str, Any]:
    from steps import unavailable

    base, _, size = method.partition("@")
    reason = unavailable(base.split("-")[0])
    if reason:
        return {"na": reason}
    start = time.perf_counter()
    run = zoo.make_step(GPT2, base, c, memory_budget=size or None)
    result = {"setup_s": time.perf_counter() - start, **time_step(run, steps, budget)}
    if base == "tg-traced":
        result["planned_peak_mb"] = run.traced.latest.memory.peak / 2**20
    return result


def measure(steps: int, budget: float, c: dict, method: str, env: dict, first_only: bool):
    steps = 0 if first_only else steps
    cmd = [sys.executable, os.path.abspath(__file__), "--child", method, "--config",
           json.dumps(c), "--steps", str(steps), "--budget", str(budget)]  # fmt: skip
    return run_marked(cmd, env, timeout=3600.0)


def print_memory(results: list[dict], reference: str = "torch") -> None:
    """Each method's largest peak RSS over PyTorch eager's, and tracegrad's planned peaks."""
    peak = {m: max(r[m]["peak_rss_mb"] for r in results if "peak_rss_mb" in r.get(m, {}))
            for m in results[0] if any("peak_rss_mb" in r.get(m, {}) for r in results)}  # fmt: skip
    for method, mb in peak.items():
        planned = [r[method]["planned_peak_mb"] for r in results if "planned_peak_mb" in r[method]]
        line = f"{method}: peak RSS {mb:.0f} MB"
        if reference in peak and method != reference:
            line += f" ({mb / peak[reference]:.2f}x {reference}'s)"
        if planned:
            line += f", planned peak {statistics.median(planned):.0f} MiB"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="METHOD")
    parser.add_argument("--config", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--methods", nargs="+", default=["tg-traced", "torch", "torch-compile"],
                        help="tg-traced, tg-traced@SIZE, torch, torch-compile")  # fmt: skip
    parser.add_argument("--budgets", nargs="*", default=[],
                        help="memory budgets for extra tg-traced rows, e.g. 1200MB")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per child, at most")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="stop timing a child after this many seconds (>= 1 step)")  # fmt: skip
    parser.add_argument("--layers", type=int, default=CONFIG["layers"])
    parser.add_argument("--context", type=int, default=CONFIG["context"])
    args = parser.parse_args()
    if args.child:
        c = json.loads(args.config)
        print(MARK + json.dumps(run_child(args.child, args.steps, args.budget, c)), flush=True)
        return
    c = {"layers": args.layers, "context": args.context}
    methods = args.methods + [f"tg-traced@{size}" for size in args.budgets]
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    results = run_rounds(partial(measure, args.steps, args.budget, c), methods, args.rounds,
                         warm=("tg-traced", "torch-compile"))  # fmt: skip
    print(f"\n### gpt2: {GPT2.about}, {c}\n")
    print_table(results)
    print_agreement(results)
    print_memory(results)
    for method in methods:
        if method.startswith("tg-traced"):
            print_ratios(results, method)
    blas = next((r["blas"] for r in results[0].values() if r.get("blas")), None)
    print(f"\nBLAS: {'; '.join(blas or ['?'])}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

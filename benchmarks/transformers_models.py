"""Hugging Face transformers' own model code, unchanged, trained a step on PyTorch and on
tracegrad:

    python benchmarks/transformers_models.py [--models gpt2 bert llama] [--methods ...]
                                             [--rounds 2] [--steps 10]

Needs the `transformers` package, and PyTorch for its baseline. Each model is a small
configuration of a family (4 layers of width 256, vocabulary 5,000, batch 8 of 128 tokens, the
last 16 padded: the attention mask is the dtype's lowest where padded), with transformers'
eager attention, dropout 0, AdamW; every parameter drawn from one NumPy generator in both
libraries, so the first losses agree. Methods: `torch` (eager), `torch-compile`, `tg-eager`
(the same code with `import torch` meaning `tracegrad.torch`, as `python -m tracegrad run` does)
and `tg-traced` (its `torch.compile` of the step). Each method runs in a process of its own, the
methods in turn for `--rounds` rounds (`harness.run_rounds`); the table gives medians, and the
rounds' ratios to PyTorch eager.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# last on the path: this folder's kernels.py would stand for the `kernels` package transformers
# imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE] + [HERE]
from harness import (  # noqa: E402
    MARK,
    paired,
    print_agreement,
    print_table,
    run_marked,
    run_rounds,
    time_step,
)

METHODS = ("torch", "torch-compile", "tg-eager", "tg-traced")
BATCH, LENGTH, VOCAB, PADDED = 8, 128, 5000, 16
DROPOUTS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout_prob",
            "attention_probs_dropout_prob", "attention_dropout")  # fmt: skip


def configs(transformers: Any) -> dict[str, tuple[Any, dict]]:
    """Each model's class and configuration keywords (its dropouts set to 0 where it has them)."""
    t = transformers
    return {
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config, dict(n_embd=256, n_layer=4, n_head=4,
                                                       n_positions=256)),
        "bert": (t.BertForMaskedLM, t.BertConfig, dict(hidden_size=256, num_hidden_layers=4,
                                                       num_attention_heads=4,
                                                       intermediate_size=1024)),
        "llama": (t.LlamaForCausalLM, t.LlamaConfig, dict(hidden_size=256, num_hidden_layers=4,
                                                          num_attention_heads=4,
                                                          num_key_value_heads=2,
                                                          intermediate_size=688,
                                                          max_position_embeddings=256)),
    }  # fmt: skip


@contextlib.contextmanager
def library(method: str) -> Iterator[Any]:
    """Inside, `import torch` means the method's library; gives that torch module."""
    if method.startswith("torch"):
        import torch

        yield torch
        return
    import tracegrad.torch as tgt

    with tgt.imported_as_torch():
        yield tgt


def make_step(method: str, name: str, torch: Any) -> Callable[[], float]:
    """The model's training step (zero_grad, forward with labels, backward, AdamW), as the
    method runs it; `run()` gives the loss."""
    import transformers

    model_class, config_class, sizes = configs(transformers)[name]
    config = config_class(vocab_size=VOCAB, attn_implementation="eager", **sizes)
    for key in DROPOUTS:
        if hasattr(config, key):
            setattr(config, key, 0.0)
    model = model_class(config)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor((rng.standard_normal(tuple(p.shape)) * 0.02).astype(np.float32)))
    model.train()
    ids = torch.tensor(rng.integers(0, VOCAB, (BATCH, LENGTH)))
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    mask[:, -PADDED:] = 0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(ids: Any, mask: Any) -> Any:
        opt.zero_grad()
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    if method.endswith("-compile") or method == "tg-traced":
        step = torch.compile(step)

    def run() -> float:
        return float(step(ids, mask).detach())

    if method == "tg-traced":
        run.wait_for_kernels = step.wait_for_kernels
    elif method == "tg-eager":
        from tracegrad.runtime.eager import wait_for_kernels

        run.wait_for_kernels = wait_for_kernels
    return run


def child(method: str, name: str, steps: int, budget: float) -> dict[str, Any]:
    try:
        with library(method) as torch:
            if method.startswith("torch"):
                torch.set_num_threads(2)
            return time_step(make_step(method, name, torch), steps, budget)
    except ImportError as e:
        return {"na": f"needs {e.name}"}


def measure(name: str, steps: int, budget: float) -> Callable[[str, dict, bool], dict]:
    def one(method: str, env: dict[str, str], first_only: bool) -> dict[str, Any]:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", method, name,
               "--steps", str(0 if first_only else steps), "--budget", str(budget)]  # fmt: skip
        return run_marked(cmd, env)

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "MODEL"))
    parser.add_argument("--models", nargs="+", default=["gpt2", "bert", "llama"],
                        choices=["gpt2", "bert", "llama"])  # fmt: skip
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--budget", type=float, default=20.0)
    args = parser.parse_args()
    if args.child:
        import json

        print(MARK + json.dumps(child(*args.child, args.steps, args.budget)), flush=True)
        return
    for name in args.models:
        rounds = run_rounds(measure(name, args.steps, args.budget), args.methods, args.rounds)
        print(f"\n### {name}\n")
        print_table(rounds)
        print_agreement(rounds)
        for method in args.methods[1:]:
            ratios = paired(rounds, method, ["torch"])
            if ratios:
                print(f"{method} / PyTorch eager, round by round: "
                      f"{', '.join(f'{r:.2f}' for r in ratios)} "
                      f"(median {statistics.median(ratios):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()

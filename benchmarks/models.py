"""Two models, a CNN and a GPT, one training step each, every method in a process of its own:

    python benchmarks/models.py [--steps N] [--rounds R] [--workloads cnn gpt] [--methods ...]
                                [--profile]

CNN: batch 256 of 1x28x28; conv 32 3x3 pad 1, ReLU, max-pool 2; conv 64 3x3 pad 1, ReLU,
max-pool 2; fc 3136->128, ReLU; fc 10; SGD with momentum 0.9.
GPT: characters, vocab 96, context 128, batch 16, d 256, 4 layers of 4 heads, MLP 1024 with
tanh-GELU, pre-LayerNorm, learned positions, causal softmax; AdamW.

Methods: tracegrad traced (Numba backend; the first call timed with empty compile caches and
again with warm ones; it runs NumPy calls while the kernels compile in the background, and
"(kernels N)" says how many seconds after its start they were ready), tracegrad eager, PyTorch
eager and torch.compile (its first call also timed cold and warm), and `jax.jit` of the whole
step (forward, loss, grad and a hand-written optimizer update, parameters and optimizer state
donated; NCHW convolutions with `lax.conv_general_dilated`, pooling with `lax.reduce_window`).
torch and jax rows are skipped, with a one-line reason, where the library is not installed.
The same float32 weights (tracegrad's initialization, through `state_dict()`) and data
everywhere; the first losses (and the losses after one update, which check gradients and
optimizer) are printed side by side, the first ones also relative to torch's. Each method runs
in R rounds (3), one child a round, round-robin (`harness.run_rounds`): a row gives the median
of its rounds' step medians and their range, and each step is divided by PyTorch's of the same
round (the targets' ratios, paired). The first call (jax: its compile) is timed apart, in the
first round; peak RSS of each child process. `--profile` instead prints where the traced
step's time goes (`zoo.profile`, in this process). `zoo.py` runs these two models beside
others, with a floor.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from functools import partial

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from harness import (  # noqa: E402
    MARK,
    print_agreement,
    print_ratios,
    print_table,
    run_marked,
    run_rounds,
    time_step,
)

METHODS = ("tg-traced", "tg-eager", "torch", "torch-compile", "jax")
CNN = dict(batch=256, lr=0.01, momentum=0.9)
GPT = dict(vocab=96, context=128, batch=16, d=256, layers=4, heads=4, lr=3e-4)


def config(workload: str, cfg: dict | None = None) -> dict:
    """The workload's sizes and hyperparameters, with `cfg`'s changes (smaller ones in tests)."""
    return {**(CNN if workload == "cnn" else GPT), **(cfg or {})}


def data(workload: str, cfg: dict | None = None):
    rng, c = np.random.default_rng(1), config(workload, cfg)
    if workload == "cnn":
        return (rng.standard_normal((c["batch"], 1, 28, 28)).astype(np.float32),
                rng.integers(0, 10, c["batch"]))  # fmt: skip
    tokens = rng.integers(0, c["vocab"], (c["batch"], c["context"] + 1))
    return tokens[:, :-1], tokens[:, 1:]


def cnn(nn):
    """The CNN, in tracegrad's or PyTorch's nn (same names, same state_dict keys)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10),
    )  # fmt: skip


def tg_model(workload: str, cfg: dict | None = None):
    from tracegrad import nn

    nn.manual_seed(0)
    if workload == "cnn":
        return cnn(nn)
    from train_gpt import GPT as Model

    c = config(workload, cfg)
    return Model(c["vocab"], c["context"], c["d"], c["layers"], c["heads"])


def build_tg(workload: str, traced: bool):
    import tracegrad as tg
    from tracegrad import optim
    from tracegrad.nn import functional as F

    model = tg_model(workload)
    if workload == "cnn":
        opt = optim.SGD(model.parameters(), lr=CNN["lr"], momentum=CNN["momentum"])
    else:
        opt = optim.AdamW(model.parameters(), lr=GPT["lr"])
    gm = tg.GradManager().attach(model.parameters())

    def step(x, y):
        with gm:
            logits = model(x)
            loss = F.cross_entropy(tg.reshape(logits, (-1, logits.shape[-1])), tg.reshape(y, -1))
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    step = tg.trace(step, backend="numba") if traced else step
    x, y = data(workload)
    if not traced:
        x, y = tg.tensor(x), tg.tensor(y)

    def run() -> float:
        return float(step(x, y))

    if traced:
        run.traced = step
        run.wait_for_kernels = step.wait_for_kernels
    return run


def torch_model(workload: str):
    """The PyTorch twin of `tg_model(workload)`, with its weights."""
    import torch

    model = torch_net(workload)
    state = {k: torch.tensor(v.numpy()) for k, v in tg_model(workload).state_dict().items()}
    model.load_state_dict(state)
    return model


def torch_net(workload: str, cfg: dict | None = None):
    """The model in PyTorch, with PyTorch's own initialization."""
    import torch
    from torch import nn

    if workload == "cnn":
        model = cnn(nn)
    else:
        F = torch.nn.functional

        class Block(nn.Module):
            def __init__(self, d, heads):
                super().__init__()
                self.heads = heads
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

            def forward(self, x):
                n, t, d = x.shape
                qkv = self.qkv(self.ln1(x)).view(n, t, 3, self.heads, d // self.heads)
                q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(y.transpose(1, 2).reshape(n, t, d))
                return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                c = config(workload, cfg)
                d = c["d"]
                self.tok, self.pos = nn.Embedding(c["vocab"], d), nn.Embedding(c["context"], d)
                self.blocks = nn.ModuleList(Block(d, c["heads"]) for _ in range(c["layers"]))
                self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, c["vocab"])

            def forward(self, idx):
                x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
                for b in self.blocks:
                    x = b(x)
                return self.head(self.ln(x))

        model = Model()
    return model


def build_torch(workload: str, compiled: bool):
    import torch

    model = torch_model(workload)
    if workload == "cnn":
        opt = torch.optim.SGD(model.parameters(), lr=CNN["lr"], momentum=CNN["momentum"])
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=GPT["lr"], weight_decay=0.01)
    x, y = (torch.tensor(a) for a in data(workload))

    def step():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))  # fmt: skip
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    step = torch.compile(step) if compiled else step
    return lambda: float(step())


# --- jax ----------------------------------------------------------------------------------------


def jax_cnn(p: dict, x):
    """`cnn` over the state_dict's arrays: NCHW activations, OIHW kernels, (out, in) weights."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def conv_relu_pool(h, i):
        h = lax.conv_general_dilated(h, p[f"{i}.weight"], (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))  # fmt: skip
        h = jax.nn.relu(h + p[f"{i}.bias"][:, None, None])
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    h = conv_relu_pool(conv_relu_pool(x, 0), 3)
    h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p["7.weight"].T + p["7.bias"])
    return h @ p["9.weight"].T + p["9.bias"]


def jax_gpt(p: dict, idx):
    """train_gpt's GPT over its state_dict's arrays: pre-LayerNorm blocks, learned positions,
    causal softmax attention, tanh-GELU MLP, an untied head."""
    import jax
    import jax.numpy as jnp

    def linear(h, name):
        return h @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    def layer_norm(h, name, eps=1e-5):
        mean = h.mean(-1, keepdims=True)
        var = jnp.square(h - mean).mean(-1, keepdims=True)
        return (h - mean) / jnp.sqrt(var + eps) * p[f"{name}.weight"] + p[f"{name}.bias"]

    n, t = idx.shape
    d, heads = GPT["d"], GPT["heads"]
    causal = jnp.tril(jnp.ones((t, t), bool))
    x = p["tok.weight"][idx] + p["pos.weight"][:t]
    for i in range(GPT["layers"]):
        b = f"blocks.{i}"
        qkv = linear(layer_norm(x, f"{b}.ln1"), f"{b}.qkv").reshape(n, t, 3, heads, d // heads)
        q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
        scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(d // heads))
        att = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        x = x + linear((att @ v).transpose(0, 2, 1, 3).reshape(n, t, d), f"{b}.proj")
        h = jax.nn.gelu(linear(layer_norm(x, f"{b}.ln2"), f"{b}.fc"), approximate=True)
        x = x + linear(h, f"{b}.out")
    return linear(layer_norm(x, "ln"), "head")


def sgd_momentum(params: dict, grads: dict, state: dict) -> tuple[dict, dict]:
    """PyTorch's SGD with momentum (no dampening): buf = momentum buf + g (buf starts at 0, so
    the first step's buf is g exactly, as torch's clone), p -= lr buf."""
    buf = {k: CNN["momentum"] * state["buf"][k] + g for k, g in grads.items()}
    return {k: p - CNN["lr"] * buf[k] for k, p in params.items()}, {"buf": buf}


def adamw(params: dict, grads: dict, state: dict) -> tuple[dict, dict]:
    """PyTorch's AdamW as build_torch sets it: betas (0.9, 0.999), eps 1e-8, weight decay 0.01
    (decoupled: p *= 1 - lr wd first), bias-corrected moments."""
    import jax.numpy as jnp

    lr, (b1, b2), eps, wd = GPT["lr"], (0.9, 0.999), 1e-8, 0.01
    t = state["t"] + 1
    step_size, root_bc2 = lr / (1 - b1**t), jnp.sqrt(1 - b2**t)
    m = {k: b1 * state["m"][k] + (1 - b1) * g for k, g in grads.items()}
    v = {k: b2 * state["v"][k] + (1 - b2) * g * g for k, g in grads.items()}
    new = {
        k: p * (1 - lr * wd) - step_size * m[k] / (jnp.sqrt(v[k]) / root_bc2 + eps)
        for k, p in params.items()
    }
    return new, {"t": t, "m": m, "v": v}


def build_jax(workload: str):
    """`jax.jit` of forward, loss, grad and update, on the CPU with XLA's default threading;
    parameters and optimizer state are donated, so the update can write over them."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    params = {k: jnp.asarray(v.numpy()) for k, v in tg_model(workload).state_dict().items()}
    zeros = lambda: {k: jnp.zeros_like(p) for k, p in params.items()}  # new buffers: donated
    if workload == "cnn":
        forward, update, opt_state = jax_cnn, sgd_momentum, {"buf": zeros()}
    else:
        forward, update = jax_gpt, adamw
        opt_state = {"t": jnp.zeros((), jnp.float32), "m": zeros(), "v": zeros()}

    def loss_fn(params, x, y):
        logits = forward(params, x)
        logp = jax.nn.log_softmax(logits.reshape(-1, logits.shape[-1]))
        return -jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1).mean()

    @partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return *update(params, grads, opt_state), loss

    x, y = data(workload)
    x, y = jnp.asarray(x), jnp.asarray(y.astype(np.int32))
    state = {"params": params, "opt": opt_state}

    def step() -> float:
        state["params"], state["opt"], loss = train_step(state["params"], state["opt"], x, y)
        return float(loss)  # waits for the result

    return step


def run_child(method: str, workload: str, steps: int, budget: float) -> dict:
    from steps import unavailable

    reason = unavailable(method.split("-")[0])  # torch-compile needs torch
    if reason:
        return {"na": reason}
    start = time.perf_counter()
    if method.startswith("tg"):
        step = build_tg(workload, method == "tg-traced")
    elif method == "jax":
        step = build_jax(workload)
    else:
        step = build_torch(workload, method == "torch-compile")
    return {"setup_s": time.perf_counter() - start, **time_step(step, steps, budget)}


def measure(workload: str, steps: int, budget: float, method: str, env: dict, first_only: bool):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", method, workload,
           "--steps", str(0 if first_only else steps), "--budget", str(budget)]  # fmt: skip
    return run_marked(cmd, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "WORKLOAD"))
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=20.0)
    parser.add_argument("--workloads", nargs="+", default=["cnn", "gpt"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--profile", action="store_true",
                        help="where the traced step's time goes, by op, instead")  # fmt: skip
    args = parser.parse_args()
    if args.profile:
        from zoo import MODELS, profile

        for workload in args.workloads:
            profile(MODELS[workload])
        return
    if args.child:
        print(MARK + json.dumps(run_child(*args.child, args.steps, args.budget)), flush=True)
        return
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for workload in args.workloads:
        run = partial(measure, workload, args.steps, args.budget)
        results = run_rounds(run, args.methods, args.rounds, warm=("tg-traced", "torch-compile"))
        print(f"\n{workload}:\n")
        print_table(results)
        print_agreement(results)
        print_ratios(results)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

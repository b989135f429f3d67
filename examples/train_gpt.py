"""Train a character-level GPT on the Python standard library's own source code, offline.

    pip install -e ".[examples]"
    python examples/train_gpt.py               # about five minutes on 2 cores
    python examples/train_gpt.py --steps 3000  # longer, better; --resume continues from -o

The text is every `.py` file of `sysconfig.get_paths()["stdlib"]` (tests and site-packages
left out), split into training and validation *files*. The model is a pre-LayerNorm decoder
(learned positions, causal attention, tanh-GELU MLP) trained with AdamW; the whole step is
compiled with @tracegrad.trace, and so are the evaluation and the sampling steps. It checkpoints
to OUT/gpt_stdlib.pt (the current directory unless -o), then prints the validation loss beside
the unigram entropy of the characters (what a model that ignores context would score) and a
sampled continuation of --prompt. Each phase shows its progress on stderr.

On a machine whose cores other jobs keep busy, `OPENBLAS_NUM_THREADS=1` can make a step several
times faster: each matrix product otherwise waits for OpenBLAS's threads to wake.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import sysconfig
from pathlib import Path

import numpy as np
from tqdm import tqdm

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.nn import functional as F

VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))  # 96 characters; tabs become spaces


def load_text(limit: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) character codes; every tenth file (in a seeded order) validates."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if not {"test", "tests", "site-packages", "idlelib"} & set(p.parts))  # fmt: skip
    np.random.default_rng(seed).shuffle(files)
    files = files[:limit]
    table = np.full(256, -1, np.int64)
    table[[ord(c) for c in VOCAB]] = np.arange(len(VOCAB))
    table[ord("\t")] = VOCAB.index(" ")
    parts: tuple[list, list] = ([], [])
    for i, path in enumerate(files):
        raw = np.frombuffer(path.read_bytes(), np.uint8)
        codes = table[raw]
        parts[i % 10 == 0].append(codes[codes >= 0])  # non-ASCII bytes are dropped
    return np.concatenate(parts[0]), np.concatenate(parts[1])


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        n, t, d = x.shape
        qkv = tg.reshape(self.qkv(self.ln1(x)), (n, t, 3, self.heads, d // self.heads))
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(n, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int = len(VOCAB), context: int = 128, d: int = 128,
                 layers: int = 4, heads: int = 4):  # fmt: skip
        super().__init__()
        self.context = context
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)
        for name, p in self.named_parameters():  # GPT-2's initialization
            if name.endswith("weight") and p.ndim == 2:
                nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * layers) if "proj" in name or
                                                 name.endswith("out.weight") else 1.0))  # fmt: skip
            elif name.endswith("bias") and "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx: tg.Tensor) -> tg.Tensor:
        x = self.tok(idx) + self.pos(np.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def loss_of(model: GPT, x: tg.Tensor, y: tg.Tensor) -> tg.Tensor:
    logits = model(x)
    return F.cross_entropy(tg.reshape(logits, (-1, logits.shape[-1])), tg.reshape(y, -1))


def batch(codes: np.ndarray, rng: np.random.Generator, size: int, context: int):
    starts = rng.integers(0, len(codes) - context - 1, size)
    windows = codes[starts[:, None] + np.arange(context + 1)]
    return windows[:, :-1], windows[:, 1:]


def unigram_entropy(codes: np.ndarray) -> float:
    """Entropy (nats) of the character frequencies: the loss of a model without context."""
    p = np.bincount(codes, minlength=len(VOCAB)) / len(codes)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def validation_loss(model: GPT, codes: np.ndarray, batches: int, size: int,
                    progress: bool = True, trace: bool = True) -> float:  # fmt: skip
    """The mean loss over `batches` fixed windows of validation text (a compiled eval step)."""
    rng = np.random.default_rng(1234)  # the same windows every time

    def evaluate(x: np.ndarray, y: np.ndarray) -> tg.Tensor:
        return loss_of(model, x, y)

    evaluate = tg.trace(evaluate) if trace else evaluate
    losses = []
    with tg.no_grad():
        for _ in tqdm(range(batches), desc="evaluating", disable=not progress):
            losses.append(evaluate(*batch(codes, rng, size, model.context)).item())
    return float(np.mean(losses))


def sample(model: GPT, prompt: str, length: int, temperature: float, seed: int,
           progress: bool = True, trace: bool = True) -> str:  # fmt: skip
    """`prompt` continued by `length` characters drawn at `temperature`. Each draw reads the
    last `context` characters, blank lines before the prompt, so that one compiled step (one
    shape) serves every draw."""
    rng = np.random.default_rng(seed)
    codes = [VOCAB.index(c) for c in prompt if c in VOCAB]
    newline = VOCAB.index("\n")

    def last_logits(window: np.ndarray) -> tg.Tensor:
        return model(window)[0, -1]

    last_logits = tg.trace(last_logits) if trace else last_logits
    with tg.no_grad():
        for _ in tqdm(range(length), desc="sampling", disable=not progress):
            window = np.array([([newline] * model.context + codes)[-model.context :]])
            logits = last_logits(window).numpy().astype(np.float64) / temperature
            p = np.exp(logits - logits.max())
            codes.append(int(rng.choice(len(VOCAB), p=p / p.sum())))
    return "".join(VOCAB[c] for c in codes)


def train(steps: int = 600, batch_size: int = 16, context: int = 64, d: int = 128,
          layers: int = 4, heads: int = 4, lr: float = 2e-3, seed: int = 0,
          checkpoint: str | None = None, resume: bool = False, files: int | None = None,
          progress: bool = True, trace: bool = True):  # fmt: skip
    """Train (or continue) and return (model, losses, (train, validation) codes)."""
    train_codes, val_codes = load_text(files, seed)
    if progress:
        print(f"text: {len(train_codes):,} characters to train on, {len(val_codes):,} to "
              "validate", file=sys.stderr)  # fmt: skip
    nn.manual_seed(seed)
    model = GPT(len(VOCAB), context, d, layers, heads)
    opt = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    gm = tg.GradManager().attach(model.parameters())
    start = 0
    if resume and checkpoint and os.path.exists(checkpoint):
        state = tg.load(checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])

    def train_step(x: np.ndarray, y: np.ndarray) -> tg.Tensor:
        with gm:
            loss = loss_of(model, x, y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    if trace:
        train_step = tg.trace(train_step)
    rng = np.random.default_rng(seed + start)  # a resumed run draws new batches
    losses: list[float] = []
    bar = tqdm(range(start, steps), desc="training", disable=not progress, initial=start,
               total=steps)  # fmt: skip
    for step in bar:
        losses.append(train_step(*batch(train_codes, rng, batch_size, context)).item())
        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}", refresh=False)
        if checkpoint and ((step + 1) % 250 == 0 or step + 1 == steps):
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step + 1}
            tg.save(state, checkpoint)
    return model, losses, (train_codes, val_codes)


CHECKPOINT = "gpt_stdlib.pt"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--steps", type=int, default=600, help="training steps in all (%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seeds the weights, the split and the "
                   "batches (%(default)s)")  # fmt: skip
    p.add_argument("-o", "--out", default=".", help=f"directory of the checkpoint {CHECKPOINT} "
                   "(default: the current directory)")  # fmt: skip
    p.add_argument("--resume", action="store_true", help=f"continue from OUT/{CHECKPOINT}")
    p.add_argument("--files", type=int, default=None, help="read only this many files (all)")
    p.add_argument("--prompt", default="def ", help="the text to continue (%(default)r)")
    p.add_argument("--length", type=int, default=200, help="characters to sample (%(default)s)")
    p.add_argument("--eager", action="store_true", help="run the steps eagerly, uncompiled")
    for name, default, what in (("batch-size", 16, "windows per step"),
                                ("context", 64, "characters per window"),
                                ("d", 128, "the model's width"), ("layers", 4, "blocks"),
                                ("heads", 4, "attention heads per block")):  # fmt: skip
        p.add_argument(f"--{name}", type=int, default=default, help=f"{what} (%(default)s)")
    return p


def main() -> None:
    args = parser().parse_args()
    os.makedirs(args.out, exist_ok=True)
    model, _, (train_codes, val_codes) = train(
        args.steps, args.batch_size, args.context, args.d, args.layers, args.heads,
        seed=args.seed, checkpoint=os.path.join(args.out, CHECKPOINT), resume=args.resume,
        files=args.files, trace=not args.eager)  # fmt: skip
    val = validation_loss(model, val_codes, 8, args.batch_size, trace=not args.eager)
    text = sample(model, args.prompt, args.length, 0.8, args.seed, trace=not args.eager)
    print(f"validation loss: {val:.3f} nats/char "
          f"(unigram entropy: {unigram_entropy(train_codes):.3f})")  # fmt: skip
    print(text)


if __name__ == "__main__":
    main()

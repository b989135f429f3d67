"""A zoo of models, one training step each, every method in a process of its own:

    python benchmarks/zoo.py [--models ...] [--methods ...] [--rounds R] [--steps N] [--budget S]
                             [--jax-python PATH] [--json FILE]
    python benchmarks/zoo.py --profile MODEL

Each model is written once, as a function of the library (`tracegrad` or `torch`: the same
names in `nn`, `optim` and `nn.functional`, the same state_dict keys), with PyTorch's idiom for
the step (`zero_grad`, forward, loss, `backward`, `step`). tracegrad builds it first
(`nn.manual_seed(0)`, its own initialization unless the model brings weights), PyTorch's copy
loads those float32 weights through `state_dict()`, and every method trains on the same data,
so the first losses agree (printed side by side, and relative to PyTorch's). Models:

- `tiny`: 784-256-10 ReLU MLP, batch 64, SGD lr 0.01.
- `mlp`: the `gelu` workload of `mlp.py` (16 x 256 tanh-GELU layers, batch 4096, its LSUV
  initialization), SGD lr 0.01.
- `cnn`, `gpt`: `models.py`'s (imported): a small CNN with SGD momentum, a character GPT with
  AdamW.
- `resnet`: CIFAR ResNet-20 (3 stages of 3 basic blocks, 16/32/64 channels, batch norm, 1x1
  stride-2 projection shortcuts, global average pooling), batch 128 of 3x32x32, SGD lr 0.1,
  momentum 0.9, weight decay 5e-4.
- `mobilenet`: MobileNetV2 for CIFAR at width 0.5 (a 3x3 stem of 16 channels; inverted residual
  blocks: a 1x1 expansion by 6, a 3x3 depthwise convolution that strides, a 1x1 projection, batch
  norm and ReLU6; stages of 8, 12, 16, 32, 48, 80, 160 channels, strides 2 at the third, fourth
  and sixth; a 1x1 head of 640), batch 64 of 3x32x32, SGD lr 0.05, momentum 0.9, weight decay
  4e-5. Its depthwise convolutions count in the floor as the products they are not (one row by
  9 a channel), so its floor column says little.
- `dcgan`: pytorch/examples' DCGAN: a generator (nz 100 to 3x64x64 by stride-2 transposed
  convolutions, batch norm, ReLU, tanh) and a discriminator (stride-2 convolutions, LeakyReLU
  0.2, batch norm, sigmoid), batch 64, Adam(2e-4, betas (0.5, 0.999)) each, one discriminator
  and one generator update a step, BCE; the noise is an input of the step.
- `lstm`: pytorch/examples' word-level language model: 2-layer LSTM, embedding and hidden 200,
  35 steps of backpropagation through time, batch 20, vocabulary 10,000, log-softmax and NLL,
  SGD lr 20 after clipping the gradients' norm to 0.25; the hidden state is carried from step
  to step, detached. No dropout (the libraries' masks would differ).
- `vit`: a vision transformer on 3x32x32: 4x4 patches, a class token, learned positions, d 192,
  6 pre-LayerNorm encoder layers (`nn.TransformerEncoderLayer`) of 3 heads, MLP 768 with exact
  GELU, no dropout; batch 64, AdamW.
- `unet`: a DDPM noise predictor on 3x32x32 (no issue named it; the family the others leave
  out): channels 32 and 64, GroupNorm(8), SiLU, sinusoidal time embeddings through an MLP and
  added per channel, one stride-2 convolution down and one transposed convolution up, the skip
  joined by concatenation; batch 16, the noise and the steps as inputs, MSE, gradients clipped
  to norm 1, AdamW(2e-4).

Methods: `tg-traced` (`tracegrad.trace`, Numba backend), `tg-eager`, `tg-module` (each
network `torch.compile`d as a module by `tracegrad.torch`, the step around them eager), `torch`
(eager),
`torch-compile` (`torch.compile` of the whole step function; for `dcgan`, of each network, with
static shapes: its step runs backward twice through the generator's region, which fails
compiled whole), `jax` (`jax.jit` of the whole step; written for `mlp`, `cnn` and `gpt` only,
in `steps.py` and `models.py`; the other models would each be a large job in jax: batch norm's
state, transposed convolutions, a recurrent loop, a transformer; `--jax-python` names an
interpreter that has jax), and `floor`: the step's matrix products, convolutions and attention
products alone, each as the one GEMM of its sizes (a convolution as its im2col product, the
im2col itself free), timed for every shape the traced step runs (the fastest of many runs
each: NumPy's matmul with one BLAS thread and with all, and the GEMM routine plans call, MKL's
with the `mkl` extra, in halves on two threads), summed. The rounds, medians and
paired ratios are `models.py`'s (`harness.py`): each method once a round, round-robin; a row
gives the median of its rounds' medians with their range, its step over PyTorch eager's of the
same round and over the floor, the first call with empty compile caches (tracegrad's kernels,
Numba's, torch.compile's) and again with warm ones, and the process's peak RSS.

`--profile MODEL` instead shows, in this process, where the traced step's time goes: by op, by
the user's source line (nodes record no module path), each matrix product and convolution
against its floor, and the plan's statements: how many, their own time, and what is left of
the plan's time between them (the per-statement overhead).
"""

from __future__ import annotations

import argparse
import json
import linecache
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from harness import (  # noqa: E402
    MARK,
    blas_info,
    peak_rss_mb,
    print_agreement,
    print_ratios,
    print_table,
    run_marked,
    run_rounds,
    time_step,
)
from workloads import WORKLOADS, init_params, make_batch  # noqa: E402

METHODS = ("tg-traced", "tg-eager", "tg-module", "torch", "torch-compile", "jax", "floor")
Step = Callable[..., Any]


@dataclass(frozen=True)
class Model:
    """One zoo model: its networks and its step, each a function of the library (`tracegrad`
    or `torch`) and of `config` (sizes and hyperparameters; the tests pass smaller ones)."""

    nets: Callable[[Any, dict], dict[str, Any]]  # (lib, config) -> networks by name
    train: Callable[[Any, dict, dict], Step]  # (lib, networks, config) -> the step
    data: Callable[[dict], tuple[tuple, tuple]]  # config -> (batch, initial carried state)
    config: dict[str, Any]
    # initial weights by network (state_dict arrays) where tracegrad's init is not the model's
    weights: Callable[[dict], dict[str, dict[str, np.ndarray]]] | None = None
    jax: Callable[[], Callable[[], float]] | None = None  # the same step in jax, if written
    # torch.compile the networks (static shapes), not the step: a compiled region is one
    # autograd node, and a step that runs backward twice through one region (a GAN's) fails
    # when compiled whole; with automatic dynamic shapes, Inductor failed on the networks
    compile_nets: bool = False
    about: str = ""


def is_torch(lib: Any) -> bool:
    return lib.__name__ == "torch"


# --- classifiers: tiny, mlp, cnn, gpt, resnet, vit -----------------------------------------------


def classify(optimizer: Callable[[Any, Any, dict], Any]) -> Callable[[Any, dict, dict], Step]:
    """A classifier's step in PyTorch's idiom: zero_grad, forward, cross-entropy (over every
    position, for a sequence), backward, the optimizer's step."""

    def train(lib: Any, nets: dict, c: dict) -> Step:
        model, F = nets["model"], lib.nn.functional
        opt = optimizer(lib, model.parameters(), c)

        def step(x, y):
            opt.zero_grad()
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        return step

    return train


def sgd(lib: Any, params: Any, c: dict) -> Any:
    return lib.optim.SGD(params, lr=c["lr"], momentum=c.get("momentum", 0.0),
                         weight_decay=c.get("weight_decay", 0.0))  # fmt: skip


def adamw(lib: Any, params: Any, c: dict) -> Any:
    return lib.optim.AdamW(params, lr=c["lr"], weight_decay=c.get("weight_decay", 0.01))


def labelled(c: dict, shape: tuple[int, ...], classes: int = 10) -> tuple[tuple, tuple]:
    """A batch of standard normal inputs and random labels (seeded: the same in every method)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((c["batch"], *shape)).astype(c.get("dtype", "float32"))
    return (x, rng.integers(0, classes, c["batch"])), ()


def as_dtype(batch: tuple, c: dict) -> tuple[tuple, tuple]:
    """The batch with its floating arrays in the config's dtype, and no carried state."""
    dtype = c.get("dtype", "float32")
    return tuple(a.astype(dtype) if a.dtype.kind == "f" else a for a in batch), ()


def tiny_nets(lib: Any, c: dict) -> dict:
    nn = lib.nn
    return {"model": nn.Sequential(nn.Linear(784, c["hidden"]), nn.ReLU(),
                                   nn.Linear(c["hidden"], 10))}  # fmt: skip


def mlp_nets(lib: Any, c: dict) -> dict:
    """`mlp.py`'s MLP as layers: Linear and tanh-GELU, depth times, then the 10 logits."""
    nn, w = lib.nn, c["workload"]
    layers = []
    for fan_in, fan_out in w.layer_shapes:
        layers += [nn.Linear(fan_in, fan_out), nn.GELU(approximate="tanh")]
    return {"model": nn.Sequential(*layers[:-1])}


def mlp_weights(c: dict) -> dict:
    """`workloads.init_params`, whose W is (fan_in, fan_out), as the layers' state_dict."""
    state = {}
    for i, (weight, bias) in enumerate(init_params(c["workload"])):
        state[f"{2 * i}.weight"], state[f"{2 * i}.bias"] = weight.T.copy(), bias
    return {"model": state}


def mlp_data(c: dict) -> tuple[tuple, tuple]:
    x, y = make_batch(c["workload"])
    return (x.astype(c.get("dtype", "float32")), y), ()


def resnet_nets(lib: Any, c: dict) -> dict:
    """ResNet-20 for CIFAR: a 3x3 stem, three stages of basic blocks (the first of each stage
    after the first halves the image with stride 2, its shortcut a 1x1 stride-2 convolution
    and batch norm), global average pooling, a linear head."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              nn.BatchNorm2d(cout))  # fmt: skip

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self, widths: tuple[int, ...], blocks: int):
            super().__init__()
            self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            stages, cin = [], widths[0]
            for i, width in enumerate(widths):
                for b in range(blocks):
                    stages.append(Block(cin, width, 2 if i > 0 and b == 0 else 1))
                    cin = width
            self.layers = nn.Sequential(*stages)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, 10)

        def forward(self, x):
            x = self.layers(F.relu(self.bn1(self.conv1(x))))
            return self.fc(self.pool(x).flatten(1))

    return {"model": ResNet(c["widths"], c["blocks"])}


def mobilenet_nets(lib: Any, c: dict) -> dict:
    """MobileNetV2 for CIFAR: a 3x3 stem, inverted residual blocks (a 1x1 expansion, a 3x3
    depthwise convolution, which strides, and a 1x1 projection, each with batch norm, ReLU6 after
    the first two; a residual where shapes allow), a 1x1 head, global average pooling, linear."""
    nn = lib.nn

    def unit(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1, act: bool = True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]  # fmt: skip
        return layers + [nn.ReLU6(inplace=True)] if act else layers

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int):
            super().__init__()
            mid = cin * expand
            self.residual = stride == 1 and cin == cout
            self.conv = nn.Sequential(*unit(cin, mid), *unit(mid, mid, 3, stride, mid),
                                      *unit(mid, cout, act=False))  # fmt: skip

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    layers, cin = unit(3, c["stem"], 3), c["stem"]
    for expand, width, repeats, stride in c["stages"]:
        for i in range(repeats):
            layers.append(Block(cin, width, stride if i == 0 else 1, expand))
            cin = width
    layers += [*unit(cin, c["head"]), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(c["head"], 10)]  # fmt: skip
    return {"model": nn.Sequential(*layers)}


def vit_nets(lib: Any, c: dict) -> dict:
    """A ViT: patches by a stride-`patch` convolution, a class token and learned positions,
    pre-LayerNorm encoder layers, a final LayerNorm and a head on the class token."""
    nn = lib.nn
    d, tokens = c["d"], (c["image"] // c["patch"]) ** 2 + 1

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, d, c["patch"], stride=c["patch"])
            self.cls = nn.Parameter(lib.zeros(1, 1, d))
            self.pos = nn.Parameter(lib.zeros(1, tokens, d))
            nn.init.normal_(self.cls, std=0.02)
            nn.init.normal_(self.pos, std=0.02)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(d, c["heads"], c["mlp"], dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
                for _ in range(c["layers"])
            )  # fmt: skip
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 10)

        def forward(self, img):
            x = self.patch(img).flatten(2).transpose(1, 2)
            x = lib.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x[:, 0]))

    return {"model": ViT()}


# --- dcgan -------------------------------------------------------------------------------------


def dcgan_nets(lib: Any, c: dict) -> dict:
    """pytorch/examples' DCGAN for 64x64 images, with its init: N(0, 0.02) convolution
    weights, batch norm weights N(1, 0.02) and biases 0."""
    nn, nz, g, d = lib.nn, c["nz"], c["ngf"], c["ndf"]

    def up(cin: int, cout: int) -> list:
        return [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(True)]  # fmt: skip

    def down(cin: int, cout: int) -> list:
        return [nn.Conv2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout),
                nn.LeakyReLU(0.2, inplace=True)]  # fmt: skip

    generator = nn.Sequential(
        nn.ConvTranspose2d(nz, g * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(g * 8), nn.ReLU(True),
        *up(g * 8, g * 4), *up(g * 4, g * 2), *up(g * 2, g),
        nn.ConvTranspose2d(g, 3, 4, 2, 1, bias=False), nn.Tanh(),
    )  # fmt: skip
    discriminator = nn.Sequential(
        nn.Conv2d(3, d, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        *down(d, d * 2), *down(d * 2, d * 4), *down(d * 4, d * 8),
        nn.Conv2d(d * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
    )  # fmt: skip
    for net in (generator, discriminator):
        for m in net.modules():
            if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)
    return {"generator": generator, "discriminator": discriminator}


def dcgan_train(lib: Any, nets: dict, c: dict) -> Step:
    """pytorch/examples' step: the discriminator on real images (label 1) and on detached
    fakes (label 0), its update; the generator through the updated discriminator (label 1),
    its update. Returns the three losses' sum."""
    G, D = nets["generator"], nets["discriminator"]
    opt_g = lib.optim.Adam(G.parameters(), lr=c["lr"], betas=(0.5, 0.999))
    opt_d = lib.optim.Adam(D.parameters(), lr=c["lr"], betas=(0.5, 0.999))
    bce = lib.nn.BCELoss()

    def step(real, noise):
        opt_d.zero_grad()
        out = D(real).view(-1)
        err_real = bce(out, lib.ones_like(out))
        err_real.backward()
        fake = G(noise)
        out = D(fake.detach()).view(-1)
        err_fake = bce(out, lib.zeros_like(out))
        err_fake.backward()
        opt_d.step()
        opt_g.zero_grad()
        out = D(fake).view(-1)
        err_g = bce(out, lib.ones_like(out))
        err_g.backward()
        opt_g.step()
        return err_real + err_fake + err_g

    return step


def dcgan_data(c: dict) -> tuple[tuple, tuple]:
    rng, dtype = np.random.default_rng(1), c.get("dtype", "float32")
    real = rng.uniform(-1, 1, (c["batch"], 3, 64, 64)).astype(dtype)
    return (real, rng.standard_normal((c["batch"], c["nz"], 1, 1)).astype(dtype)), ()


# --- lstm --------------------------------------------------------------------------------------


def lstm_nets(lib: Any, c: dict) -> dict:
    """pytorch/examples' RNNModel (LSTM): embedding, LSTM, linear decoder; its init: uniform
    +-0.1 for the embedding and the decoder's weight, a zero decoder bias."""
    nn = lib.nn

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(c["vocab"], c["emb"])
            self.rnn = nn.LSTM(c["emb"], c["hidden"], c["layers"])
            self.decoder = nn.Linear(c["hidden"], c["vocab"])
            nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)

        def forward(self, tokens, hidden):
            output, hidden = self.rnn(self.encoder(tokens), hidden)
            return self.decoder(output), hidden

    return {"model": RNNModel()}


def lstm_train(lib: Any, nets: dict, c: dict) -> Step:
    """pytorch/examples' step, its hand-written SGD as `optim.SGD`: the hidden state comes in
    detached, the loss is NLL of log-softmax, the gradients' norm clipped to `clip`."""
    model, F = nets["model"], lib.nn.functional
    opt = lib.optim.SGD(model.parameters(), lr=c["lr"])

    def step(tokens, targets, h, c0):
        opt.zero_grad()
        output, (h, c0) = model(tokens, (h, c0))
        logp = F.log_softmax(output.reshape(-1, output.shape[-1]), dim=1)
        loss = F.nll_loss(logp, targets.reshape(-1))
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
        return loss, h.detach(), c0.detach()

    return step


def lstm_data(c: dict) -> tuple[tuple, tuple]:
    """Tokens (bptt, batch) and the next ones; the first hidden state: zeros."""
    rng, dtype = np.random.default_rng(1), c.get("dtype", "float32")
    stream = rng.integers(0, c["vocab"], (c["bptt"] + 1, c["batch"]))
    zeros = np.zeros((c["layers"], c["batch"], c["hidden"]), dtype)
    return (stream[:-1], stream[1:]), (zeros, zeros.copy())


# --- unet --------------------------------------------------------------------------------------


def unet_nets(lib: Any, c: dict) -> dict:
    """A DDPM-style noise predictor: sinusoidal time embeddings through an MLP; residual blocks
    of GroupNorm, SiLU and 3x3 convolutions, the time embedding added per channel; a stride-2
    convolution down, a transposed convolution up, the skip joined by concatenation."""
    nn, F = lib.nn, lib.nn.functional
    ch, tdim = c["ch"], c["tdim"]

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int):
            super().__init__()
            self.norm1, self.conv1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.temb = nn.Linear(tdim, cout)
            self.norm2, self.conv2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.conv1(F.silu(self.norm1(x)))
            h = h + self.temb(F.silu(t))[:, :, None, None]
            return self.conv2(F.silu(self.norm2(h))) + self.skip(x)

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.time = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.inc = nn.Conv2d(3, ch, 3, padding=1)
            self.down1, self.pool = Block(ch, ch), nn.Conv2d(ch, ch, 3, stride=2, padding=1)
            self.down2, self.mid = Block(ch, 2 * ch), Block(2 * ch, 2 * ch)
            self.up = nn.ConvTranspose2d(2 * ch, ch, 4, stride=2, padding=1)
            self.up1 = Block(2 * ch, ch)
            self.out = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))

        def forward(self, x, t):
            half = tdim // 2
            freqs = lib.exp(-math.log(10000) * lib.arange(half, dtype=x.dtype) / half)
            args = t[:, None].to(x.dtype) * freqs[None]
            temb = self.time(lib.cat([lib.cos(args), lib.sin(args)], dim=-1))
            h1 = self.down1(self.inc(x), temb)
            h2 = self.mid(self.down2(self.pool(h1), temb), temb)
            return self.out(self.up1(lib.cat([self.up(h2), h1], dim=1), temb))

    return {"model": UNet()}


def unet_train(lib: Any, nets: dict, c: dict) -> Step:
    """A DDPM step: the images noised to the steps `t` by the linear schedule's cumulative
    products, the noise predicted, MSE, AdamW, the gradients' norm clipped to 1. (The steps and
    the noise come in as data: the libraries draw different numbers.)"""
    model, F = nets["model"], lib.nn.functional
    opt = lib.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=0.01)
    dtype = getattr(lib, c.get("dtype", "float32"))
    alphas_bar = lib.cumprod(1 - lib.linspace(1e-4, 0.02, c["steps"], dtype=dtype), dim=0)

    def step(x0, t, noise):
        ab = alphas_bar[t][:, None, None, None]
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        loss = F.mse_loss(model(xt, t), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


def unet_data(c: dict) -> tuple[tuple, tuple]:
    rng, dtype = np.random.default_rng(1), c.get("dtype", "float32")
    shape = (c["batch"], 3, c["image"], c["image"])
    x0 = rng.uniform(-1, 1, shape).astype(dtype)
    return (
        x0,
        rng.integers(0, c["steps"], c["batch"]),
        rng.standard_normal(shape).astype(dtype),
    ), ()


# --- the table of models -----------------------------------------------------------------------


def _jax_mlp() -> Callable[[], float]:
    from steps import build_jax

    return build_jax(WORKLOADS["gelu"])


MODELS: dict[str, Model] = {
    "tiny": Model(tiny_nets, classify(sgd), lambda c: labelled(c, (784,)),
                  {"hidden": 256, "batch": 64, "lr": 0.01},
                  about="784-256-10 ReLU MLP, batch 64, SGD"),
    "mlp": Model(mlp_nets, classify(sgd), mlp_data, {"workload": WORKLOADS["gelu"], "lr": 0.01},
                 weights=mlp_weights, jax=_jax_mlp,
                 about="mlp.py's gelu: 16 x 256 tanh-GELU, batch 4096, SGD"),
    "cnn": Model(lambda lib, c: {"model": models.cnn(lib.nn)},
                 classify(sgd),
                 lambda c: as_dtype(models.data("cnn", c), c), models.config("cnn"),
                 jax=partial(models.build_jax, "cnn"),
                 about="models.py's CNN, batch 256 of 1x28x28, SGD momentum 0.9"),
    "gpt": Model(lambda lib, c: {"model": models.torch_net("gpt", c) if is_torch(lib)
                                 else models.tg_model("gpt", c)},
                 classify(adamw), lambda c: (models.data("gpt", c), ()),
                 {**models.config("gpt"), "weight_decay": 0.01},
                 jax=partial(models.build_jax, "gpt"),
                 about="models.py's GPT: d 256, 4 layers, context 128, batch 16, AdamW"),
    "resnet": Model(resnet_nets, classify(sgd), lambda c: labelled(c, (3, c["image"], c["image"])),
                    {"widths": (16, 32, 64), "blocks": 3, "image": 32, "batch": 128, "lr": 0.1,
                     "momentum": 0.9, "weight_decay": 5e-4},
                    about="ResNet-20, batch 128 of 3x32x32, SGD momentum 0.9, weight decay"),
    "mobilenet": Model(mobilenet_nets, classify(sgd),
                       lambda c: labelled(c, (3, c["image"], c["image"])),
                       {"stem": 16, "head": 640, "image": 32, "batch": 64, "lr": 0.05,
                        "momentum": 0.9, "weight_decay": 4e-5,
                        "stages": ((1, 8, 1, 1), (6, 12, 2, 1), (6, 16, 3, 2), (6, 32, 4, 2),
                                   (6, 48, 3, 1), (6, 80, 3, 2), (6, 160, 1, 1))},
                       about="MobileNetV2 x0.5 on 3x32x32, batch 64, SGD momentum 0.9"),
    "dcgan": Model(dcgan_nets, dcgan_train, dcgan_data,
                   {"nz": 100, "ngf": 64, "ndf": 64, "batch": 64, "lr": 2e-4}, compile_nets=True,
                   about="DCGAN 64x64, batch 64, Adam, a D and a G update"),
    "lstm": Model(lstm_nets, lstm_train, lstm_data,
                  {"vocab": 10000, "emb": 200, "hidden": 200, "layers": 2, "bptt": 35,
                   "batch": 20, "lr": 20.0, "clip": 0.25},
                  about="word LSTM LM: 2 x 200, bptt 35, batch 20, vocab 10k, SGD, clipping"),
    "vit": Model(vit_nets, classify(adamw), lambda c: labelled(c, (3, c["image"], c["image"])),
                 {"image": 32, "patch": 4, "d": 192, "layers": 6, "heads": 3, "mlp": 768,
                  "batch": 64, "lr": 1e-3, "weight_decay": 0.01},
                 about="ViT on 3x32x32: 4x4 patches, d 192, 6 layers, 3 heads, AdamW"),
    "unet": Model(unet_nets, unet_train, unet_data,
                  {"ch": 32, "tdim": 64, "image": 32, "batch": 16, "steps": 1000, "lr": 2e-4},
                  about="DDPM U-Net on 3x32x32: GroupNorm, SiLU, time embeddings, AdamW"),
}  # fmt: skip


# --- building a step ---------------------------------------------------------------------------


def networks(model: Model, lib: Any, c: dict) -> dict[str, Any]:
    """The model's networks in `lib`: tracegrad's built first (seeded; its init, or the model's
    weights), cast to the config's dtype; PyTorch's load tracegrad's state."""
    import tracegrad as tg

    tg.nn.manual_seed(0)
    nets = model.nets(tg, c)
    for name, state in (model.weights(c) if model.weights else {}).items():
        nets[name].load_state_dict({k: tg.tensor(v) for k, v in state.items()})
    dtype = c.get("dtype", "float32")
    for net in nets.values():
        net.to(getattr(tg, dtype))
    if not is_torch(lib):
        return nets
    twins = model.nets(lib, c)
    for name, twin in twins.items():
        twin.to(getattr(lib, dtype))
        twin.load_state_dict({k: lib.tensor(v.numpy()) for k, v in nets[name].state_dict().items()})
    return twins


def make_step(model: Model, method: str, c: dict | None = None, backend: str = "numba",
              memory_budget: int | str | None = None):  # fmt: skip
    """`run()`: one step of `method` on the model's batch, its loss as a float; a traced step
    (under `memory_budget`, if given) also has `traced` and `wait_for_kernels`, an eager one
    `wait_for_kernels`, and every run has its `nets`."""
    c = {**model.config, **(c or {})}
    if method.startswith("torch"):
        import torch as lib
    else:
        import tracegrad as lib
    if method not in ("tg-traced", "tg-eager", "tg-module", "torch", "torch-compile"):
        raise ValueError(f"unknown method {method!r}")
    nets = networks(model, lib, c)
    if method == "tg-module":
        import tracegrad.torch

        nets = {name: tracegrad.torch.compile(net, backend=backend) for name, net in nets.items()}
    compiled = method == "torch-compile"
    if compiled and model.compile_nets:
        nets = {name: lib.compile(net, dynamic=False) for name, net in nets.items()}
    step = model.train(lib, nets, c)
    if method == "tg-traced":
        step = lib.trace(step, backend=backend, memory_budget=memory_budget)
    elif compiled and not model.compile_nets:
        step = lib.compile(step)
    batch, carry = model.data(c)
    batch = [lib.tensor(a) for a in batch]
    carried = [lib.tensor(a) for a in carry]

    def run() -> float:
        out = step(*batch, *carried)
        if isinstance(out, tuple):  # the loss, then the state carried to the next step
            out, carried[:] = out[0], out[1:]
        return float(out.detach())

    run.nets = nets
    if method == "tg-traced":
        run.traced, run.wait_for_kernels = step, step.wait_for_kernels
        run.arguments = lambda: (*batch, *carried)  # the next call's, for its profile
    elif method in ("tg-eager", "tg-module"):  # kernels load while the first steps run NumPy
        from tracegrad.runtime.eager import wait_for_kernels

        def wait() -> None:
            wait_for_kernels()
            for net in nets.values():
                getattr(net, "wait_for_kernels", lambda: None)()

        run.wait_for_kernels = wait
    return run


# --- the floor: the step's matrix products and convolutions as GEMMs ---------------------------


def gemms(node: Any) -> list[tuple[int, int, int, int]]:
    """The GEMMs (batch, m, k, n) a node's op amounts to, if it is a matrix product, a
    convolution (its im2col product; groups as the batch), attention (its products of
    queries, keys and values) or a recurrent scan (each step's product by W_hh, and backward
    W_hh's gradient); none for other ops."""
    from tracegrad.core import primitives as P

    ins, out, a = [v.shape for v in node.inputs], node.outputs[0].shape, node.attrs
    prim = node.prim
    if prim is P.matmul:
        x, w = ins[0] if len(ins[0]) > 1 else (1, *ins[0]), ins[1]  # a vector: one row
        w = w if len(w) > 1 else (*w, 1)  # or one column, on the right
        if len(w) == 2:  # a stack of rows times one matrix: one GEMM of all the rows
            return [(1, math.prod(x[:-1]), x[-1], w[-1])]
        if len(x) == 2:
            return [(1, x[0], x[1], math.prod(w[:-2]) * w[-1])]
        return [(math.prod(np.broadcast_shapes(x[:-2], w[:-2])), x[-2], x[-1], w[-1])]
    if prim in (P.conv2d, P.conv2d_input_grad, P.conv2d_weight_grad):
        x = ins[0] if prim is not P.conv2d_input_grad else a["shape"]
        w = a["shape"] if prim is P.conv2d_weight_grad else ins[1]
        y = out if prim is P.conv2d else ins[0 if prim is P.conv2d_input_grad else 1]
        groups, rows = a["groups"], y[0] * y[2] * y[3]
        taps, outs = x[1] // groups * w[2] * w[3], w[0] // groups
        sizes = {P.conv2d: (rows, taps, outs), P.conv2d_input_grad: (rows, outs, taps),
                 P.conv2d_weight_grad: (taps, rows, outs)}[prim]  # fmt: skip
        return [(groups, *sizes)]
    if prim in (P.attention, P.attention_grad):
        q, k, v = ins[:3]
        b, (length, e), (keys, ev) = math.prod(q[:-2]), q[-2:], v[-2:]
        products = [(length, e, keys), (length, keys, ev)]  # q k^T, p v
        if prim is P.attention_grad:  # q k^T again, g v^T, ds k, ds^T q, p^T g
            products = [(length, e, keys), (length, ev, keys), (length, keys, e),
                        (keys, length, e), (keys, length, ev)]  # fmt: skip
        return [(b, *p) for p in products]
    if prim in (P.lstm_scan, P.gru_scan, P.lstm_scan_grad, P.gru_scan_grad):
        (steps, batch, gates), size = node.inputs[-4].shape, node.inputs[-3].shape[0]
        if prim in (P.lstm_scan, P.gru_scan):  # each step's h W_hh^T
            return [(steps, batch, size, gates)]
        return [(steps, batch, gates, size), (1, size, steps * batch, gates)]  # dgates W_hh, dW
    return []


def best_gemm_seconds(shape: tuple[int, int, int, int], dtype: Any, budget: float = 0.3) -> float:
    """The fastest of repeated runs of one GEMM shape into a preallocated result: `np.matmul` with
    OpenBLAS's threads and (threadpoolctl installed) with one thread, since on a busy host or for
    a small product one thread that need not wait for another is the faster; and the GEMM
    routine plans call (MKL's where the `mkl` extra is installed) in halves on two threads, as
    the plan's kernels run it."""
    b, m, k, n = shape
    rng = np.random.default_rng(0)
    lead = (b,) if b > 1 else ()
    x = rng.standard_normal((*lead, m, k)).astype(dtype)
    w = rng.standard_normal((*lead, k, n)).astype(dtype)
    out = np.empty((*lead, m, n), dtype)

    def fastest(run: Callable[[], Any]) -> float:
        best, spent, runs = math.inf, 0.0, 0
        while runs < 10 or (spent < budget / 3 and runs < 500):
            start = time.perf_counter()
            run()
            took = time.perf_counter() - start
            best, spent, runs = min(best, took), spent + took, runs + 1
        return best

    matmul = partial(np.matmul, x, w, out=out)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return fastest(matmul)
    with threadpool_limits(1, user_api="blas"):
        alone = fastest(matmul)
        halves = plan_gemm_halves(x, w, out)
        own = fastest(halves) if halves is not None else math.inf
    return min(alone, own, fastest(matmul))


def plan_gemm_name() -> str:
    """The library whose GEMMs tracegrad's plans call (MKL's with the `mkl` extra)."""
    from tracegrad.compiler.kernels.blas import gemm_library

    routines = gemm_library()
    return "NumPy's matmul" if routines is None else routines.name


def plan_gemm_halves(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> Callable[[], None] | None:
    """out = x @ w (2-D or batched, C-contiguous) by the GEMM routine tracegrad's plans call,
    the rows (or the batch) in two halves on two threads (ctypes lets go of the GIL), as the
    plan's kernels split it; None without that routine."""
    import ctypes

    from tracegrad.compiler.kernels.blas import gemm_library

    routines = gemm_library()
    if routines is None:
        return None
    gemm = routines.gemms["cblas_sgemm" if x.dtype == np.float32 else "cblas_dgemm"]
    size = ctypes.c_int64 if routines.ints == "int64" else ctypes.c_int32
    scalar = ctypes.c_float if x.dtype == np.float32 else ctypes.c_double
    matrix = [ctypes.c_void_p, size]  # an operand and its leading dimension
    gemm.argtypes = [ctypes.c_int] * 3 + [size] * 3 + [scalar, *matrix * 2, scalar, *matrix]
    (m, k), n, item = x.shape[-2:], w.shape[-1], x.itemsize

    def product(a: int, c: int, rows: int, b: int) -> None:  # out[c:] = x[a:] @ w[b:], elements
        gemm(101, 111, 111, rows, n, k, 1.0, x.ctypes.data + a * item, k,
             w.ctypes.data + b * item, n, 0.0, out.ctypes.data + c * item, n)  # fmt: skip

    def part(lo: int, hi: int) -> None:  # rows lo..hi of one product, or products lo..hi
        if x.ndim == 2:
            product(lo * k, lo * n, hi - lo, 0)
        for i in range(lo, hi) if x.ndim == 3 else ():
            product(i * m * k, i * m * n, m, i * k * n)

    end = x.shape[0]

    def run() -> None:
        other = _other_thread().submit(part, end // 2, end)
        part(0, end // 2)
        other.result()

    return run


@cache
def _other_thread() -> Any:
    """The one thread beside the caller that `plan_gemm_halves` runs second halves on."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1)


def step_gemms(model: Model, c: dict | None = None) -> tuple[Counter, Any]:
    """The GEMMs of the traced step's graph (NumPy backend: the contractions are the same), by
    shape, and the graph."""
    run = make_step(model, "tg-traced", c, backend="numpy")
    run()
    graph = run.traced.graph
    return Counter(g for n in graph.nodes for g in gemms(n)), graph


def floor(model: Model) -> dict[str, Any]:
    shapes, _ = step_gemms(model)
    dtype = model.config.get("dtype", "float32")
    seconds = sum(count * best_gemm_seconds(s, dtype) for s, count in shapes.items())
    flops = sum(2 * math.prod(s) * count for s, count in shapes.items())
    return {"median_s": seconds, "times_s": [seconds], "gflop": flops / 1e9,
            "gemms": sum(shapes.values()), "shapes": len(shapes), "peak_rss_mb": peak_rss_mb(),
            "blas": [*blas_info(), f"plans' GEMMs: {plan_gemm_name()}"]}  # fmt: skip


# --- the profile -------------------------------------------------------------------------------


def plan_seconds(plan: Any, leaves: list | None, runs: int = 10) -> float:
    """The fastest run of the plan's function alone (no signature, guards or write-back), on
    the inputs `step.profile` gives it: a call's argument `leaves` (else zeros), the state's
    current values (updated in place, as a step does)."""
    from tracegrad.runtime.profile import plan_inputs

    run, inputs = plan.run, plan_inputs(plan, leaves)
    views, lent = run.arena.lend(run.layout)
    times = []
    try:
        with np.errstate(all="ignore"):
            for _ in range(runs):
                start = time.perf_counter()
                run.run(views, *inputs)
                times.append(time.perf_counter() - start)
    finally:
        if lent:
            run.arena.give_back()
    return min(times)


def source_line(where: str | None) -> str:
    """'file.py:12 the line's text', from a node's "path:line"."""
    if not where or ":" not in where:
        return "?"
    path, _, line = where.rpartition(":")
    text = linecache.getline(path, int(line)).strip() if line.isdigit() else ""
    return f"{os.path.basename(path)}:{line} {text[:60]}"


def profile(model: Model, repeat: int = 20, top: int = 12) -> None:
    """Print where the traced step's time goes (see the module's docstring)."""
    name = next(k for k, v in MODELS.items() if v is model)
    profile_run(name, make_step(model, "tg-traced"), model.config.get("dtype", "float32"),
                repeat, top)  # fmt: skip


def profile_run(name: str, run: Callable[[], float], dtype: Any, repeat: int = 20,
                top: int = 12) -> None:  # fmt: skip
    """The profile of `run()`, a traced step with `run.traced` (the `tracegrad.trace`d
    function) and `run.wait_for_kernels` (pytorch_scripts.py's models use it too), on the
    arguments `run.arguments()` gives (zeros without it)."""
    from tracegrad.core.vocabulary import Kind
    from tracegrad.runtime import viz

    for _ in range(2):  # the second call may trace again (grads not None any more)
        run()
        run.wait_for_kernels()
    run()
    plan = run.traced.latest
    from tracegrad.frontend.tracer import signature

    step_s = min(time_step(run, 10, 5.0, least=0.5)["times_s"])
    arguments = getattr(run, "arguments", tuple)()
    leaves = signature(arguments, {}, run.traced.dynamic)[0] if arguments else None
    plan_s = plan_seconds(plan, leaves)
    prof = run.traced.profile(repeat, arguments) if arguments else viz.profile(plan, repeat)
    nodes, seconds = plan.graph.nodes, prof.seconds
    work = sum(seconds)
    small = [s for s in seconds if s < 20e-6]
    between = plan_s - work
    print(f"\n{name}: the traced step takes {step_s * 1e3:.1f} ms a call and its plan alone "
          f"{plan_s * 1e3:.1f} ms (the fastest of 10 runs each): {len(nodes)} statements "
          f"({len(plan.kernels)} kernels) take {work * 1e3:.1f} ms one by one (each the fastest "
          f"of {repeat} runs), which leaves {between * 1e3:.1f} ms between them "
          f"({between / len(nodes) * 1e6:.1f} us a statement); the call around the plan "
          f"(signature, guards, write-back) takes {(step_s - plan_s) * 1e3:.1f} ms. "
          f"{len(small)} statements under 20 us take {sum(small) * 1e3:.1f} ms.")  # fmt: skip
    by_op: dict[str, list] = defaultdict(lambda: [0.0, 0])
    by_line: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for n, s in zip(nodes, seconds, strict=True):
        for table, key in ((by_op, f"fused {n.phase}" if n.prim.kind is Kind.COMPOSITE else n.op),
                           (by_line, source_line(n.source))):  # fmt: skip
            table[key][0] += s
            table[key][1] += 1
    for title, table in (("by op", by_op), ("by the user's line", by_line)):
        print(f"\n{title}: ms, share of the statements' time, statements")
        for key, (s, count) in sorted(table.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"  {key:<60} {s * 1e3:8.2f} {s / work:5.0%} {count:5d}")
    print_contractions(plan.graph, seconds, dtype, top)


def print_contractions(graph: Any, seconds: list[float], dtype: Any, top: int) -> None:
    """Each kind of matrix product or convolution (op, shapes, stride, and whether a kernel of
    its own or NumPy runs it): its statements' time against the same GEMMs at the floor's
    rate."""
    from tracegrad.compiler.kernels.native import modules
    from tracegrad.compiler.lowering import native_nodes

    native = set(modules(native_nodes(graph)))
    groups: dict[str, list] = defaultdict(lambda: [0.0, 0.0, 0])
    best: dict[tuple, float] = {}
    for n, s in zip(graph.nodes, seconds, strict=True):
        parts = gemms(n)
        if not parts:
            continue
        stride = f" stride {n.attrs['stride'][0]}" if "stride" in n.attrs else ""
        shapes = " ".join("x".join(map(str, v.shape)) for v in n.inputs[:2])
        key = f"{n.op} {shapes}{stride}{'' if n in native else ' (NumPy)'}"
        for g in parts:
            if g not in best:
                best[g] = best_gemm_seconds(g, dtype)
            groups[key][1] += best[g]
        groups[key][0] += s
        groups[key][2] += 1
    if not groups:
        return
    total, floor_s = sum(g[0] for g in groups.values()), sum(g[1] for g in groups.values())
    print(f"\nmatrix products and convolutions: {total * 1e3:.1f} ms against a floor of "
          f"{floor_s * 1e3:.1f} ms ({total / floor_s:.2f}x); the furthest from it:")  # fmt: skip
    print(f"  {'op and input shapes':<62} {'ms':>8} {'floor':>7} {'x':>5} count")
    for key, (s, f, count) in sorted(groups.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))[:top]:
        print(f"  {key:<62} {s * 1e3:8.2f} {f * 1e3:7.2f} {s / f:5.1f} {count:5d}")


# --- the child and the parent ------------------------------------------------------------------


def run_child(method: str, name: str, steps: int, budget: float) -> dict[str, Any]:
    from steps import unavailable

    model = MODELS[name]
    if method == "floor":
        return floor(model)
    if method == "jax" and model.jax is None:
        return {"na": "not written in jax"}
    reason = unavailable(method.split("-")[0])  # torch-compile needs torch
    if reason:
        return {"na": reason}
    start = time.perf_counter()
    step = model.jax() if method == "jax" else make_step(model, method)
    return {"setup_s": time.perf_counter() - start, **time_step(step, steps, budget, least=1.0)}


def measure(name: str, steps: int, budget: float, jax_python: str, method: str, env: dict,
            first_only: bool) -> dict[str, Any]:  # fmt: skip
    python = jax_python if method == "jax" else sys.executable
    cmd = [python, os.path.abspath(__file__), "--child", method, name,
           "--steps", str(0 if first_only else steps), "--budget", str(budget)]  # fmt: skip
    return run_marked(cmd, env)


def print_model(name: str, results: list[dict]) -> None:
    model = MODELS[name]
    print(f"\n### {name}: {model.about}\n")
    print_table(results)
    fl = results[0].get("floor", {})
    if "gflop" in fl:
        print(f"\nfloor: {fl['gemms']} GEMMs of {fl['shapes']} shapes, {fl['gflop']:.2f} GFLOP, "
              f"{fl['gflop'] / fl['median_s']:.0f} GFLOP/s")  # fmt: skip
    print_agreement(results)
    print_ratios(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "MODEL"))
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per child, at most")
    parser.add_argument(
        "--budget",
        type=float,
        default=10.0,
        help="stop timing a child after about this many seconds (>= 1 step)",
    )
    parser.add_argument(
        "--jax-python",
        default=sys.executable,
        help="the interpreter that runs the jax children (one that has jax)",
    )
    parser.add_argument("--json", help="also write every result to this file")
    parser.add_argument("--profile", choices=list(MODELS), metavar="MODEL",
                        help="where the traced step's time goes, instead")  # fmt: skip
    args = parser.parse_args()
    if args.child:
        print(MARK + json.dumps(run_child(*args.child, args.steps, args.budget)), flush=True)
        return
    if args.profile:
        profile(MODELS[args.profile])
        return
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    everything = {}
    for name in args.models:
        run = partial(measure, name, args.steps, args.budget, args.jax_python)
        everything[name] = run_rounds(run, args.methods, args.rounds,
                                      warm=("tg-traced", "tg-module", "torch-compile"))  # fmt: skip
        print_model(name, everything[name])
        blas = next((r["blas"] for r in everything[name][0].values() if r.get("blas")), None)
    print(f"\nBLAS: {'; '.join(blas or ['?'])}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=1)


if __name__ == "__main__":
    main()

"""Small models written the way current PyTorch code writes them, run through
`tracegrad.torch` unchanged: a ConvNeXt (7x7 depthwise convolutions, a LayerNorm subclass over
channels by permute, a GELU MLP of Linears, layer scale, `mean` over two dims, label smoothing),
a LLaMA-style LM (RMSNorm, rotary embeddings by cos/sin and cat, SwiGLU, causal
`scaled_dot_product_attention`, a head tied to the embedding, non-persistent buffers) and a
diffusion model's U-Net (sinusoidal time embeddings, GroupNorm, SiLU, a transposed convolution,
skip connections by cat, the noising schedule by cumprod, an MSE to the noise), each trained
with AdamW and gradient clipping. In float64: the compiled step (`torch.compile`, both
backends) against the eager one, and eager against PyTorch from the same weights."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tracegrad.torch as ttorch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
)
import zoo  # noqa: E402

try:
    import torch
except ImportError:  # the traced-against-eager checks still run
    torch = None


def convnext(lib):
    nn, F = lib.nn, lib.nn.functional

    class ChannelsNorm(nn.LayerNorm):
        def forward(self, x):
            y = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight,
                             self.bias, self.eps)  # fmt: skip
            return y.permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pwconv1, self.act = nn.Linear(dim, 4 * dim), nn.GELU()
            self.pwconv2 = nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(0.1 * lib.ones(dim))

        def forward(self, x):
            h = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
            h = self.gamma * self.pwconv2(self.act(self.pwconv1(h)))
            return x + h.permute(0, 3, 1, 2)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 4, 2, 2), ChannelsNorm(4, eps=1e-6))
            self.stages = nn.ModuleList([nn.Sequential(Block(4)),
                                         nn.Sequential(ChannelsNorm(4), nn.Conv2d(4, 8, 2, 2),
                                                       Block(8))])  # fmt: skip
            self.norm, self.head = nn.LayerNorm(8, eps=1e-6), nn.Linear(8, 5)

        def forward(self, x):
            x = self.stem(x)
            for stage in self.stages:
                x = stage(x)
            return self.head(self.norm(x.mean([-2, -1])))

    return Net()


def llama(lib):
    nn, F = lib.nn, lib.nn.functional

    def rotary(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + lib.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
            self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.w1, self.w3 = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
            self.w2 = nn.Linear(2 * d, d, bias=False)

        def forward(self, x, cos, sin):
            b, t, c = x.shape
            q, k, v = self.qkv(self.n1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                       for z in (q, k, v))  # fmt: skip
            y = F.scaled_dot_product_attention(rotary(q, cos, sin), rotary(k, cos, sin), v,
                                               is_causal=True)  # fmt: skip
            x = x + self.o(y.transpose(1, 2).contiguous().view(b, t, c))
            h = self.n2(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    class LM(nn.Module):
        def __init__(self, vocab=11, d=8, heads=2, context=6):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([Block(d, heads) for _ in range(2)])
            self.norm, self.head = nn.RMSNorm(d), nn.Linear(d, vocab, bias=False)
            self.head.weight = self.emb.weight
            half = d // heads // 2
            inv = 1.0 / (10000 ** (lib.arange(0, half).double() / half))
            freqs = lib.outer(lib.arange(context).double(), inv)
            angles = lib.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, idx):
            x = self.emb(idx)
            for block in self.blocks:
                x = block(x, self.cos[: idx.shape[1]], self.sin[: idx.shape[1]])
            return self.head(self.norm(x))

    return LM()


def unet(lib):
    """The zoo's DDPM U-Net (benchmarks/zoo.py), small: one definition of the model for both."""
    return zoo.unet_nets(lib, {"ch": 8, "tdim": 16})["model"]


def batch(name):
    rng = np.random.default_rng(3)
    if name == "convnext":
        return rng.standard_normal((2, 3, 16, 16)), rng.integers(0, 5, 2)
    if name == "unet":  # images, time steps, the noise to predict
        return (
            rng.standard_normal((3, 3, 8, 8)),
            rng.integers(0, 50, 3),
            rng.standard_normal((3, 3, 8, 8)),
        )
    tokens = rng.integers(0, 11, (3, 7))
    return tokens[:, :-1], tokens[:, 1:]


def classification_loss(lib, model, x, y):
    logits = model(x)
    return lib.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                           label_smoothing=0.1)  # fmt: skip


def denoising_loss(lib, model, x0, t, noise):
    alphas_bar = lib.cumprod(1 - lib.linspace(1e-4, 0.02, 50, dtype=lib.float64), dim=0)
    ab = alphas_bar[t][:, None, None, None]
    xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
    return lib.nn.functional.mse_loss(model(xt, t), noise)


MODELS = {"convnext": (convnext, classification_loss), "llama": (llama, classification_loss),
          "unet": (unet, denoising_loss)}  # fmt: skip


def train(lib, name, compiled=None, weights=None, steps=3):
    """Losses of `steps` AdamW steps with clipping, and the final state (float64)."""
    lib.manual_seed(0)
    build, loss_of = MODELS[name]
    model = build(lib).double()
    if weights is not None:
        model.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)

    def step(*inputs):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(lib, model, *inputs)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if compiled is not None:
        step = lib.compile(step, backend=compiled)
    inputs = [lib.tensor(a) if a.dtype.kind == "i" else lib.tensor(a).double()
              for a in batch(name)]  # fmt: skip
    losses = [float(step(*inputs).detach()) for _ in range(steps)]
    return losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_compiled_steps_match_eager(name, backend):
    want, want_state = train(ttorch, name)
    got, state = train(ttorch, name, compiled=backend)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for key, value in state.items():
        np.testing.assert_allclose(value, want_state[key], rtol=1e-8, atol=1e-10, err_msg=key)
    assert want[-1] < want[0]


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("name", list(MODELS))
def test_eager_matches_pytorch_from_the_same_weights(name):
    _, initial = train(ttorch, name, steps=0)
    want, want_state = train(torch, name, weights=initial)
    got, state = train(ttorch, name, weights=initial)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for key, value in state.items():
        np.testing.assert_allclose(value, want_state[key], rtol=1e-8, atol=1e-10, err_msg=key)

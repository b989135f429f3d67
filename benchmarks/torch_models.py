"""Model families the zoo does not hold, each written once against the torch API and run by
PyTorch and by tracegrad.torch, whose `torch.compile` is tracegrad's trace of the whole step:

    python benchmarks/torch_models.py [--models ...] [--methods tg-traced torch] [--rounds 2]
                                      [--steps 15] [--budget 10] [--dtype bfloat16]

What tracegrad was not tuned for: squeeze-and-excitation gates, recurrent classifiers and
language models (GRU, LSTM, bidirectional, a seq2seq decoder loop with attention), a convolutional
autoencoder, an MLP-Mixer, a graph convolution by `index_add`, embeddings for recommendation, a
ResNet-18 on 64x64 (7x7 stem, max-pooling), a 1-D audio net (kernel 80, stride 16), a pix2pix
U-Net (InstanceNorm, LeakyReLU, transposed convolutions), grouped convolutions (ResNeXt), a
segmentation U-Net upsampling by interpolation, a pixel shuffle (ESPCN), contrastive and
distillation losses. `--dtype bfloat16` builds each in bfloat16 (the default dtype set while
its layers and data are made, as transformers' `from_pretrained(dtype=...)` does).
Each runs in a process of its own per method, round-robin over `--rounds` (`harness.py`); a row
gives each method's median step and traced / PyTorch eager of the same round. The libraries
initialize their weights differently, so first losses agree only roughly; `zoo.py` holds the
models whose weights, data and losses are shared exactly."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import MARK, compare_models, model_parser, runnable, time_step  # noqa: E402

Built = tuple[Callable[..., Any], tuple]  # the step and its arguments


def _data(torch: Any, rng: np.random.Generator, shape: tuple[int, ...]) -> Any:
    return _floats(torch, rng.standard_normal(shape))


def _floats(torch: Any, a: np.ndarray) -> Any:
    """`a` in the default dtype, as the layers' (float32 unless a test asks for float64)."""
    return torch.tensor(a, dtype=torch.get_default_dtype())


def _labels(torch: Any, rng: np.random.Generator, classes: int, shape: tuple[int, ...]) -> Any:
    return torch.tensor(rng.integers(0, classes, shape))


def _classifier(torch: Any, model: Any, opt: Any, loss: Callable | None = None,
                clip: float | None = None) -> Callable[..., Any]:  # fmt: skip
    """PyTorch's idiom: zero_grad, forward, the loss (cross-entropy), backward, clipping, step."""
    loss = loss or torch.nn.functional.cross_entropy

    def step(x, y):
        opt.zero_grad()
        out = loss(model(x), y)
        out.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return out

    return step


def senet(torch: Any, rng: np.random.Generator) -> Built:
    """Conv, batch norm, SiLU and a squeeze-and-excitation gate per block; SGD Nesterov, label
    smoothing; batch 64 of 3x32x32."""
    nn = torch.nn

    class Gate(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.f = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, c // 4),
                                   nn.ReLU(), nn.Linear(c // 4, c), nn.Sigmoid())  # fmt: skip

        def forward(self, x):
            return x * self.f(x)[:, :, None, None]

    def block(cin: int, cout: int, stride: int) -> Any:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.SiLU(), Gate(cout))  # fmt: skip

    model = nn.Sequential(block(3, 32, 1), block(32, 64, 2), block(64, 64, 1), block(64, 128, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                          nn.Linear(128, 10))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)  # fmt: skip
    smooth = lambda out, y: torch.nn.functional.cross_entropy(out, y, label_smoothing=0.1)
    step = _classifier(torch, model, opt, smooth)
    return step, (_data(torch, rng, (64, 3, 32, 32)), _labels(torch, rng, 10, (64,)))


def gru(torch: Any, rng: np.random.Generator) -> Built:
    """A GRU sequence classifier (batch first, 50 steps of 32 features, hidden 128), the last
    step's output to 10 classes; Adam, clipping to norm 1; batch 64."""
    nn = torch.nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.fc = nn.GRU(32, 128, batch_first=True), nn.Linear(128, 10)

        def forward(self, x):
            return self.fc(self.rnn(x)[0][:, -1])

    model = Classifier()
    step = _classifier(torch, model, torch.optim.Adam(model.parameters(), lr=1e-3), clip=1.0)
    return step, (_data(torch, rng, (64, 50, 32)), _labels(torch, rng, 10, (64,)))


def char_lstm(torch: Any, rng: np.random.Generator) -> Built:
    """A character language model: embedding 64, a 2-layer LSTM of 256 with dropout 0.1 between
    the layers, batch 32 of 64 characters, Adam."""
    nn = torch.nn

    class CharModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(65, 64)
            self.lstm = nn.LSTM(64, 256, num_layers=2, batch_first=True, dropout=0.1)
            self.out = nn.Linear(256, 65)

        def forward(self, x):
            return self.out(self.lstm(self.embed(x))[0]).reshape(-1, 65)

    model = CharModel()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss = lambda out, y: torch.nn.functional.cross_entropy(out, y.reshape(-1))
    step = _classifier(torch, model, opt, loss)
    return step, (_labels(torch, rng, 65, (32, 64)), _labels(torch, rng, 65, (32, 64)))


def bilstm(torch: Any, rng: np.random.Generator) -> Built:
    """A text classifier: embedding 100 of 20,000 words, a bidirectional LSTM of 128, its two
    last hidden states to 2 classes; batch 64 of 100 words, Adam."""
    nn = torch.nn

    class TextModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(20000, 100)
            self.lstm = nn.LSTM(100, 128, bidirectional=True, batch_first=True)
            self.out = nn.Linear(256, 2)

        def forward(self, x):
            _, (h, _) = self.lstm(self.embed(x))
            return self.out(torch.cat([h[-2], h[-1]], 1))

    model = TextModel()
    step = _classifier(torch, model, torch.optim.Adam(model.parameters(), lr=1e-3))
    return step, (_labels(torch, rng, 20000, (64, 100)), _labels(torch, rng, 2, (64,)))


def seq2seq(torch: Any, rng: np.random.Generator) -> Built:
    """A GRU encoder and a decoder with additive attention run step by step under teacher
    forcing (the PyTorch tutorial's); vocabulary 1000, hidden 128, 12 steps, batch 32, Adam."""
    nn, F = torch.nn, torch.nn.functional
    vocab, hidden = 1000, 128

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.gru = (
                nn.Embedding(vocab, hidden),
                nn.GRU(hidden, hidden, batch_first=True),
            )

        def forward(self, x):
            return self.gru(self.embed(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.Wa, self.Ua, self.Va = (
                nn.Linear(hidden, hidden),
                nn.Linear(hidden, hidden),
                nn.Linear(hidden, 1),
            )
            self.gru, self.out = (
                nn.GRU(2 * hidden, hidden, batch_first=True),
                nn.Linear(hidden, vocab),
            )

        def forward(self, keys, h, target):
            outputs, token = [], torch.zeros(target.shape[0], 1, dtype=torch.long)
            for t in range(target.shape[1]):
                scores = self.Va(torch.tanh(self.Wa(h.permute(1, 0, 2)) + self.Ua(keys)))
                weights = F.softmax(scores.squeeze(2).unsqueeze(1), dim=-1)
                context = torch.bmm(weights, keys)
                out, h = self.gru(torch.cat([self.embed(token), context], 2), h)
                outputs.append(self.out(out))
                token = target[:, t].unsqueeze(1)
            return F.log_softmax(torch.cat(outputs, 1), -1)

    encoder, decoder = Encoder(), Decoder()
    opt = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-3)

    def step(x, y):
        opt.zero_grad()
        keys, h = encoder(x)
        loss = F.nll_loss(decoder(keys, h, y).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    return step, (_labels(torch, rng, vocab, (32, 12)), _labels(torch, rng, vocab, (32, 12)))


def autoencoder(torch: Any, rng: np.random.Generator) -> Built:
    """Stride-2 convolutions down and transposed ones (output padding 1) up, batch norm, ReLU,
    sigmoid; MSE against the input; Adam; batch 128 of 1x28x28."""
    nn, F = torch.nn, torch.nn.functional
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.ConvTranspose2d(32, 16, 3, 2, 1, output_padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.ConvTranspose2d(16, 1, 3, 2, 1, output_padding=1), nn.Sigmoid(),
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x):
        opt.zero_grad()
        loss = F.mse_loss(model(x), x)
        loss.backward()
        opt.step()
        return loss

    return step, (_floats(torch, rng.random((128, 1, 28, 28))),)


def mixer(torch: Any, rng: np.random.Generator) -> Built:
    """An MLP-Mixer on 3x32x32: 4x4 patches to 128 channels, 4 blocks of token and channel MLPs
    (GELU) after LayerNorms, mean over tokens; AdamW; batch 64."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, tokens: int, d: int):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.tokens = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(),
                                        nn.Linear(2 * tokens, tokens))  # fmt: skip
            self.channels = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.channels(self.norm2(x))

    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.patches = nn.Conv2d(3, 128, 4, 4)
            self.blocks = nn.Sequential(*[Block(64, 128) for _ in range(4)])
            self.norm, self.head = nn.LayerNorm(128), nn.Linear(128, 10)

        def forward(self, x):
            x = self.patches(x).flatten(2).transpose(1, 2)
            return self.head(self.norm(self.blocks(x)).mean(1))

    model = Mixer()
    step = _classifier(torch, model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    return step, (_data(torch, rng, (64, 3, 32, 32)), _labels(torch, rng, 10, (64,)))


def gcn(torch: Any, rng: np.random.Generator) -> Built:
    """A 2-layer graph convolution on a Cora-sized random graph (2708 nodes, 10,556 edges, 1433
    sparse features): messages gathered by edge, scaled, summed by `index_add`; Adam."""
    nn, F = torch.nn, torch.nn.functional
    n, edges = 2708, 10556
    src, dst = (rng.integers(0, n, edges) for _ in range(2))
    degree = np.bincount(dst, minlength=n) + 1.0
    norm = _floats(torch, 1 / np.sqrt(degree[src] * degree[dst]))[:, None]
    src, dst = torch.tensor(src), torch.tensor(dst)

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(1433, 16), nn.Linear(16, 7)

        def propagate(self, h):
            return torch.zeros_like(h).index_add(0, dst, h[src] * norm) + h

        def forward(self, x):
            h = F.dropout(F.relu(self.propagate(self.l1(x))), 0.5, self.training)
            return self.propagate(self.l2(h))

    model = GCN()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    x = _floats(torch, rng.random((n, 1433)) < 0.01)
    return _classifier(torch, model, opt), (x, _labels(torch, rng, 7, (n,)))


def recsys(torch: Any, rng: np.random.Generator) -> Built:
    """User and item embeddings (10,000 and 5000 of 32): their dot product plus an MLP of both,
    BCE with logits; Adam; batch 1024."""
    nn, F = torch.nn, torch.nn.functional

    class Recommender(nn.Module):
        def __init__(self):
            super().__init__()
            self.users, self.items = nn.Embedding(10000, 32), nn.Embedding(5000, 32)
            self.mlp = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

        def forward(self, u, i):
            a, b = self.users(u), self.items(i)
            return (a * b).sum(-1) + self.mlp(torch.cat([a, b], -1)).squeeze(-1)

    model = Recommender()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(u, i, y):
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(u, i), y)
        loss.backward()
        opt.step()
        return loss

    y = _floats(torch, rng.integers(0, 2, 1024))
    return step, (_labels(torch, rng, 10000, (1024,)), _labels(torch, rng, 5000, (1024,)), y)


def resnet18(torch: Any, rng: np.random.Generator) -> Built:
    """ResNet-18's layout at half width on 3x64x64: a 7x7 stride-2 stem, 3x3 max-pooling, four
    stages of two basic blocks (32 to 256 channels); SGD momentum; batch 32, 100 classes."""
    nn, F = torch.nn, torch.nn.functional

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              nn.BatchNorm2d(cout))  # fmt: skip

        def forward(self, x):
            return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.shortcut(x))

    layers, c = [nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
                 nn.MaxPool2d(3, 2, 1)], 32  # fmt: skip
    for cout, stride in [
        (32, 1),
        (32, 1),
        (64, 2),
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
    ]:
        layers.append(Basic(c, cout, stride))
        c = cout
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(256, 100))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    step = _classifier(torch, model, opt)
    return step, (_data(torch, rng, (32, 3, 64, 64)), _labels(torch, rng, 100, (32,)))


def m5(torch: Any, rng: np.random.Generator) -> Built:
    """The M5 audio net of PyTorch's speech-command tutorial: a 1-D convolution of kernel 80,
    stride 16, then three of 3, each with batch norm, ReLU and 4x max-pooling; log-softmax and
    NLL over 35 words; Adam; batch 64 of 8000 samples."""
    nn, F = torch.nn, torch.nn.functional

    def stage(cin: int, cout: int, *conv: int) -> list:
        return [nn.Conv1d(cin, cout, *conv), nn.BatchNorm1d(cout), nn.ReLU(), nn.MaxPool1d(4)]

    model = nn.Sequential(*stage(1, 32, 80, 16), *stage(32, 32, 3), *stage(32, 64, 3),
                          *stage(64, 64, 3), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                          nn.Linear(64, 35), nn.LogSoftmax(-1))  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-4)
    step = _classifier(torch, model, opt, F.nll_loss)
    return step, (_data(torch, rng, (64, 1, 8000)), _labels(torch, rng, 35, (64,)))


def pix2pix(torch: Any, rng: np.random.Generator) -> Built:
    """pix2pix's U-Net generator, shortened: stride-2 convolutions with InstanceNorm and
    LeakyReLU down, transposed ones with InstanceNorm, ReLU and dropout up, skips by
    concatenation, tanh; L1 loss; Adam(2e-4, betas (0.5, 0.999)); batch 8 of 3x64x64."""
    nn, F = torch.nn, torch.nn.functional

    def down(cin: int, cout: int, norm: bool = True) -> Any:
        norms = [nn.InstanceNorm2d(cout)] if norm else []
        return nn.Sequential(nn.Conv2d(cin, cout, 4, 2, 1, bias=False), *norms, nn.LeakyReLU(0.2))

    def up(cin: int, cout: int, dropout: bool = False) -> Any:
        return nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False),
                             nn.InstanceNorm2d(cout), nn.ReLU(inplace=True),
                             *([nn.Dropout(0.5)] if dropout else []))  # fmt: skip

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.d3, self.d4 = (
                down(3, 32, False),
                down(32, 64),
                down(64, 128),
                down(128, 128),
            )
            self.u1, self.u2, self.u3 = up(128, 128, True), up(256, 64), up(128, 32)
            self.out = nn.Sequential(nn.ConvTranspose2d(64, 3, 4, 2, 1), nn.Tanh())

        def forward(self, x):
            d1 = self.d1(x)
            d2 = self.d2(d1)
            d3 = self.d3(d2)
            u2 = self.u2(torch.cat([self.u1(self.d4(d3)), d3], 1))
            return self.out(torch.cat([self.u3(torch.cat([u2, d2], 1)), d1], 1))

    model = Generator()
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.5, 0.999))
    step = _classifier(torch, model, opt, F.l1_loss)
    return step, (_data(torch, rng, (8, 3, 64, 64)), _data(torch, rng, (8, 3, 64, 64)))


def simclr(torch: Any, rng: np.random.Generator) -> Built:
    """SimCLR's NT-Xent loss on an MLP encoder with batch norm: two views' normalized
    embeddings, all their cosine similarities over a temperature, the self-pairs masked to
    -inf, cross-entropy against each one's other view; Adam; batch 2 x 256."""
    nn, F = torch.nn, torch.nn.functional
    encoder = nn.Sequential(nn.Linear(256, 512), nn.BatchNorm1d(512), nn.ReLU(),
                            nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 128))  # fmt: skip
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)

    def step(a, b):
        opt.zero_grad()
        z = F.normalize(encoder(torch.cat([a, b])), dim=1)
        n = a.shape[0]
        similar = (z @ z.t() / 0.5).masked_fill(torch.eye(2 * n, dtype=torch.bool), -math.inf)
        target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
        loss = F.cross_entropy(similar, target)
        loss.backward()
        opt.step()
        return loss

    return step, (_data(torch, rng, (256, 256)), _data(torch, rng, (256, 256)))


def distill(torch: Any, rng: np.random.Generator) -> Built:
    """Knowledge distillation: a 784-1200-1200-10 teacher under no_grad, a 784-128-10 student,
    KL divergence of the softened outputs (temperature 4) and cross-entropy; SGD momentum;
    batch 128."""
    nn, F = torch.nn, torch.nn.functional
    teacher = nn.Sequential(nn.Linear(784, 1200), nn.ReLU(), nn.Linear(1200, 1200), nn.ReLU(),
                            nn.Linear(1200, 10))  # fmt: skip
    student = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(student.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        with torch.no_grad():
            soft = F.softmax(teacher(x) / 4.0, 1)
        s = student(x)
        kl = F.kl_div(F.log_softmax(s / 4.0, 1), soft, reduction="batchmean")
        loss = kl * 16.0 * 0.7 + 0.3 * F.cross_entropy(s, y)
        loss.backward()
        opt.step()
        return loss

    return step, (_data(torch, rng, (128, 784)), _labels(torch, rng, 10, (128,)))


def resnext(torch: Any, rng: np.random.Generator) -> Built:
    """ResNeXt bottlenecks on 3x32x32: 1x1 down, a grouped 3x3 (8 groups), 1x1 up, batch norm
    and ReLU, identity or strided 1x1 shortcuts; SGD momentum; batch 64."""
    nn, F = torch.nn, torch.nn.functional

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, cout: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, groups=8, bias=False),
                nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout),
            )  # fmt: skip
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              nn.BatchNorm2d(cout))  # fmt: skip

        def forward(self, x):
            return F.relu(self.body(x) + self.shortcut(x))

    model = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                          Bottleneck(64, 64, 128, 1), Bottleneck(128, 128, 256, 2),
                          Bottleneck(256, 256, 512, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(512, 10))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    step = _classifier(torch, model, opt)
    return step, (_data(torch, rng, (64, 3, 32, 32)), _labels(torch, rng, 10, (64,)))


def segment(torch: Any, rng: np.random.Generator) -> Built:
    """A segmentation U-Net that upsamples bilinearly (align_corners=False) and by nearest
    neighbour, joins skips by concatenation, and scores each pixel's 5 classes by
    cross-entropy over (N, C, H, W); Adam; batch 8 of 3x64x64."""
    nn, F = torch.nn, torch.nn.functional

    def double(cin: int, cout: int) -> Any:
        layers = []
        for c in (cin, cout):
            layers += [nn.Conv2d(c, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
        return nn.Sequential(*layers)

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.d3 = double(3, 16), double(16, 32), double(32, 64)
            self.u2, self.u1, self.head = double(96, 32), double(48, 16), nn.Conv2d(16, 5, 1)

        def forward(self, x):
            d1 = self.d1(x)
            d2 = self.d2(F.max_pool2d(d1, 2))
            d3 = self.d3(F.max_pool2d(d2, 2))
            up = F.interpolate(d3, scale_factor=2, mode="bilinear", align_corners=False)
            u2 = self.u2(torch.cat([up, d2], 1))
            u1 = self.u1(torch.cat([F.interpolate(u2, scale_factor=2, mode="nearest"), d1], 1))
            return self.head(u1)

    model = UNet()
    step = _classifier(torch, model, torch.optim.Adam(model.parameters(), lr=1e-3))
    return step, (_data(torch, rng, (8, 3, 64, 64)), _labels(torch, rng, 5, (8, 64, 64)))


def espcn(torch: Any, rng: np.random.Generator) -> Built:
    """PyTorch's super-resolution example (ESPCN): 5x5 and 3x3 convolutions with tanh, a pixel
    shuffle by 3, MSE against the high-resolution image; Adam; batch 16 of 1x64x64."""
    nn, F = torch.nn, torch.nn.functional
    model = nn.Sequential(nn.Conv2d(1, 64, 5, padding=2), nn.Tanh(),
                          nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
                          nn.Conv2d(32, 9, 3, padding=1), nn.PixelShuffle(3))  # fmt: skip
    step = _classifier(torch, model, torch.optim.Adam(model.parameters(), lr=1e-3), F.mse_loss)
    return step, (_data(torch, rng, (16, 1, 64, 64)), _data(torch, rng, (16, 1, 192, 192)))


MODELS: dict[str, Callable[[Any, np.random.Generator], Built]] = {
    f.__name__.replace("_", "-"): f
    for f in (senet, gru, char_lstm, bilstm, seq2seq, autoencoder, mixer, gcn, recsys, resnet18,
              resnext, segment, espcn, m5, pix2pix, simclr, distill)
}  # fmt: skip
METHODS = ("tg-traced", "tg-eager", "torch")


def build(method: str, name: str, dtype: str = "float32") -> Callable[[], float]:
    """One step of `name` under `method` in `dtype`, seeded; traced or eager, it can wait for its
    kernels."""
    if method == "torch":
        import torch

        torch.set_num_threads(int(os.environ.get("TORCH_THREADS", os.cpu_count() or 1)))
    else:
        import tracegrad.torch as torch
    torch.manual_seed(0)
    torch.set_default_dtype(getattr(torch, dtype))
    step, args = MODELS[name](torch, np.random.default_rng(0))
    torch.set_default_dtype(torch.float32)
    if method == "tg-traced":
        step = torch.compile(step)
    return runnable(method, step, args)


def main() -> None:
    parser = model_parser(__doc__, MODELS, METHODS)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = parser.parse_args()
    if args.profile:
        from zoo import profile_run

        return profile_run(args.profile, build("tg-traced", args.profile, args.dtype), "float32")
    if args.child:
        result = time_step(build(*args.child, args.dtype), args.steps, args.budget)
        print(MARK + json.dumps(result))
        return

    def about(name: str) -> str:
        return " ".join(MODELS[name].__doc__.split()).split(";")[0]

    compare_models(os.path.abspath(__file__), args, about, ["--dtype", args.dtype])


if __name__ == "__main__":
    main()

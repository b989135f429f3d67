"""Draw the tour's pictures (docs/tour.md): its compiled step, its memory timeline, and the
GPT's step grouped by module.

    pip install -e ".[examples,viz]"
    python examples/pictures.py [-o DIR] [--engine dot|layered]

Writes, into DIR (the current directory unless -o):
  graph.svg      the tour's step (a 4-16-3 GELU MLP), every module open
  gpt_graph.svg  the GPT of benchmarks/models.py (d 256, 4 blocks), each top-level module one box
  timeline.png   the tour step's live memory over its plan
and, when Chromium is installed (it renders the SVGs as a browser shows them), graph.png and
gpt_graph.png. Graphviz's `dot` lays the graphs out when installed, else tracegrad's own layout.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.nn import functional as F


def tour_step(backend: str = "numba"):
    """The tour's step: a 4-16-3 GELU MLP, SGD with momentum, a batch of 4096."""
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 3))
    gm = tg.GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @tg.trace(backend=backend)
    def train_step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    for _ in range(3):
        train_step(x, y)
    return train_step


GPT = dict(vocab=96, context=128, d=256, layers=4, heads=4, batch=16)  # benchmarks/models.py's


def gpt_step():
    """The GPT of benchmarks/models.py (train_gpt.py's model with `GPT`'s sizes, AdamW), traced
    once."""
    from train_gpt import GPT as Model
    from train_gpt import loss_of

    nn.manual_seed(0)
    model = Model(GPT["vocab"], GPT["context"], GPT["d"], GPT["layers"], GPT["heads"])
    gm = tg.GradManager().attach(model.parameters())
    opt = optim.AdamW(model.parameters(), lr=3e-4)

    @tg.trace
    def train_step(x, y):
        with gm:
            loss = loss_of(model, x, y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    tokens = np.random.default_rng(1).integers(0, GPT["vocab"], (GPT["batch"], GPT["context"] + 1))
    train_step(tokens[:, :-1], tokens[:, 1:])
    return train_step


def screenshot(svg: Path, png: Path) -> bool:
    """`svg` as a browser draws it, into `png`, if Chromium is installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return False
    size = re.search(r'width="([\d.]+)(pt)?" height="([\d.]+)', svg.read_text())
    scale = 4 / 3 if size.group(2) else 1.0  # dot measures in points
    width, height = (int(float(size.group(k)) * scale) + 2 for k in (1, 3))
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", f"--window-size={width},{height}", svg.as_uri()],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    return True


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("-o", "--out", default=".", help="directory to write into (default: the "
                   "current directory; the tour's pictures are in docs)")  # fmt: skip
    p.add_argument(
        "--engine",
        choices=["dot", "layered"],
        default=None,
        help="how the graphs are laid out (default: dot if installed, else layered)",
    )
    return p


def main() -> None:
    args = parser().parse_args()
    out = Path(args.out).resolve()  # Chromium is given file:// URIs, which must be absolute
    os.makedirs(out, exist_ok=True)
    tour = tour_step()
    tour.graph.to_svg(out / "graph.svg", engine=args.engine, expand=True)
    tour.memory_timeline().savefig(out / "timeline.png", dpi=80)
    gpt = gpt_step()
    gpt.graph.to_svg(out / "gpt_graph.svg", engine=args.engine)
    written = ["graph.svg", "timeline.png", "gpt_graph.svg"]
    for name in ("graph", "gpt_graph"):
        if screenshot(out / f"{name}.svg", out / f"{name}.png"):
            written.append(f"{name}.png")
    print(f"wrote {', '.join(str(out / name) for name in written)}")


if __name__ == "__main__":
    main()

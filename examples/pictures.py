"""Draw the README's pictures: the compiled graph and the memory timeline of the tour's step.

    pip install -e ".[viz]"
    python examples/pictures.py [-o docs]

Writes OUT/graph.png (laid out by Graphviz's `dot` when it is installed, else by matplotlib)
and OUT/timeline.png.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess

import numpy as np

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.core import drawing
from tracegrad.nn import functional as F


def tour_step():
    """The README tour's step: a 4-16-3 GELU MLP, SGD with momentum, a batch of 4096."""
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 3))
    gm = tg.GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @tg.trace
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--out", default="docs")
    out = p.parse_args().out
    os.makedirs(out, exist_ok=True)
    step = tour_step()
    graph_png = os.path.join(out, "graph.png")
    if shutil.which("dot"):
        dot = drawing.dot_text(drawing.scene(step.graph))
        subprocess.run(["dot", "-Tpng", "-Gdpi=48", "-o", graph_png], input=dot, text=True,
                       check=True)  # fmt: skip
    else:
        drawing.figure(step.graph).savefig(graph_png, dpi=60)
    step.memory_timeline().savefig(os.path.join(out, "timeline.png"), dpi=80)
    print(f"wrote {graph_png} and {os.path.join(out, 'timeline.png')}")


if __name__ == "__main__":
    main()

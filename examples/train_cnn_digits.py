"""Train a small CNN with batch norm on scikit-learn's 8x8 digits and report the test accuracy.

    pip install -e ".[examples]"
    python examples/train_cnn_digits.py

Convolutions, batch norm (its running statistics are state the traced step writes back), max
pooling and a linear head; the whole training step is compiled with @tracegrad.trace (`--eager`
runs it uncompiled). Same seed, same result.
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.nn import functional as F


def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits as (N, 1, 8, 8) float32 in [0, 1] (1437 train / 360 test, stratified)."""
    images, labels = load_digits(return_X_y=True)
    images = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    return train_test_split(images, labels, test_size=0.2, random_state=seed, stratify=labels)


def make_model() -> nn.Module:
    def block(c_in: int, c_out: int) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]

    return nn.Sequential(
        *block(1, 32), *block(32, 32), nn.MaxPool2d(2),  # 8x8 -> 4x4
        *block(32, 64), nn.MaxPool2d(2),  # -> 2x2
        nn.Flatten(), nn.Linear(256, 10),
    )  # fmt: skip


def train(
    epochs: int = 8,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    max_steps: int | None = None,
    progress: bool = True,
    trace: bool = True,
) -> tuple[nn.Module, list[float]]:
    """Train from scratch; returns the model and every step's loss (`max_steps` stops early)."""
    x_train, _, y_train, _ = load_data(seed)
    nn.manual_seed(seed)
    model = make_model()
    gm = tg.GradManager().attach(model.parameters())
    opt = optim.Adam(model.parameters(), lr=lr)

    def train_step(x: np.ndarray, y: np.ndarray) -> tg.Tensor:
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    if trace:  # forward, backward, update and the running statistics: one compiled plan
        train_step = tg.trace(train_step)

    rng = np.random.default_rng(seed)
    losses: list[float] = []
    steps_per_epoch = len(x_train) // batch_size  # whole batches only: one traced signature
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        bar = tqdm(range(steps_per_epoch), desc=f"epoch {epoch + 1}/{epochs}", disable=not progress)
        first = len(losses)
        for step in bar:
            idx = order[step * batch_size : (step + 1) * batch_size]
            losses.append(train_step(x_train[idx], y_train[idx]).item())
            bar.set_postfix(loss=f"{np.mean(losses[first:]):.4f}", refresh=False)
            if max_steps is not None and len(losses) >= max_steps:
                return model, losses
    return model, losses


def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    """Evaluation mode: batch norm uses its running statistics."""
    model.eval()
    with tg.no_grad():
        predicted = tg.argmax(model(images), dim=-1).numpy()
    model.train()
    return float(np.mean(predicted == labels))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--epochs", type=int, default=8, help="passes over the training images "
                   "(%(default)s)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seeds the split, the weights and the "
                   "batches (%(default)s)")  # fmt: skip
    p.add_argument("--eager", action="store_true", help="run the step eagerly, uncompiled")
    return p


def main() -> None:
    args = parser().parse_args()
    model, _ = train(epochs=args.epochs, seed=args.seed, trace=not args.eager)
    _, x_test, _, y_test = load_data(args.seed)
    print(f"test accuracy: {accuracy(model, x_test, y_test):.3f}")


if __name__ == "__main__":
    main()

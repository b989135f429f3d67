"""Train an MLP on scikit-learn's bundled 8x8 digits and report the test accuracy.

    pip install -e ".[examples]"
    python examples/train_digits.py
    mpiexec -n 2 python examples/train_digits.py --distributed   # needs the [distributed] extra

Written as a user would: a Module, a GradManager and an optimizer; the whole training step is
compiled with @tracegrad.trace (`--eager` runs it uncompiled). Same seed, same result.
With `--distributed` every MPI rank trains on its part of each batch and the gradients are
averaged over ranks (tracegrad.distributed), so N ranks take the same steps as one process.
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import tracegrad as tg
from tracegrad import distributed as dist  # mpi4py is imported only by dist.init()
from tracegrad import nn, optim
from tracegrad.nn import functional as F


def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits as float32 in [0, 1] (1437 train / 360 test, stratified)."""
    images, labels = load_digits(return_X_y=True)
    images = (images / 16.0).astype(np.float32)
    return train_test_split(images, labels, test_size=0.2, random_state=seed, stratify=labels)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def train(
    epochs: int = 20,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    max_steps: int | None = None,
    progress: bool = True,
    trace: bool = True,
    distributed: bool = False,
) -> tuple[nn.Module, list[float]]:
    """Train from scratch; returns the model and every step's loss (`max_steps` stops early).
    `distributed`: this process is one MPI rank of several (the losses are this rank's)."""
    x_train, _, y_train, _ = load_data(seed)
    nn.manual_seed(seed)
    model = make_model()
    callbacks = []
    if distributed:
        dist.init()
        dist.broadcast_parameters(model.parameters())
        callbacks = [dist.make_allreduce_cb("mean")]
    gm = tg.GradManager().attach(model.parameters(), callbacks=callbacks)
    opt = optim.Adam(model.parameters(), lr=lr)

    def train_step(x: np.ndarray, y: np.ndarray) -> tg.Tensor:
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    if trace:  # compile the whole step (forward, backward, update) once per batch shape
        train_step = tg.trace(train_step)  # as a decorator: @tg.trace above `def train_step`

    rng = np.random.default_rng(seed)
    losses: list[float] = []
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        batches = range(0, len(order), batch_size)
        bar = tqdm(batches, desc=f"epoch {epoch + 1}/{epochs}", disable=not progress)
        first = len(losses)
        for start in bar:
            idx = order[start : start + batch_size]
            if distributed:
                idx = dist.shard(idx)
            losses.append(train_step(x_train[idx], y_train[idx]).item())
            bar.set_postfix(loss=f"{np.mean(losses[first:]):.4f}", refresh=False)
            if max_steps is not None and len(losses) >= max_steps:
                return model, losses
    return model, losses


def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    model.eval()
    with tg.no_grad():
        predicted = tg.argmax(model(images), dim=-1).numpy()
    return float(np.mean(predicted == labels))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--epochs", type=int, default=20, help="passes over the training images "
                   "(%(default)s)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seeds the split, the weights and the "
                   "batches (%(default)s)")  # fmt: skip
    p.add_argument("--eager", action="store_true", help="run the step eagerly, uncompiled")
    p.add_argument("--distributed", action="store_true", help="this process is one MPI rank of "
                   "several (run under mpiexec)")  # fmt: skip
    return p


def main() -> None:
    args = parser().parse_args()
    model, _ = train(epochs=args.epochs, seed=args.seed, trace=not args.eager,
                     distributed=args.distributed, progress=not args.distributed)  # fmt: skip
    _, x_test, _, y_test = load_data(args.seed)
    if not args.distributed or dist.rank() == 0:  # every rank holds the same model
        print(f"test accuracy: {accuracy(model, x_test, y_test):.3f}")


if __name__ == "__main__":
    main()

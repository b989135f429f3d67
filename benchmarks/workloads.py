"""The benchmark workloads, defined once: shapes, activation, deterministic data and init.

Every method (GEMM floor, NumPy, PyTorch, JAX, tracegrad eager and traced) starts from the same
float32 arrays made here, so their first-step losses must agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLASSES = 10
LEARNING_RATE = 0.01
GELU_K, GELU_C = 0.7978845608, 0.044715
# Spread of each hidden pre-activation at init: small, so that with orthogonal weights every
# layer's Jacobian is close to an isometry and 48 layers neither explode nor vanish.
_HIDDEN_STD = 0.1


@dataclass(frozen=True)
class Workload:
    """An MLP training step: `depth` hidden layers of `width` on a batch of `batch`.

    The input dimension equals the hidden width, so every hidden layer is width x width; with the
    output layer that makes depth + 1 Linear layers and 3 * depth + 2 matmuls per step (the input
    batch needs no gradient)."""

    name: str
    batch: int
    width: int
    depth: int
    activation: str  # "relu" or "gelu" (tanh-GELU written with elementwise ops)
    steps: int  # default number of timed steps (few for the expensive workloads)

    @property
    def layer_shapes(self) -> list[tuple[int, int]]:
        """(fan_in, fan_out) of each Linear layer, input to output."""
        return [(self.width, self.width)] * self.depth + [(self.width, CLASSES)]

    @property
    def matmul_flops(self) -> int:
        """Floating-point operations of the step's matrix products (forward, dW, dX)."""
        per_layer = [2 * self.batch * i * o for i, o in self.layer_shapes]
        return 2 * sum(per_layer) + sum(per_layer[1:])

    def describe(self) -> str:
        act = "ReLU" if self.activation == "relu" else "tanh-GELU"
        return (
            f"{self.name}: B={self.batch}, {self.depth} hidden x {self.width}, {act}, "
            f"input dim {self.width}, {CLASSES} classes, float32, SGD lr={LEARNING_RATE}"
        )


WORKLOADS = {
    w.name: w
    for w in (
        Workload("wide", batch=512, width=1024, depth=8, activation="relu", steps=20),
        Workload("gelu", batch=4096, width=256, depth=16, activation="gelu", steps=10),
        Workload("deep", batch=4096, width=512, depth=48, activation="gelu", steps=5),
    )
}


def init_params(w: Workload, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W, b) per layer, W of shape (fan_in, fan_out) so a layer is `x @ W + b`.

    Random orthogonal weights, each layer scaled and given a bias so that its pre-activations on
    the benchmark batch have mean 0 per unit and standard deviation `_HIDDEN_STD` (1 for the
    logits), as LSUV init does. A plain Gaussian init sends the 48-layer GELU net into chaos:
    its loss then jumps to NaN under SGD and rounding differences between methods are amplified
    beyond any tolerance; this one trains stably and the methods agree to ~1e-6."""
    rng = np.random.default_rng(seed)
    h = make_batch(w)[0]
    params = []
    for i, (fan_in, fan_out) in enumerate(w.layer_shapes):
        weight = np.linalg.qr(rng.standard_normal((fan_in, fan_in)))[0][:, :fan_out]
        weight = weight.astype(np.float32)
        u = h @ weight
        scale = (1.0 if i == w.depth else _HIDDEN_STD) / u.std()
        weight *= scale
        bias = -u.mean(axis=0) * scale
        params.append((weight, bias.astype(np.float32)))
        h = _activate(h @ weight + bias, w.activation)
    return params


def _activate(u: np.ndarray, activation: str) -> np.ndarray:
    if activation == "relu":
        return np.maximum(u, 0)
    return 0.5 * u * (1 + np.tanh(GELU_K * (u + GELU_C * u**3)))


def make_batch(w: Workload, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Inputs of shape (batch, width) and integer labels of shape (batch,)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((w.batch, w.width), dtype=np.float32)
    labels = rng.integers(0, CLASSES, w.batch)
    return x, labels


def one_hot(labels: np.ndarray) -> np.ndarray:
    return np.eye(CLASSES, dtype=np.float32)[labels]

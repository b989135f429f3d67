"""benchmarks/torch_models.py's models, written once against the torch API: each builds under
tracegrad.torch, and its compiled step (on the NumPy backend) gives eager's losses over two
steps from the same seed, dropout masks included, in float64. Each step takes the first few samples
of the benchmark's batch, and the recurrent nets the first steps of each sequence: the layers,
losses and updates are the benchmark's, the size is not what is tested (a graph convolution takes
its whole graph: its arguments are nodes, not samples)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
)
import torch_models  # noqa: E402

import tracegrad.torch as torch  # noqa: E402

SAMPLES, STEPS = 4, 12
WHOLE = {"gcn"}
SEQUENCES = {"gru", "char-lstm", "bilstm"}  # their arguments' axis 1 is time


def losses(name: str, compiled: bool) -> list[float]:
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    try:
        step, args = torch_models.MODELS[name](torch, np.random.default_rng(0))
    finally:
        torch.set_default_dtype(torch.float32)
    if name not in WHOLE:
        args = tuple(a[:SAMPLES].clone() for a in args)
    if name in SEQUENCES:
        args = tuple(a[:, :STEPS].clone() if a.ndim > 1 else a for a in args)
    if compiled:
        step = torch.compile(step, backend="numpy")
    return [float(step(*args)) for _ in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(torch_models.MODELS))
def test_compiled_steps_train_as_eager_ones(name):
    eager = losses(name, compiled=False)
    np.testing.assert_allclose(losses(name, compiled=True), eager, rtol=1e-10)
    assert all(np.isfinite(eager))

"""benchmarks/torch_models.py's models, written once against the torch API: each builds under
tracegrad.torch, and its compiled step (on the NumPy backend) gives eager's losses over two
steps from the same seed, dropout masks included, in float64."""

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


def losses(name: str, compiled: bool) -> list[float]:
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    try:
        step, args = torch_models.MODELS[name](torch, np.random.default_rng(0))
    finally:
        torch.set_default_dtype(torch.float32)
    if compiled:
        step = torch.compile(step, backend="numpy")
    return [float(step(*args)) for _ in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(torch_models.MODELS))
def test_compiled_steps_train_as_eager_ones(name):
    eager = losses(name, compiled=False)
    np.testing.assert_allclose(losses(name, compiled=True), eager, rtol=1e-10)
    assert all(np.isfinite(eager))

"""benchmarks/gpt2.py's model in tiny sizes: the embedding and the output projection are one
parameter (updated once per step), and the traced step trains as the eager one, in float64."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import gpt2  # noqa: E402

TINY = dict(vocab=37, positions=16, context=8, batch=2, d=16, layers=2, heads=2, dtype="float64")


def test_the_output_projection_is_the_token_embedding():
    import tracegrad as tg

    model = gpt2.gpt2_nets(tg, {**gpt2.CONFIG, **TINY})["model"]
    assert model.lm_head.weight is model.wte.weight
    names = [n for n, _ in model.named_parameters()]
    assert "wte.weight" in names and "lm_head.weight" not in names  # shared: counted once
    assert abs(float(model.wte.weight.std()) - 0.02) < 0.005


def test_traced_gpt2_trains_as_eager():
    pytest.importorskip("numba")
    eager, traced = (gpt2.zoo.make_step(gpt2.GPT2, m, TINY) for m in ("tg-eager", "tg-traced"))
    losses = [[run() for _ in range(3)] for run in (eager, traced)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-10)
    assert losses[0][2] < losses[0][0]
    pairs = zip(eager.nets["model"].parameters(), traced.nets["model"].parameters(), strict=True)
    for a, b in pairs:
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-9, atol=1e-12)

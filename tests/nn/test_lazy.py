"""Lazy layers: the first forward gives their parameters shapes (in place, the same objects) and
PyTorch's initialization bounds, and they become the plain layers; an optimizer built before
that, or a traced first forward, is refused with the remedy; afterwards a traced step trains
them as eager does."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import assert_traced_training_matches_eager
from tracegrad import nn
from tracegrad.compiler import lowering


def _model():
    return nn.Sequential(nn.LazyConv2d(4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.LazyLinear(3))  # fmt: skip


def test_the_first_forward_shapes_and_initializes_in_place():
    model = _model()
    weight = model[3].weight
    assert isinstance(weight, nn.UninitializedParameter)
    y = model(tg.ones((2, 2, 5, 5)))
    assert y.shape == (2, 3) and model[3].weight is weight
    assert type(model[0]) is nn.Conv2d and type(model[3]) is nn.Linear
    assert model[0].weight.shape == (4, 2, 3, 3) and model[3].weight.shape == (3, 100)
    assert model[0].in_channels == 2 and model[3].in_features == 100
    assert np.abs(model[3].weight.numpy()).max() <= 1 / np.sqrt(100)  # U(-1/sqrt(in), ...)
    assert list(model.state_dict()) == ["0.weight", "0.bias", "3.weight", "3.bias"]
    assert nn.LazyLinear(2, dtype=np.float64)(tg.ones((1, 3), dtype=np.float64)).dtype == np.float64


def test_an_optimizer_or_a_trace_before_the_dry_run_is_refused():
    model = _model()
    with pytest.raises(ValueError, match="dry run"):
        tg.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(tg.TraceError, match="LazyConv2d: .* eagerly"):
        tg.trace(lambda x: model(x))(tg.ones((1, 2, 5, 5)))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_after_the_dry_run_a_traced_step_matches_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    batch = (rng.standard_normal((4, 2, 5, 5)).astype(np.float32), rng.integers(0, 3, 4))

    def dry_run():
        model = _model()
        model(tg.tensor(batch[0]))
        return model

    assert_traced_training_matches_eager(dry_run, [batch] * 3, backend)

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


# PyTorch's lazy norms have affine weights and running statistics by default (the instance
# norms too); checked against PyTorch 2.13: keys, shapes, outputs and running statistics
@pytest.mark.parametrize(
    "lazy, plain, shape",
    [
        (nn.LazyBatchNorm1d, nn.BatchNorm1d, (4, 3)),
        (nn.LazyBatchNorm2d, nn.BatchNorm2d, (2, 3, 4, 4)),
        (nn.LazyBatchNorm3d, nn.BatchNorm3d, (2, 3, 2, 2, 2)),
        (nn.LazyInstanceNorm1d, nn.InstanceNorm1d, (2, 3, 5)),
        (nn.LazyInstanceNorm2d, nn.InstanceNorm2d, (2, 3, 4, 4)),
        (nn.LazyInstanceNorm3d, nn.InstanceNorm3d, (2, 3, 2, 2, 2)),
    ],
)
def test_lazy_norms_become_the_plain_ones(rng, lazy, plain, shape):
    x = rng.standard_normal(shape)
    layer = lazy().double()
    keys = ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert list(layer.state_dict()) == keys and layer.has_uninitialized_params()
    assert isinstance(layer.running_mean, nn.UninitializedBuffer)
    weight = layer.weight
    y = layer(tg.tensor(x))
    assert type(layer) is plain and layer.weight is weight and layer.num_features == 3
    reference = plain(3, affine=True, track_running_stats=True).double()
    np.testing.assert_allclose(y.numpy(), reference(tg.tensor(x)).numpy(), atol=1e-12)
    for k, v in reference.state_dict().items():
        np.testing.assert_allclose(layer.state_dict()[k].numpy(), v.numpy(), atol=1e-12)
    assert layer.running_mean.dtype == np.float64


@pytest.mark.parametrize("lazy, plain, shape", [
    (nn.LazyConvTranspose1d, nn.ConvTranspose1d, (2, 6, 5)),
    (nn.LazyConvTranspose2d, nn.ConvTranspose2d, (2, 6, 4, 4)),
])  # fmt: skip
def test_lazy_transposed_convolutions_draw_as_the_plain_ones(lazy, plain, shape):
    args = (4, 3, 2, 1, 1, 2)  # out_channels, kernel, stride, padding, output_padding, groups
    layer = lazy(*args)
    x = tg.ones(shape)
    nn.manual_seed(3)
    y = layer(x)
    nn.manual_seed(3)
    reference = plain(6, *args)
    nn.manual_seed(3)
    reference.reset_parameters()
    assert type(layer) is plain and layer.weight.shape == (6, 2, 3, 3)[: len(shape)]
    for k, v in reference.state_dict().items():
        np.testing.assert_array_equal(layer.state_dict()[k].numpy(), v.numpy())
    np.testing.assert_array_equal(y.numpy(), reference(x).numpy())


def test_a_lazy_layer_resets_nothing_before_its_first_input():
    layer = nn.LazyLinear(3)
    layer.reset_parameters()
    assert isinstance(layer.weight, nn.UninitializedParameter)
    layer(tg.ones((1, 2)))
    layer.reset_parameters()
    assert layer.weight.shape == (3, 2)

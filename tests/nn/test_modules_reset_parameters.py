"""`reset_parameters` (and batch norm's `reset_running_stats`), as PyTorch's layers have them:
`__init__` makes the parameters and calls it, so the numbers a seed gives are the ones tracegrad
gave before the method existed (digests taken at commit 1fa98e7, which drew in `__init__`), a
subclass's override runs from the base `__init__`, and calling it again draws again, in place.
Lazy layers draw theirs once the first input gave them their shapes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn

# name -> (the layer built under nn.manual_seed(0), the digest of its state_dict at 1fa98e7)
LAYERS = {
    "Linear": (lambda: nn.Linear(5, 3), "5d0b9f551e888ebe"),
    "LinearNoBias": (lambda: nn.Linear(5, 3, bias=False), "5297aafba7053af8"),
    "Bilinear": (lambda: nn.Bilinear(3, 4, 2), "d5323a6604943035"),
    "Conv1d": (lambda: nn.Conv1d(4, 6, 3, groups=2), "f60abdf914bd9578"),
    "Conv2d": (lambda: nn.Conv2d(3, 4, (2, 3)), "abbf5d7b1a602371"),
    "Conv3d": (lambda: nn.Conv3d(2, 3, 2, bias=False), "ac91c49b2638679c"),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(4, 6, 3, groups=2), "0610be33753b7c41"),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 4, 2), "7ad128b82129c168"),
    "Embedding": (lambda: nn.Embedding(7, 3, padding_idx=2), "ad364dc2679a0394"),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(7, 3, padding_idx=-1), "1da8cbcdc4b0e500"),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(3), "d3dfb53931e85017"),
    "InstanceNorm2d": (
        lambda: nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
        "d3dfb53931e85017",
    ),  # fmt: skip
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), "44188548e52379b6"),
    "LayerNorm": (lambda: nn.LayerNorm((2, 3)), "9285f414249e50e9"),
    "RMSNorm": (lambda: nn.RMSNorm(3), "9963f0f6b9d6bf1b"),
    "PReLU": (lambda: nn.PReLU(3, 0.1), "96f9f59baf542f51"),
    "RNN": (lambda: nn.RNN(3, 4, 2, bidirectional=True), "2e2c8e367038a125"),
    "LSTM": (lambda: nn.LSTM(3, 4, proj_size=2), "314cda75b07dc44a"),
    "GRU": (lambda: nn.GRU(3, 4, 2, bias=False), "9981bc9e77de0cc1"),
    "RNNCell": (lambda: nn.RNNCell(3, 4), "313761689bbb846f"),
    "LSTMCell": (lambda: nn.LSTMCell(3, 4), "77dd30e9febe6a2d"),
    "GRUCell": (lambda: nn.GRUCell(3, 4, bias=False), "4fbfe88b73207b8f"),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(4, 2), "2642682900af6f16"),
    "Transformer": (lambda: nn.Transformer(8, 2, 1, 1, 16), "381cd06b30559af6"),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(8, 2, 16), "23445ff33ee8f138"),
    "Sequential": (
        lambda: nn.Sequential(nn.Linear(2, 3), nn.Conv1d(3, 2, 1), nn.Embedding(4, 2)),
        "e94131ccd8f19bfb",
    ),  # fmt: skip
}
# lazy layers: their first input, after which the digest is that of their plain layer's draws
LAZY = {
    "LazyLinear": (lambda: nn.LazyLinear(3), (2, 5), "5d0b9f551e888ebe"),
    "LazyConv2d": (lambda: nn.LazyConv2d(4, 2), (1, 3, 4, 4), "cdf8802af68d2843"),
}
# the layers whose own reset_parameters draws all their parameters (MultiheadAttention's and
# Transformer's `_reset_parameters` leave the Linears inside to theirs, as PyTorch's do)
OWN = [k for k in LAYERS if k not in ("MultiheadAttention", "Transformer",
                                      "TransformerEncoderLayer", "Sequential")]  # fmt: skip


def _digest(module: nn.Module) -> str:
    h = hashlib.sha256()
    for k, v in module.state_dict().items():
        h.update(k.encode())
        h.update(np.ascontiguousarray(v.numpy()).tobytes())
        h.update(str(v.numpy().dtype).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", list(LAYERS))
def test_a_seed_gives_the_weights_it_gave_before_reset_parameters(name):
    build, digest = LAYERS[name]
    nn.manual_seed(0)
    assert _digest(build()) == digest


@pytest.mark.parametrize("name", list(LAZY))
def test_a_lazy_layer_draws_at_its_first_input_as_before(name):
    build, shape, digest = LAZY[name]
    nn.manual_seed(0)
    layer = build()
    layer(tg.ones(shape))
    assert _digest(layer) == digest


@pytest.mark.parametrize("name", OWN)
def test_reset_parameters_draws_again_in_place_as_init_did(name):
    build, _ = LAYERS[name]
    nn.manual_seed(0)
    layer = build()
    before = {k: v.numpy().copy() for k, v in layer.state_dict().items()}
    tensors = dict(layer.state_dict(keep_vars=True))
    for t in layer.parameters():
        t._assign(tg.Tensor._of(np.full(t.shape, 7.0)))
    nn.manual_seed(0)
    layer.reset_parameters()
    after = layer.state_dict(keep_vars=True)
    for k, t in after.items():
        assert t is tensors[k]  # the same tensors: an optimizer holding them sees the new values
        np.testing.assert_array_equal(t.numpy(), before[k])


def test_the_common_reinitialization_loop_reaches_every_layer():
    nn.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8, 4), nn.LSTM(4, 3), nn.PReLU())  # fmt: skip
    for p in model.parameters():
        p._assign(tg.Tensor._of(np.zeros(p.shape)))
    reset = [m for m in model.modules() if hasattr(m, "reset_parameters")]
    assert [type(m).__name__ for m in reset] == ["Conv2d", "BatchNorm2d", "Linear", "LSTM",
                                                 "PReLU"]  # fmt: skip
    for m in reset:
        m.reset_parameters()
    drawn = {k: p for k, p in model.named_parameters() if k != "1.bias"}  # bias zeros
    assert all(p.numpy().any() for p in drawn.values())
    assert not hasattr(nn.ReLU(), "reset_parameters")  # as PyTorch: parameterless layers lack it


def test_a_subclass_override_runs_from_the_base_init():
    class ZeroLinear(nn.Linear):
        def reset_parameters(self):
            nn.init.zeros_(self.weight)
            nn.init.ones_(self.bias)

    layer = ZeroLinear(3, 2)
    assert not layer.weight.numpy().any() and (layer.bias.numpy() == 1).all()


def test_reset_running_stats():
    bn = nn.BatchNorm1d(3)
    bn(tg.tensor(np.arange(12.0).reshape(4, 3), dtype=np.float32))
    bn.weight._assign(tg.Tensor._of(np.full(3, 2.0)))
    assert int(bn.num_batches_tracked.item()) == 1 and bn.running_mean.numpy().any()
    bn.reset_running_stats()
    assert int(bn.num_batches_tracked.item()) == 0 and not bn.running_mean.numpy().any()
    assert (bn.running_var.numpy() == 1).all() and (bn.weight.numpy() == 2).all()
    bn.reset_parameters()
    assert (bn.weight.numpy() == 1).all()
    nn.BatchNorm1d(3, track_running_stats=False).reset_running_stats()  # nothing to reset


def test_embedding_reset_keeps_the_padding_row_zero():
    emb = nn.Embedding(5, 3, padding_idx=1)
    emb.reset_parameters()
    assert not emb.weight.numpy()[1].any() and emb.weight.numpy()[0].any()


def test_attention_and_transformer_reset_theirs_as_pytorch_does():
    mha = nn.MultiheadAttention(4, 2)
    mha.in_proj_bias._assign(tg.Tensor._of(np.ones(12)))
    mha.out_proj.bias._assign(tg.Tensor._of(np.ones(4)))
    mha._reset_parameters()
    assert not mha.in_proj_bias.numpy().any() and not mha.out_proj.bias.numpy().any()
    bound = np.sqrt(6.0 / (4 + 12))
    assert np.abs(mha.in_proj_weight.numpy()).max() <= bound
    model = nn.Transformer(8, 2, 1, 1, 16)
    model._reset_parameters()
    assert not hasattr(nn.TransformerEncoderLayer(8, 2, 16), "reset_parameters")

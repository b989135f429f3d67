"""Pruning by masks, as `torch.nn.utils.prune` does it: the masks PyTorch computes (magnitude,
structured by norm, repeated pruning among the kept entries, global), the reparametrized
names, `remove`; and a compiled step of a pruned model against eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import assert_traced_training_matches_eager
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import prune

try:
    import torch
    import torch.nn.utils.prune as torch_prune
except ImportError:
    torch = None

W = np.arange(1.0, 25.0).reshape(4, 6) * np.where(np.arange(24) % 3, 1, -1).reshape(4, 6)


def _linear(lib):
    m = lib.nn.Linear(6, 4).double()
    with lib.no_grad():
        m.weight.copy_(lib.tensor(W))
        m.bias.zero_()
    return m


def test_magnitude_then_structured_pruning_masks():
    m = _linear(tg)
    prune.l1_unstructured(m, "weight", amount=0.25)  # the 6 smallest |w|: 1..6
    assert (m.weight_mask.numpy().reshape(-1)[:6] == 0).all() and m.weight_mask.numpy().sum() == 18
    prune.l1_unstructured(m, "weight", amount=3)  # 3 more among the kept: 7, 8, 9
    assert m.weight_mask.numpy().sum() == 15 and m.weight_mask.numpy()[1, :3].sum() == 0
    # the kept row of smallest norm: row 1 (row 0, already pruned whole, is not a candidate)
    prune.ln_structured(m, "weight", amount=1, n=2, dim=0)
    np.testing.assert_array_equal(m.weight_mask.numpy()[:2], 0)
    assert m.weight_mask.numpy()[2:].all()
    assert sorted(dict(m.named_parameters())) == ["bias", "weight_orig"]
    assert list(dict(m.named_buffers())) == ["weight_mask"] and prune.is_pruned(m)
    np.testing.assert_array_equal(m(tg.ones((1, 6), dtype=np.float64)).numpy(),
                                  (W * m.weight_mask.numpy()).sum(1)[None])  # fmt: skip
    prune.remove(m, "weight")
    assert sorted(dict(m.named_parameters())) == ["bias", "weight"] and not prune.is_pruned(m)
    assert (m.weight.numpy() == 0).sum() == 12


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_masks_match_pytorchs():
    def run(lib, P):
        m, other = _linear(lib), _linear(lib)
        P.l1_unstructured(m, "weight", amount=0.3)
        P.l1_unstructured(m, "weight", amount=5)
        P.ln_structured(m, "weight", amount=1, n=1, dim=1)
        P.global_unstructured([(other, "weight"), (other, "bias")],
                              pruning_method=P.L1Unstructured, amount=7)  # fmt: skip
        return [m.weight_mask.numpy(), other.weight_mask.numpy(), other.bias_mask.numpy()]

    for a, b in zip(run(tg, prune), run(torch, torch_prune), strict=True):
        np.testing.assert_array_equal(a, b)


def _pruned():
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    prune.l1_unstructured(model[0], "weight", amount=0.5)
    prune.random_structured(model[2], "weight", amount=1, dim=0)
    return model


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_compiled_step_of_a_pruned_model_matches_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    batch = (rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6))
    _, eager, traced = assert_traced_training_matches_eager(_pruned, [batch] * 3, backend)
    for model in (eager, traced):  # the pruned entries stay zero: their gradient is masked
        masked = model[0].weight_orig.grad.numpy() * (1 - model[0].weight_mask.numpy())
        assert not masked.any()


def test_pytorchs_pruning_classes_and_a_method_of_ones_own():
    """The classes (lightning's ModelPruning passes them) prune as the functions do, and a
    subclass of BasePruningMethod with its own `compute_mask` prunes by it."""
    m = _linear(tg)
    prune.L1Unstructured.apply(m, "weight", amount=0.25)
    prune.LnStructured.apply(m, "weight", amount=1, n=2, dim=0)
    want = _linear(tg)
    prune.l1_unstructured(want, "weight", amount=0.25)
    prune.ln_structured(want, "weight", amount=1, n=2, dim=0)
    np.testing.assert_array_equal(m.weight_mask.numpy(), want.weight_mask.numpy())

    class EvenColumns(prune.BasePruningMethod):
        def compute_mask(self, t, default_mask):
            mask = default_mask.clone()
            mask[:, ::2] = 0
            return mask

    e = _linear(tg)
    EvenColumns.apply(e, "weight")
    np.testing.assert_array_equal(e.weight.numpy(), W * np.tile([0.0, 1.0], 3))
    assert prune.is_pruned(e)
    with pytest.raises(ValueError, match="at most 1"):
        prune.RandomUnstructured(amount=1.5)
    if torch is not None:  # the masks PyTorch's classes compute
        ref = _linear(torch)
        torch_prune.L1Unstructured.apply(ref, "weight", amount=0.25)
        torch_prune.LnStructured.apply(ref, "weight", amount=1, n=2, dim=0)
        np.testing.assert_array_equal(m.weight_mask.numpy(), ref.weight_mask.numpy())

"""Causal biases: the masks by hand, and attention with them as with the same boolean mask
(and, upper left on a square, as `is_causal`)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.torch.nn.attention.bias import (
    CausalBias,
    CausalVariant,
    causal_lower_right,
    causal_upper_left,
)

F = torch.nn.functional


def test_the_two_alignments():
    lower, upper = causal_lower_right(3, 4), causal_upper_left(3, 4)
    np.testing.assert_array_equal(lower.numpy(), [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(upper.numpy(), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    assert isinstance(lower, CausalBias) and isinstance(lower, torch.Tensor)
    assert (lower.variant, lower.seq_len_q, lower.seq_len_kv) == (CausalVariant.LOWER_RIGHT, 3, 4)
    assert type(lower._materialize()) is torch.Tensor
    with pytest.warns(UserWarning, match="seq_len_q > seq_len_kv"):
        causal_lower_right(4, 3)
    with pytest.raises(AssertionError, match="2D"):
        causal_upper_left(2, 3, 4)


@pytest.mark.parametrize("make", [causal_lower_right, causal_upper_left])
def test_attention_with_a_bias_is_attention_with_its_mask(make):
    rng = np.random.default_rng(0)
    q = torch.tensor(rng.standard_normal((2, 2, 3, 4)), requires_grad=True)
    k = torch.tensor(rng.standard_normal((2, 2, 6, 4)), requires_grad=True)
    grads = []
    for mask in (make(3, 6), torch.tensor(make(3, 6).numpy())):
        out = F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
        out.square().sum().backward()
        grads.append([out.detach().numpy(), q.grad.numpy().copy(), k.grad.numpy().copy()])
        q.grad = k.grad = None
    for got, want in zip(*grads, strict=True):
        np.testing.assert_array_equal(got, want)
    square = F.scaled_dot_product_attention(q, q, q, attn_mask=causal_upper_left(3, 3))
    causal = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    np.testing.assert_allclose(square.detach().numpy(), causal.detach().numpy(), rtol=1e-12)

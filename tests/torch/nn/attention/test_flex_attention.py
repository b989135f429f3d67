"""flex_attention against independent references: `scaled_dot_product_attention` (its own
kernel) with the equivalent dense mask or bias, finite differences in float64, block layouts
worked out by hand, and a compiled training step against the eager one."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.torch.nn.attention.flex_attention import (
    AuxRequest,
    BlockMask,
    and_masks,
    create_block_mask,
    create_mask,
    flex_attention,
    noop_mask,
    or_masks,
)

F = torch.nn.functional


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() <= 3


def qkv(B=2, H=2, L=12, S=12, E=4, Ev=3, seed=0, grad=True):
    rng = np.random.default_rng(seed)
    return [torch.tensor(rng.standard_normal(s), requires_grad=grad)
            for s in ((B, H, L, E), (B, H, S, E), (B, H, S, Ev))]  # fmt: skip


def value_and_grads(fn, inputs):
    for x in inputs:
        x.grad = None
    out = fn(*inputs)
    (out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum().backward()
    return [out.detach().numpy()] + [x.grad.numpy().copy() for x in inputs]


def assert_all_close(got, want, **tol):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **{"rtol": 1e-10, "atol": 1e-12, **tol})


@pytest.mark.parametrize("block", [4, 5, (3, 8), 128])
def test_a_causal_block_mask_is_causal_attention(block):
    inputs = qkv(L=12, S=12)
    mask = create_block_mask(causal, None, None, 12, 12, BLOCK_SIZE=block)
    got = value_and_grads(lambda q, k, v: flex_attention(q, k, v, block_mask=mask), inputs)
    want = value_and_grads(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), inputs
    )
    assert_all_close(got, want)


def test_mask_combinators_per_batch_and_head_masks():
    """A per-batch document mask or a prefix, and a per-head window: the dense mask from
    `create_mask` (checked by hand) is what attention applies."""
    doc = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
    width = torch.tensor([1, 3])

    def same_doc(b, h, q, kv):
        return (doc[q] == doc[kv]) & (b == 0) | (doc[q] >= doc[kv]) & (b == 1)

    def head_window(b, h, q, kv):
        return (q - kv).abs() <= width[h]

    def prefix(b, h, q, kv):
        return kv < 2

    mod = and_masks(or_masks(same_doc, prefix), head_window)
    dense = create_mask(mod, 2, 2, 10, 10).numpy()
    d, i = doc.numpy(), np.arange(10)
    for b in range(2):
        for h in range(2):
            docs = d[:, None] == d[None] if b == 0 else d[:, None] >= d[None]
            near = np.abs(i[:, None] - i[None]) <= (1, 3)[h]
            np.testing.assert_array_equal(dense[b, h], (docs | (i[None] < 2)) & near)
    inputs = qkv(L=10, S=10)
    mask = create_block_mask(mod, 2, 2, 10, 10, BLOCK_SIZE=4)
    got = value_and_grads(lambda q, k, v: flex_attention(q, k, v, block_mask=mask), inputs)
    want = value_and_grads(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.tensor(dense)), inputs)  # fmt: skip
    assert_all_close(got, want)


def test_score_mods_are_biases_and_reach_captured_tensors():
    """ALiBi by head slope and a learnable relative bias, against SDPA with the same float
    bias; the bias's gradient too."""
    inputs = qkv(H=3, L=6, S=7)
    bias = torch.tensor(np.random.default_rng(1).standard_normal((3, 6, 7)), requires_grad=True)
    slopes = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)

    def score_mod(score, b, h, q, kv):
        return score + slopes[h] * (kv - q) + bias[h, q, kv]

    dense = slopes[:, None, None] * (torch.arange(7)[None, None] - torch.arange(6)[None, :, None])
    got = value_and_grads(lambda q, k, v, bias: flex_attention(q, k, v, score_mod), [*inputs, bias])
    want = value_and_grads(lambda q, k, v, bias: F.scaled_dot_product_attention(
        q, k, v, attn_mask=dense + bias), [*inputs, bias])  # fmt: skip
    assert_all_close(got, want)


def test_gradients_match_finite_differences_with_a_soft_cap_and_scale():
    def attend(q, k, v):
        mask = create_block_mask(and_masks(causal, window), 1, 1, 5, 5, BLOCK_SIZE=2)
        return flex_attention(q, k, v, lambda s, b, h, q, kv: 2 * torch.tanh(s / 2),
                              block_mask=mask, scale=0.7)  # fmt: skip

    assert torch.autograd.gradcheck(attend, qkv(B=1, H=2, L=5, S=5, E=3, Ev=2))


def test_block_layout_of_a_causal_mask():
    """Five 8 x 8 tiles a side: the diagonal is partial, below it full; PyTorch's layout."""
    mask = create_block_mask(causal, 1, 1, 40, 40, BLOCK_SIZE=8)
    np.testing.assert_array_equal(mask.kv_num_blocks.numpy(), [[[1] * 5]])
    np.testing.assert_array_equal(mask.kv_indices.numpy()[0, 0, :, 0], range(5))
    np.testing.assert_array_equal(mask.full_kv_num_blocks.numpy(), [[range(5)]])
    np.testing.assert_array_equal(mask.full_q_num_blocks.numpy(), [[[4, 3, 2, 1, 0]]])
    np.testing.assert_array_equal(mask.to_dense().numpy()[0, 0], np.tril(np.ones((5, 5))))
    assert mask.shape == (1, 1, 40, 40) and mask.sparsity() == pytest.approx(40.0)
    assert mask.to_string().splitlines()[1:3] == ["██        ", "████      "]
    assert "mask_mod=causal" in repr(mask) and "sparsity=40.00%" in str(mask)
    cropped = mask._adjust(16, 24)
    assert cropped.shape == (1, 1, 16, 24)
    np.testing.assert_array_equal(cropped.full_kv_num_blocks.numpy(), [[[0, 1]]])
    with pytest.raises(ValueError, match="created for block_mask.shape=.*q_len=16"):
        flex_attention(*qkv(L=16, S=40), block_mask=mask)


def test_tiles_alone_mask_when_built_from_kv_blocks():
    """`from_kv_blocks` with no mask_mod: each query tile attends to the tiles listed."""
    num = torch.tensor([[[1, 2, 1]]], dtype=torch.int32)
    idx = torch.tensor([[[[2, 0, 1], [0, 1, 2], [1, 0, 2]]]], dtype=torch.int32)
    mask = BlockMask.from_kv_blocks(num, idx, BLOCK_SIZE=4, seq_lengths=(12, 12))
    tiles = np.array([[0, 0, 1], [1, 1, 0], [0, 1, 0]], dtype=bool)
    np.testing.assert_array_equal(mask.to_dense().numpy()[0, 0], tiles)
    dense = torch.tensor(np.kron(tiles, np.ones((4, 4), dtype=bool)).astype(bool))
    inputs = qkv()
    got = value_and_grads(lambda q, k, v: flex_attention(q, k, v, block_mask=mask), inputs)
    want = value_and_grads(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense), inputs
    )
    assert_all_close(got, want)
    sliced = mask[0, :, 1:]
    assert sliced.kv_num_blocks.shape == (1, 1, 2)
    with pytest.raises(RuntimeError, match="sliced BlockMask"):
        flex_attention(*inputs, block_mask=sliced)


def test_grouped_heads_logsumexp_and_rows_with_nothing_to_attend():
    q, k, v = qkv(H=4, grad=False)
    kg, vg = k[:, :2], v[:, :2]
    both = AuxRequest(lse=True, max_scores=True)
    out, aux = flex_attention(q, kg, vg, enable_gqa=True, return_aux=both)
    k4, v4 = kg.repeat_interleave(2, dim=1), vg.repeat_interleave(2, dim=1)
    np.testing.assert_allclose(out.numpy(), F.scaled_dot_product_attention(q, k4, v4).numpy())
    scores = (q @ k4.transpose(-2, -1)).numpy() / 2
    np.testing.assert_allclose(aux.lse.numpy(), np.log(np.exp(scores).sum(-1)))
    np.testing.assert_allclose(aux.max_scores.numpy(), scores.max(-1))
    with pytest.raises(ValueError, match="Hq=4 and Hkv=2"):
        flex_attention(q, kg, vg)

    def not_first(b, h, q_idx, kv_idx):
        return q_idx > 0

    mask = create_block_mask(not_first, None, None, 12, 12, BLOCK_SIZE=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.warns(FutureWarning, match="return_lse"):
            out, lse = flex_attention(q, k, v, block_mask=mask, return_lse=True)
    assert not out[:, :, 0].numpy().any() and np.isneginf(lse[:, :, 0].numpy()).all()
    want = F.scaled_dot_product_attention(q, k, v).numpy()
    np.testing.assert_allclose(out[:, :, 1:].numpy(), want[:, :, 1:])


def test_create_mask_reads_a_score_mod_as_its_minus_infinities():
    def causal_scores(score, b, h, q, kv):
        return torch.where(q >= kv, score, -math.inf)

    want = np.broadcast_to(np.tri(3, 4, dtype=bool), (1, 2, 3, 4))
    np.testing.assert_array_equal(create_mask(causal_scores, None, 2, 3, 4).numpy(), want)
    assert create_mask(noop_mask, 1, 1, 2, 2).numpy().all()
    with pytest.raises(AssertionError, match="requires a mask_mod"):
        create_block_mask(causal_scores, 1, 1, 4, 4)


class SlidingAttention(torch.nn.Module):
    """A block of the kind written for flex attention: a causal sliding window, a learnable
    per-head bias by distance, the mask built in forward."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads, self.qkv = heads, torch.nn.Linear(dim, 3 * dim)
        self.distance = torch.nn.Parameter(torch.zeros(heads, 16))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)

        def bias(score, b, h, q_idx, kv_idx):
            return score + self.distance[h, q_idx - kv_idx]

        mask = create_block_mask(and_masks(causal, window), None, None, T, T, BLOCK_SIZE=4)
        y = flex_attention(q, k, v, score_mod=bias, block_mask=mask)
        return y.transpose(1, 2).reshape(B, T, C)


def train(compiled: bool) -> tuple[list[float], dict]:
    torch.manual_seed(0)
    model = SlidingAttention().double()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(2, 12, 8, dtype=torch.float64)

    def step(x):
        opt.zero_grad()
        loss = (model(x) - x).square().mean()
        loss.backward()
        opt.step()
        return loss

    step = torch.compile(step, backend="numba", fullgraph=True) if compiled else step
    losses = [float(step(x)) for _ in range(3)]
    return losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def test_a_compiled_training_step_matches_the_eager_one():
    want, want_state = train(compiled=False)
    got, state = train(compiled=True)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for key, value in state.items():
        np.testing.assert_allclose(value, want_state[key], rtol=1e-8, atol=1e-12, err_msg=key)
    assert want[-1] < want[0] and np.abs(want_state["distance"]).max() > 0


def test_indexing_in_a_mod_is_per_grid_point_as_under_vmap():
    """transformers' `mask[batch_idx][0][q_idx][kv_idx]` takes one index at a time, each from
    the scalar the last left (under PyTorch's vmap); a gather by a gathered index too."""
    rng = np.random.default_rng(2)
    padding = torch.tensor(rng.standard_normal((2, 1, 6, 6)))
    starts = torch.tensor([0, 0, 2, 2, 2, 5])  # each position's document start

    def score_mod(score, b, h, q, kv):
        return score + padding[b][0][q][kv]

    def same_document(b, h, q, kv):
        return starts[kv] == starts[q]

    inputs = qkv(L=6, S=6)
    mask = create_block_mask(same_document, None, None, 6, 6, BLOCK_SIZE=4)
    got = value_and_grads(lambda q, k, v: flex_attention(q, k, v, score_mod, mask), inputs)
    docs = (starts[None] == starts[:, None]).numpy()
    dense = padding + torch.tensor(np.where(docs, 0.0, -np.inf))
    want = value_and_grads(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=dense), inputs)  # fmt: skip
    assert_all_close(got, want)
    assert padding[1][0].shape == (6, 6)  # indexing outside the mods is as before

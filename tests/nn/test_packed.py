"""Packed sequences: packing and unpacking (layout, order, gradients), and RNN, LSTM and GRU on
them: each sequence's outputs and final states are those of the layer run on that sequence
alone (so without PyTorch too), and PyTorch's (where installed) with the same weights, in
float64, gradients included; a traced step on packed input matches the eager one."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import assert_traced_training_matches_eager, check_grad
from tests.nn.test_layers_resampling import needs_torch, torch
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.nn.packed import (
    PackedSequence,
    pack_padded_sequence,
    pack_sequence,
    pad_packed_sequence,
    unpack_sequence,
)

LENGTHS = [2, 5, 3, 5, 1]


def test_packing_lays_steps_out_time_major_longest_first(rng):
    x = rng.standard_normal((5, 5, 2))  # (T, B, *)
    packed = pack_padded_sequence(tg.tensor(x), LENGTHS, enforce_sorted=False)
    order = [1, 3, 2, 0, 4]  # decreasing length, ties in batch order
    assert packed.sorted_indices.numpy().tolist() == order
    assert packed.unsorted_indices.numpy()[order].tolist() == list(range(5))
    assert packed.batch_sizes.numpy().tolist() == [5, 4, 3, 2, 2]
    expected = [x[t, b] for t in range(5) for b in order if t < LENGTHS[b]]
    np.testing.assert_array_equal(packed.data.numpy(), np.array(expected))
    padded, lengths = pad_packed_sequence(packed, padding_value=-1.0, total_length=6)
    assert lengths.numpy().tolist() == LENGTHS and padded.shape == (6, 5, 2)
    for b, n in enumerate(LENGTHS):
        np.testing.assert_array_equal(padded.numpy()[:n, b], x[:n, b])
        np.testing.assert_array_equal(padded.numpy()[n:, b], -1.0)


def test_packing_batch_first_sorted_and_lists_of_sequences(rng):
    seqs = [rng.standard_normal((n, 3)) for n in (4, 2, 2)]
    packed = pack_sequence([tg.tensor(s) for s in seqs])
    assert packed.sorted_indices is None and isinstance(packed, PackedSequence)
    for ours, theirs in zip(unpack_sequence(packed), seqs, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs)
    padded = np.stack([np.pad(s, [(0, 4 - len(s)), (0, 0)]) for s in seqs])  # (B, T, *)
    again = pack_padded_sequence(tg.tensor(padded), [4, 2, 2], batch_first=True)
    np.testing.assert_array_equal(again.data.numpy(), packed.data.numpy())
    out, lengths = pad_packed_sequence(again, batch_first=True)
    np.testing.assert_array_equal(out.numpy(), padded)
    with pytest.raises(RuntimeError, match="decreasing"):
        pack_padded_sequence(tg.tensor(padded), [2, 4, 2], batch_first=True)
    with pytest.raises(ValueError, match="positive"):
        pack_padded_sequence(tg.tensor(padded), [4, 0, 2], batch_first=True)


def test_packing_and_unpacking_are_differentiable(rng):
    x = rng.standard_normal((5, 5, 2))
    check_grad(lambda a: pack_padded_sequence(a, LENGTHS, enforce_sorted=False).data, x)
    packed = pack_padded_sequence(tg.tensor(x), LENGTHS, enforce_sorted=False)
    check_grad(lambda d: pad_packed_sequence(packed._replace(data=d))[0], packed.data.numpy())


LAYERS = [
    ("LSTM", {}), ("GRU", {}), ("RNN", {"nonlinearity": "relu"}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}), ("GRU", {"bidirectional": True}),
    ("LSTM", {"proj_size": 2, "bidirectional": True}),
]  # fmt: skip


def finals(state):
    return list(state) if isinstance(state, tuple) else [state]


@pytest.mark.parametrize("name, kwargs", LAYERS)
def test_each_packed_sequence_runs_as_if_alone(rng, name, kwargs):
    nn.manual_seed(1)
    layer = getattr(nn, name)(2, 4, batch_first=True, **kwargs).double()
    x = rng.standard_normal((5, 5, 2))  # (B, T, *)
    states = [rng.standard_normal(s.shape) for s in finals(layer(tg.tensor(x))[1])]
    hx = tuple(map(tg.tensor, states)) if name == "LSTM" else tg.tensor(states[0])
    packed = pack_padded_sequence(tg.tensor(x), LENGTHS, batch_first=True, enforce_sorted=False)
    out, state = layer(packed, hx)
    padded, _ = pad_packed_sequence(out, batch_first=True)
    for b, n in enumerate(LENGTHS):
        alone_hx = tuple(tg.tensor(s[:, b]) for s in states) if name == "LSTM" else \
            tg.tensor(states[0][:, b])  # fmt: skip
        alone, alone_state = layer(tg.tensor(x[b, :n]), alone_hx)  # unbatched
        np.testing.assert_allclose(padded.numpy()[b, :n], alone.numpy(), rtol=1e-12)
        np.testing.assert_array_equal(padded.numpy()[b, n:], 0.0)
        for s, a in zip(finals(state), finals(alone_state), strict=True):
            np.testing.assert_allclose(s.numpy()[:, b], a.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name, kwargs", LAYERS)
def test_packed_gradients_match_finite_differences(rng, name, kwargs):
    nn.manual_seed(2)
    layer = getattr(nn, name)(2, 3, **kwargs).double()

    def run(x):
        out, state = layer(pack_padded_sequence(x, [3, 1, 2], enforce_sorted=False))
        return out.data.sum() + sum(s.sum() for s in finals(state)) * 0.5

    check_grad(run, rng.standard_normal((3, 3, 2)))


@needs_torch
@pytest.mark.parametrize("name, kwargs", LAYERS)
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_layers_match_torch(rng, name, kwargs, enforce_sorted):
    ours = getattr(nn, name)(2, 4, **kwargs).double()
    theirs = getattr(torch.nn, name)(2, 4, **kwargs).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    lengths = sorted(LENGTHS, reverse=True) if enforce_sorted else LENGTHS
    x = rng.standard_normal((5, 5, 2))
    xs, ts = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, state = ours(pack_padded_sequence(xs, lengths, enforce_sorted=enforce_sorted))
    pack = torch.nn.utils.rnn.pack_padded_sequence
    tout, tstate = theirs(pack(ts, lengths, enforce_sorted=enforce_sorted))
    np.testing.assert_array_equal(out.batch_sizes.numpy(), tout.batch_sizes.numpy())
    np.testing.assert_allclose(out.data.numpy(), tout.data.detach().numpy(), atol=1e-12)
    outputs = [out.data, *finals(state)]
    touts = [tout.data, *finals(tstate)]
    cs = [rng.standard_normal(t.shape) for t in touts]
    sum((o * c).sum() for o, c in zip(outputs, cs, strict=True)).backward()
    sum((t * torch.tensor(c)).sum() for t, c in zip(touts, cs, strict=True)).backward()
    for o, t in zip(outputs[1:], touts[1:], strict=True):
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(xs.grad.numpy(), ts.grad.numpy(), atol=1e-12)
    for k, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), theirs.get_parameter(k).grad.numpy(),
                                   atol=1e-12, err_msg=k)  # fmt: skip


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 5, bidirectional=True)
        self.head = nn.Linear(10, 2)

    def forward(self, x):
        out, (h, _) = self.lstm(pack_padded_sequence(x, LENGTHS, enforce_sorted=False))
        padded, _ = pad_packed_sequence(out)
        return self.head(padded).sum(0) + h.sum() * 0.1


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_on_packed_sequences_matches_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    batches = [(rng.standard_normal((5, 5, 3)), rng.integers(0, 2, 5)) for _ in range(3)]
    assert_traced_training_matches_eager(lambda: Tagger().double(), batches, backend,
                                         lambda ps: optim.Adam(ps, lr=0.01))  # fmt: skip

"""RNN, LSTM, GRU and their cells (tracegrad.nn.recurrent): PyTorch's weight names, gate order,
shapes and options against PyTorch in float64 with the same weights (where installed); one step
of each cell against NumPy written from PyTorch's equations; gradients against finite
differences; a traced training step (both backends) against the eager one."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

try:
    import torch
except ImportError:  # the checks without PyTorch still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

LAYERS = [  # class, keyword arguments
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"proj_size": 2, "batch_first": True}),
    ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {"bias": False}),
]


def twins(name, kwargs, size=(3, 4)):
    """A torch layer (float64) and a tracegrad layer holding its weights."""
    twin = getattr(torch.nn, name)(*size, **kwargs).double()
    layer = getattr(nn, name)(*size, **kwargs).double()
    layer.load_state_dict({k: v.detach().numpy() for k, v in twin.state_dict().items()})
    return layer, twin


def compare(layer, twin, x, hx=None):
    """Outputs, final states and the gradients of the input, the initial states and every
    parameter, of a loss reading the outputs and the final states."""
    rng = np.random.default_rng(3)
    states = [] if hx is None else list(hx) if isinstance(hx, tuple) else [hx]
    xs = [tg.tensor(a, requires_grad=True) for a in [x, *states]]
    ts = [torch.tensor(a, requires_grad=True) for a in [x, *states]]
    pack = lambda v: None if not states else tuple(v[1:]) if isinstance(hx, tuple) else v[1]  # noqa: E731
    out, final = layer(xs[0], pack(xs))
    t_out, t_final = twin(ts[0], pack(ts))
    finals = final if isinstance(final, tuple) else (final,)
    t_finals = t_final if isinstance(t_final, tuple) else (t_final,)
    c = rng.standard_normal(t_out.shape)
    loss = (out * c).sum() + sum((f * f).sum() for f in finals)
    t_loss = (t_out * torch.tensor(c)).sum() + sum((f * f).sum() for f in t_finals)
    loss.backward()
    t_loss.backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), atol=1e-12)
    for f, t in zip(finals, t_finals, strict=True):
        np.testing.assert_allclose(f.numpy(), t.detach().numpy(), atol=1e-12)
    for a, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-11)
    grads = dict(twin.named_parameters())
    assert [k for k, _ in layer.named_parameters()] == list(grads)
    for k, p in layer.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[k].grad.numpy(), atol=1e-11, err_msg=k)


@needs_torch
@pytest.mark.parametrize("name, kwargs", LAYERS)
def test_layers_match_torch(rng, name, kwargs):
    layer, twin = twins(name, kwargs)
    compare(layer, twin, rng.standard_normal((2, 5, 3) if kwargs.get("batch_first") else (5, 2, 3)))
    layer, twin = twins(name, kwargs)
    compare(layer, twin, rng.standard_normal((4, 3)))  # unbatched (L, H_in)
    assert list(layer.state_dict()) == list(twin.state_dict())


@needs_torch
def test_initial_states_match_torch(rng):
    layer, twin = twins("LSTM", {"num_layers": 2, "bidirectional": True})
    h0, c0 = rng.standard_normal((4, 2, 4)), rng.standard_normal((4, 2, 4))
    compare(layer, twin, rng.standard_normal((5, 2, 3)), (h0, c0))
    layer, twin = twins("GRU", {"num_layers": 2})
    compare(layer, twin, rng.standard_normal((3, 2, 3)), rng.standard_normal((2, 2, 4)))
    layer, twin = twins("RNN", {})
    compare(layer, twin, rng.standard_normal((3, 3)), rng.standard_normal((1, 4)))  # unbatched


@needs_torch
@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(rng, name):
    layer, twin = twins(name, {})
    for x, hx in ((rng.standard_normal((2, 3)), None), (rng.standard_normal(3), "unbatched")):
        if hx is not None:
            hx = rng.standard_normal(4)
            hx = (hx, rng.standard_normal(4)) if name == "LSTMCell" else hx
        states = [] if hx is None else list(hx) if isinstance(hx, tuple) else [hx]
        xs = [tg.tensor(a, requires_grad=True) for a in [x, *states]]
        ts = [torch.tensor(a, requires_grad=True) for a in [x, *states]]
        pack = lambda v: None if not states else tuple(v[1:]) if len(states) == 2 else v[1]  # noqa: E731
        out, t_out = layer(xs[0], pack(xs)), twin(ts[0], pack(ts))
        out, t_out = (out, t_out) if name != "LSTMCell" else (out[0] * out[1], t_out[0] * t_out[1])
        np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), atol=1e-12)
        out.sum().backward(), t_out.sum().backward()
        for a, t in zip(xs, ts, strict=True):
            np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-12)


# --- without PyTorch ------------------------------------------------------------------------------


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_one_step_of_each_cell_follows_pytorchs_equations(rng):
    """LSTM gates i, f, g, o; GRU gates r, z, n with n = tanh(W_in x + b_in + r (W_hn h + b_hn))."""
    x, h, c = rng.standard_normal((2, 3)), rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    lstm = nn.LSTMCell(3, 4).double()
    w = {k: v.numpy() for k, v in lstm.state_dict().items()}
    gates = x @ w["weight_ih"].T + w["bias_ih"] + h @ w["weight_hh"].T + w["bias_hh"]
    i, f, g, o = np.split(gates, 4, axis=1)
    c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h_new, c_got = lstm(x, (h, c))
    np.testing.assert_allclose(c_got.numpy(), c_new, atol=1e-12)
    np.testing.assert_allclose(h_new.numpy(), sigmoid(o) * np.tanh(c_new), atol=1e-12)
    gru = nn.GRUCell(3, 4).double()
    w = {k: v.numpy() for k, v in gru.state_dict().items()}
    xr, xz, xn = np.split(x @ w["weight_ih"].T + w["bias_ih"], 3, axis=1)
    hr, hz, hn = np.split(h @ w["weight_hh"].T + w["bias_hh"], 3, axis=1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    np.testing.assert_allclose(gru(x, h).numpy(), (1 - z) * n + z * h, atol=1e-12)
    rnn = nn.RNNCell(3, 4, nonlinearity="relu").double()
    w = {k: v.numpy() for k, v in rnn.state_dict().items()}
    want = np.maximum(x @ w["weight_ih"].T + w["bias_ih"] + h @ w["weight_hh"].T + w["bias_hh"], 0)
    np.testing.assert_allclose(rnn(x, h).numpy(), want, atol=1e-12)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_gradients_match_finite_differences(rng, name):
    layer = getattr(nn, name)(2, 2, bidirectional=True).double()
    states = {"LSTM": 2}.get(name, 1)

    def run(x, w_hh, w_ih_reverse, *hx):
        layer.weight_hh_l0, layer.weight_ih_l0_reverse = w_hh, w_ih_reverse
        out, final = layer(x, tuple(hx) if states == 2 else hx[0])
        finals = final if isinstance(final, tuple) else (final,)
        return tg.concatenate([out.reshape(-1)] + [f.reshape(-1) for f in finals])

    arrays = [rng.standard_normal((3, 2, 2)), layer.weight_hh_l0.numpy(),
              layer.weight_ih_l0_reverse.numpy()]  # fmt: skip
    arrays += [rng.standard_normal((2, 2, 2)) for _ in range(states)]
    check_grad(run, *arrays)


def test_shapes_names_init_and_refusals():
    nn.manual_seed(0)
    lstm = nn.LSTM(5, 8, num_layers=2, bidirectional=True, batch_first=True)
    names = [k for k, _ in lstm.named_parameters()]
    assert names[:4] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    assert names[4] == "weight_ih_l0_reverse" and len(names) == 16
    assert lstm.weight_ih_l0.shape == (32, 5) and lstm.weight_ih_l1.shape == (32, 16)
    assert all(np.abs(p.numpy()).max() <= 1 / np.sqrt(8) for p in lstm.parameters())
    assert len(lstm.all_weights) == 4 and lstm.all_weights[1][0] is lstm.weight_ih_l0_reverse
    out, (h, c) = lstm(tg.zeros(2, 7, 5))
    assert out.shape == (2, 7, 16) and h.shape == c.shape == (4, 2, 8)
    assert repr(lstm) == "LSTM(5, 8, num_layers=2, batch_first=True, bidirectional=True)"
    lstm.flatten_parameters()

    class Packed:
        batch_sizes = np.array([2, 1])

    with pytest.raises(TypeError, match="PackedSequence"):
        lstm(Packed())
    with pytest.raises(tg.ShapeError, match="initial state"):
        nn.GRU(5, 8)(tg.zeros(3, 2, 5), tg.zeros(1, 3, 8))
    for layer in (lstm, nn.GRU(5, 8)):  # the time axis, batch first or not, of no steps
        given = (3, 0, 5) if layer is lstm else (0, 3, 5)
        with pytest.raises(
            tg.ShapeError,
            match=re.escape(f"a sequence of no steps, input torch.Size({list(given)})"),
        ):
            layer(tg.zeros(*given))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(2, 3, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(2, 3, proj_size=3)


def test_dropout_between_layers_only_in_training(rng):
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=1.0)  # layer 1 sees zeros in training
    a, b = (tg.tensor(rng.standard_normal((4, 2, 3)).astype(np.float32)) for _ in range(2))
    np.testing.assert_array_equal(lstm(a)[0].numpy(), lstm(b)[0].numpy())
    lstm.eval()
    assert not np.allclose(lstm(a)[0].numpy(), lstm(b)[0].numpy())


# --- traced training steps ----------------------------------------------------------------------


def language_model(name, seed):
    """An embedding, a two-layer recurrent layer with dropout and a decoder, as in pytorch/examples'
    word_language_model, with its eager SGD step."""
    nn.manual_seed(seed)
    encoder, rnn, decoder = nn.Embedding(10, 4), getattr(nn, name)(4, 6, 2, dropout=0.3), \
        nn.Linear(6, 10)  # fmt: skip
    params = [*encoder.parameters(), *rnn.parameters(), *decoder.parameters()]
    gm, opt = tg.GradManager().attach(params), tg.optim.SGD(params, lr=0.5)

    def step(tokens, targets, hidden):
        with gm:
            out, hidden = rnn(F.dropout(encoder(tokens), 0.3), hidden)
            loss = F.cross_entropy(decoder(out).reshape(-1, 10), targets.reshape(-1))
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss, hidden

    return params, step


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_traced_training_step_matches_eager(rng, monkeypatch, backend, name):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    tokens = rng.integers(0, 10, (3, 2))
    targets = rng.integers(0, 10, (3, 2))
    zeros = np.zeros((2, 2, 6), np.float32)
    hidden = (zeros, zeros) if name == "LSTM" else zeros
    results = []
    for traced in (False, True):
        tg.manual_seed(0)
        params, step = language_model(name, 0)
        run = tg.trace(step, backend=backend) if traced else step
        state, losses = hidden, []
        for _ in range(3):
            loss, state = run(tokens, targets, state)
            losses.append(float(loss))
            state = tuple(s.detach() for s in state) if name == "LSTM" else state.detach()
        results.append((losses, [p.numpy().copy() for p in params]))
    (eager, eager_params), (got, got_params) = results
    np.testing.assert_allclose(got, eager, rtol=1e-5)
    assert len(set(np.round(got, 6))) == 3  # the model learns; dropout draws afresh
    for a, b in zip(got_params, eager_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_a_traced_layer_runs_one_scan_each_way_per_layer_and_direction(rng, name):
    """A plan holds each layer's scan and its gradient as one op each (the kernels run them),
    not a dozen statements a step: a 2-layer bidirectional layer, 7 steps, has 4 of each."""
    layer = getattr(nn, name)(5, 6, num_layers=2, bidirectional=True)
    x = tg.tensor(rng.standard_normal((7, 3, 5)).astype(np.float32))

    def step(x):
        loss = layer(x)[0].square().sum()
        loss.backward()
        return loss

    run = tg.trace(step)
    run(x)
    ops = Counter(n.op for n in run.latest.graph.nodes)
    scan = name.lower() + "_scan"
    assert (ops[scan], ops[scan + "_grad"]) == (4, 4)
    assert ops["matmul"] <= 3 * 4  # each layer's and direction's x W_ih^T and its 2 gradients

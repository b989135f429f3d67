"""The Numba backend's LSTM and GRU scan kernels (`compiler.kernels.recurrent`) against the ops'
NumPy versions, both directions, on shapes whose units do not split evenly between the threads
(or on the calling thread alone);
and eager layers that reach the kernels against the same layers on NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn
from tracegrad.compiler.kernels import recurrent
from tracegrad.compiler.kernels.native import compile_native
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value
from tracegrad.core.ops.recurrent import unpack
from tracegrad.runtime import eager


def kernel_of(prim, ins, out_shape, dtype, reverse):
    node = Node(prim, [Value(a.shape, a.dtype) for a in ins], [Value(out_shape, dtype)],
                {"reverse": reverse})  # fmt: skip
    [(ok, kernel)] = compile_native([node])
    assert ok
    return kernel


def scan_inputs(rng, scan, steps, batch, hidden):
    """x_parts, W_hh^T as a layer holds it (a transposed view of weight_hh), then h0 and c0 or
    b_hh and h0."""
    gates = 4 if scan == "lstm" else 3
    x = rng.standard_normal((steps, batch, gates * hidden))
    w_hh_t = rng.standard_normal((gates * hidden, hidden)).T * 0.5
    states = rng.standard_normal((2, batch, hidden))
    return (x, w_hh_t, *(states if scan == "lstm" else (rng.standard_normal(gates * hidden),
                                                         states[0])))  # fmt: skip


@pytest.mark.parametrize("scan", ["lstm", "gru"])
@pytest.mark.parametrize("steps, batch, hidden", [(5, 3, 7), (1, 1, 33), (0, 2, 3)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_kernels_match_the_numpy_versions(rng, monkeypatch, scan, steps, batch, hidden, reverse,
                                          shared):  # fmt: skip
    """Forward and the packed cotangents, float32 (the dtype eager runs them in; a float64
    module each would double the compile time of this file), on the calling thread and shared
    between the threads (a short scan runs on one unless the team is awake)."""
    monkeypatch.setattr(recurrent, "SERIAL_MAX", 0 if shared else 1 << 62)
    op, grad = (P.lstm_scan, P.lstm_scan_grad) if scan == "lstm" else (P.gru_scan, P.gru_scan_grad)
    ins = [a.astype(np.float32) for a in scan_inputs(rng, scan, steps, batch, hidden)]
    want = op.impl(*ins, reverse=reverse)
    out = np.full_like(want, np.nan)
    kernel_of(op, ins, want.shape, np.float32, reverse)(*ins, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    g = rng.standard_normal(want.shape).astype(np.float32)
    want = grad.impl(g, out, *ins, reverse=reverse)
    got = np.full_like(want, np.nan)
    kernel_of(grad, (g, out, *ins), want.shape, np.float32, reverse)(g, out, *ins, got)
    for a, b in zip(unpack(got, *ins), unpack(want, *ins), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_an_eager_layer_on_the_kernels_trains_as_on_numpy(rng, monkeypatch, layer):
    """A bidirectional float32 layer large enough for the eager kernels: its outputs, final
    states and gradients as with NumPy's versions, to float32's rounding."""
    nn.manual_seed(0)
    layer = getattr(nn, layer)(16, 48, bidirectional=True)
    x = tg.tensor(rng.standard_normal((30, 24, 16)).astype(np.float32))
    results = []
    for kernels in (False, True):
        if kernels:
            for _ in range(2):  # the first call loads the kernels, the second runs them
                layer(x)[0].sum().backward()
            eager.wait_for_kernels()
            for op in (P.lstm_scan, P.lstm_scan_grad, P.gru_scan, P.gru_scan_grad):
                monkeypatch.setattr(op, "impl", None)  # the kernels, or an error
        layer.zero_grad()
        out, final = layer(x)
        finals = final if isinstance(final, tuple) else (final,)
        ((out * out).sum() + sum(f.sum() for f in finals)).backward()
        grads = [p.grad for p in layer.parameters()]
        results.append([t.numpy().copy() for t in [out, *finals, *grads]])
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)

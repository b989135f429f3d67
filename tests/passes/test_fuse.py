"""The fusion pass on graphs it once failed on: a node reading rows of two reductions whose
shapes do not broadcast ((2, 6) and (2, 4)) cannot join both groups, and the pass leaves them
apart instead of raising numpy's broadcast error; a chain through many time steps, each step's
result read elsewhere, is cut into kernels LLVM still vectorizes."""

from __future__ import annotations

import numpy as np
import pytest

import passes
import tracegrad as tg
from passes.fuse import ALIAS_CHECKS_MAX
from tracegrad.compiler import lowering


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_rows_of_shapes_that_do_not_broadcast_are_not_fused(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    r = np.random.default_rng(0)
    a, q, w = (tg.tensor(r.standard_normal(s)) for s in ((2, 6, 5), (2, 4, 4), (2, 4, 6)))

    def f(a, q, w):
        return a.sum(-1) + (q.sum(-2) * w.sum(-1)).sum(-1, keepdim=True)

    traced = tg.trace(f, backend=backend)
    for _ in range(2):
        np.testing.assert_allclose(traced(a, q, w).numpy(), f(a, q, w).numpy(), rtol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_value_read_by_groups_over_two_domains_joins_one(backend, monkeypatch):
    """transformers' Mamba: a (2, 16, 1) scale made in a group over (2, 16, 64) is read by a
    node over (2, 16, 32), which also reads a group over (2, 16, 32). Both groups and the node
    have no common domain: the node joins one of them, where numpy's broadcast error had
    ended the fuse pass."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    r = np.random.default_rng(0)
    a, b, s = (tg.tensor(r.standard_normal(x)) for x in ((2, 16, 64), (2, 16, 32), (2, 16, 1)))

    def f(a, b, s):
        scale = s * 2.0
        return a * scale, (b * 3.0) * scale

    traced = tg.trace(f, backend=backend)
    for got, want in zip(traced(a, b, s), f(a, b, s), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_a_long_recurrence_is_cut_into_kernels_within_llvms_alias_checks():
    """A GRU's hidden states recomputed from its saved gates, h = n + z (h - n) for 40 steps,
    each h read by the step's caller: one group would write 40 arrays and read 81 (its loop
    unvectorized: LLVM checks at most 128 pairs of arrays for overlap). Each group keeps within
    ALIAS_CHECKS_MAX, the groups together still take every step, and the values are eager's."""
    r = np.random.default_rng(0)
    steps = 40
    gates = [tg.tensor(r.random((6, 8))) for _ in range(2 * steps)]

    def recurrence(h, *gates):
        states = []
        for z, n in zip(gates[::2], gates[1::2], strict=True):
            h = n + z * (h - n)
            states.append(h)
        return states

    traced = tg.trace(recurrence, backend="numpy")
    h = tg.tensor(r.random((6, 8)))
    for got, want in zip(traced(h, *gates), recurrence(h, *gates), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    graph, _ = passes.fuse(traced.latest.capture.graph)
    groups = [n for n in graph.nodes if n.op == "fused"]
    assert len(groups) > 1 and sum(len(n.attrs["body"].nodes) for n in groups) == 3 * steps
    for n in groups:
        written = len(n.outputs)
        read = sum(v.size > 1 for v in n.inputs)
        assert written * (written - 1) // 2 + written * read <= ALIAS_CHECKS_MAX


def test_a_masked_softmax_is_cut_where_a_kernel_would_need_four_axes():
    """Attention's scores masked per sample but not per head ((B, 1, T, T) against (B, H, T,
    T): three canonical axes), then softmaxed by rows (four, which no kernel loops over: the
    whole group had run as NumPy calls): the mask's group and the softmax's are kernels apart,
    and the values are eager's."""
    from tracegrad.compiler.kernels import fused

    r = np.random.default_rng(0)
    scores = tg.tensor(r.standard_normal((2, 3, 8, 8)))
    mask = tg.tensor(r.random((2, 1, 8, 8)) < 0.7)

    def f(scores, mask):
        return tg.nn.functional.softmax(scores.masked_fill(~mask, float("-inf")) * 0.5, -1)

    traced = tg.trace(f, backend="numpy")
    np.testing.assert_allclose(traced(scores, mask).numpy(), f(scores, mask).numpy(), rtol=1e-12)
    graph, _ = passes.fuse(traced.latest.capture.graph)
    groups = [n.attrs["body"] for n in graph.nodes if n.op == "fused"]
    assert len(groups) >= 2
    kernels = fused.compile_groups([(b.inputs, b.nodes, b.outputs) for b in groups], compile=False)
    assert all(ok for ok, _ in kernels)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_complex_values_stay_out_of_kernels(backend, monkeypatch):
    """Kernels are real: complex products and sums (a spectral layer's) run as NumPy's calls,
    while the real elementwise ops around them still fuse."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    r = np.random.default_rng(0)
    x = tg.tensor(r.standard_normal((4, 8)))
    w = tg.tensor(r.standard_normal((4, 8)) + 1j * r.standard_normal((4, 8)))

    def f(x, w):
        z = tg.complex(tg.tanh(x) * 2.0 + 1.0, x) * w + w * 3.0
        return ((z.sum(0, keepdim=True) * z).real * 0.5).exp()

    traced = tg.trace(f, backend=backend)
    for _ in range(2):
        np.testing.assert_allclose(traced(x, w).numpy(), f(x, w).numpy(), rtol=1e-12)
    graph, _ = passes.fuse(traced.latest.capture.graph)
    groups = [n for n in graph.nodes if n.op == "fused"]
    members = [m for n in groups for m in n.attrs["body"].nodes]
    assert {m.op for m in members} >= {"tanh", "exp"}  # the real ones fuse
    assert not any(v.dtype.kind == "c" for m in members for v in (*m.inputs, *m.outputs))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_gradients_clipping_scale_and_its_update_are_one_kernel(backend, monkeypatch):
    """`clip_grad_norm_` scales each gradient in place between backward and `step()`: forward
    ops reading gradients, which join their update's kernel (one pass over the gradient and the
    parameter, not two), and the traced step still does what the eager one does."""
    from tracegrad import nn, optim
    from tracegrad.core.vocabulary import Phase

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def train(traced: bool) -> tuple[list, list]:
        tg.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()
        opt = optim.SGD(model.parameters(), lr=0.5, momentum=0.9)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            return loss

        run = tg.trace(step, backend=backend) if traced else step
        x = tg.tensor(np.random.default_rng(1).standard_normal((5, 6)))
        losses = [run(x).item() for _ in range(3)]
        if traced and backend == "numba":  # the NumPy backend runs the graph unfused
            fused = [n for n in run.latest.graph.nodes if n.op == "fused"]
            clip_and_update = [n for n in fused if {m.phase for m in n.attrs["body"].nodes}
                               == {Phase.FORWARD, Phase.UPDATE}]  # fmt: skip
            assert len(clip_and_update) == len(list(model.parameters()))
        return losses, [p.numpy().copy() for p in model.parameters()]

    (eager_losses, eager_params), (losses, params) = train(False), train(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-12)
    for got, want in zip(params, eager_params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)

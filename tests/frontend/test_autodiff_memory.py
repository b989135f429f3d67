"""The tape keeps only what each VJP reads: intermediates backward does not need die as soon as
Python drops them. Measured with weakrefs and with tracemalloc (NumPy reports its buffers)."""

from __future__ import annotations

import functools
import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad


def test_intermediate_dies_before_backward() -> None:
    x = tg.tensor(np.array([0.5, -1.0]), requires_grad=True)
    s = x * 2.0
    y = tg.exp(s)
    ref = weakref.ref(s)
    del s
    assert ref() is None  # no gc.collect(): nothing but reference counting
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * np.exp(2.0 * x.numpy()))


def test_results_hold_no_tensors_only_tape_nodes() -> None:
    x = tg.tensor(np.ones(3), requires_grad=True)
    y = tg.exp(tg.exp(x))
    refs = [weakref.ref(t) for t in gc.get_referents(y.grad_fn) if isinstance(t, tg.Tensor)]
    assert refs == []
    ref = weakref.ref(x)
    del x
    assert ref() is None  # the graph holds its leaf weakly
    assert y.grad_fn is not None


@functools.cache
def permutation(n: int) -> np.ndarray:
    return np.random.default_rng(2).permutation(n)


# Steps of a long chain h -> step(h), and how many arrays of h's size each step must keep
# for backward (what its VJPs read); everything else must be freed.
CHAINS = {
    "exp(0.1h): exp's output": (lambda h: tg.exp(h * 0.1), 1.0),
    "h + 1: nothing": (lambda h: h + 1.0, 0.0),
    "1 - h: nothing": (lambda h: 1.0 - h, 0.0),
    "reshape, transpose: nothing": (lambda h: h.reshape(-1, 10).T.reshape(-1), 0.0),
    "tanh(h) * 2: tanh's output": (lambda h: tg.tanh(h) * 2.0, 1.0),
    "sin(h): its input": (tg.sin, 1.0),
    "exp(h / 4): exp's output": (lambda h: tg.exp(h / 4.0), 1.0),
    "where(h > 0, h, -h): the bool mask": (lambda h: tg.where(h > 0, h, -h), 0.125),
    "h[perm]: nothing new (perm is shared)": (lambda h: h[permutation(h.size)], 0.0),
    "broadcast, sum: nothing": (
        lambda h: tg.broadcast_to(h.reshape(1, -1), (2, h.size)).sum(0),
        0.0,
    ),
}


def arrays_kept_per_step(step, steps: int = 20, size: int = 50_000) -> float:
    """Bytes the recorded graph of `steps` steps holds, in arrays of the input's size."""
    x = tg.tensor(np.random.default_rng(0).standard_normal(size), requires_grad=True)
    step(x)  # warm up caches
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        h = x
        for _ in range(steps):
            h = step(h)
        graph = h.grad_fn
        del h
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert graph is not None
    return held / (steps * x.numpy().nbytes)


@pytest.mark.parametrize("name", CHAINS)
def test_long_chain_keeps_only_what_backward_reads(name: str) -> None:
    step, needed = CHAINS[name]
    kept = arrays_kept_per_step(step)
    assert abs(kept - needed) < 0.06, f"{kept:.3f} arrays per step, needed {needed}"


@pytest.mark.parametrize("name", CHAINS)
def test_long_chain_gradient_is_still_exact(name: str) -> None:
    step, _ = CHAINS[name]

    def chain(h):
        for _ in range(30):
            h = step(h)
        return h

    check_grad(chain, np.random.default_rng(1).uniform(-1, 1, 30), tol=1e-5)


def test_saved_values_are_freed_by_backward() -> None:
    """Without retain_graph, backward drops the saved values at once, even while the output
    (and so the graph) is still alive."""
    x = tg.tensor(np.random.default_rng(0).standard_normal(100_000), requires_grad=True)
    nbytes = x.numpy().nbytes
    tracemalloc.start()
    try:
        h = x
        for _ in range(10):
            h = tg.exp(h * 0.1)
        loss = h.sum()
        before = tracemalloc.get_traced_memory()[0]
        loss.backward()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert before > 9.5 * nbytes  # ten exp outputs saved
    assert after < 2.5 * nbytes  # h itself and x.grad
    assert loss.grad_fn is not None

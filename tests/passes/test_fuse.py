"""The fusion pass on a graph it once failed on: a node reading rows of two reductions whose
shapes do not broadcast ((2, 6) and (2, 4)) cannot join both groups; the pass leaves them apart
instead of raising numpy's broadcast error."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
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

"""The Numba backend's scatter-add of rows (`compiler.kernels.scatter`), an embedding's gradient,
against the NumPy version and `np.add.at`."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler.kernels.native import compile_native
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value


def scatter_kernel(g, rows, shape):
    node = Node(P.scatter_add, [Value(g.shape, g.dtype), Value(rows.shape, rows.dtype)],
                [Value(shape, g.dtype)], {"shape": shape, "template": ("@",)})  # fmt: skip
    [(ok, kernel)] = compile_native([node])
    assert ok
    return kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(7, 5), (7,), (7, 2, 3)])
def test_rows_add_up_like_add_at(rng, dtype, index, shape):
    rows = rng.integers(-7, 7, (4, 6)).astype(index)  # repeats, and negatives from the end
    g = rng.standard_normal(rows.shape + shape[1:]).astype(dtype)
    want = np.zeros(shape, dtype)
    np.add.at(want, rows, g)
    got = np.full(shape, np.nan, dtype)
    scatter_kernel(g, rows, shape)(g, rows, got)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, P.scatter_add.impl(g, rows, shape=shape, template=("@",)),
                               rtol=tol, atol=tol)  # fmt: skip


def test_an_index_out_of_range_raises_as_numpy_does(rng):
    rows, g = np.array([1, 7, 2]), rng.standard_normal((3, 4))
    kernel = scatter_kernel(g, rows, (7, 4))
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 7"):
        kernel(g, rows, np.empty((7, 4)))
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 7"):
        P.scatter_add.impl(g, rows, shape=(7, 4), template=("@",))


def test_traced_embedding_step_runs_the_kernel_and_matches_eager(rng):
    table = tg.nn.Embedding(50, 64)
    idx = tg.tensor(rng.integers(0, 50, (32, 40)))

    def step(idx):
        loss = (table(idx) ** 2).sum()
        loss.backward()
        return loss

    step(idx)
    want = table.weight.grad.numpy().copy()
    table.weight.grad = None
    traced = tg.trace(step, backend="numba")
    traced(idx)
    traced.wait_for_kernels()
    table.weight.grad = None
    traced(idx)
    np.testing.assert_allclose(table.weight.grad.numpy(), want, rtol=1e-5, atol=1e-5)
    assert "scatter_add kernel" in traced.latest.source

"""The Numba backend's scatter-add along an axis (`compiler.kernels.scatter`): an embedding's
gradient (rows) and a gather's along a later axis, against the NumPy version and `np.add.at`."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler.kernels import scatter, team
from tracegrad.compiler.kernels.native import compile_native
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value


def scatter_kernel(g, rows, shape, template=("@",)):
    node = Node(P.scatter_add, [Value(g.shape, g.dtype), Value(rows.shape, rows.dtype)],
                [Value(shape, g.dtype)], {"shape": shape, "template": template})  # fmt: skip
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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, axis",
    [((3, 7, 5), 1), ((2, 3, 7), 2), ((64, 4, 40), 2), ((2, 64, 7, 33), 2), ((16, 64, 160), 2)],
)
def test_along_a_later_axis_adds_up_like_add_at_on_one_thread_or_all(rng, dtype, shape, axis):
    """Full slices before the index (a bilinear interpolation's taps along H or W): the rows
    before the axis shared between threads (always from PARALLEL_MIN elements, else only while
    the team is awake), the same bits either way, and add.at's values."""
    index = rng.integers(-shape[axis], shape[axis], 2 * shape[axis])  # repeats, negatives
    template = (slice(None),) * axis + ("@",)
    g = rng.standard_normal(shape[:axis] + index.shape + shape[axis + 1 :]).astype(dtype)
    want = np.zeros(shape, dtype)
    np.add.at(want, (slice(None),) * axis + (index,), g)
    kernel = scatter_kernel(g, index, shape, template)
    got = []
    for last in (-1e9, team.clock()):  # asleep long ago, awake just now
        team.last[0] = last
        got.append(np.full(shape, np.nan, dtype))
        kernel(g, index, got[-1])
    np.testing.assert_array_equal(got[0], got[1])
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got[0], want, rtol=tol, atol=tol)
    numpy = P.scatter_add.impl(g, index, shape=shape, template=template)
    np.testing.assert_allclose(got[0], numpy, rtol=tol, atol=tol)


def test_empty_gradients_and_empty_cells_give_zeros_or_nothing(rng):
    for shape, n in [((3, 4, 0), 5), ((3, 4, 2), 0)]:
        index = rng.integers(0, shape[1], n)
        g = np.ones(shape[:1] + index.shape + shape[2:], np.float32)
        got = np.full(shape, np.nan, np.float32)
        scatter_kernel(g, index, shape, (slice(None), "@"))(g, index, got)
        np.testing.assert_array_equal(got, np.zeros(shape, np.float32))


def test_an_index_not_after_whole_axes_is_not_this_kernels():
    g, rows = Value((3, 4), np.float32), Value((4,), np.int64)
    for template in [(slice(1, 3), "@"), ("@", "@"), (0, "@")]:
        node = Node(P.scatter_add, [g, rows], [Value((5, 4), np.float32)],
                    {"shape": (5, 4), "template": template})  # fmt: skip
        with pytest.raises(NotImplementedError):
            scatter.module(node)


def test_an_index_out_of_range_raises_as_numpy_does(rng):
    rows, g = np.array([1, 7, 2]), rng.standard_normal((3, 4))
    kernel = scatter_kernel(g, rows, (7, 4))
    got = np.full((7, 4), 3.0)
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 7"):
        kernel(g, rows, got)
    assert (got == 3.0).all()  # nothing written
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

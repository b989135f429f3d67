"""Matrix products on Numba's threads through NumPy's OpenBLAS (`compiler.kernels.gemm`)."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler.kernels import blas, gemm, team
from tracegrad.compiler.kernels.native import compile_native
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value

pytestmark = pytest.mark.skipif(
    blas.gemm_symbols() is None, reason="NumPy's BLAS is not an OpenBLAS with cblas routines"
)


def product_kernel(a: np.ndarray, b: np.ndarray):
    node = Node(P.matmul, [Value(a.shape, a.dtype), Value(b.shape, b.dtype)],
                [Value((a.shape[0], b.shape[1]), a.dtype)])  # fmt: skip
    [(ok, kernel)] = compile_native([node])
    assert ok
    return kernel


def layouts(x: np.ndarray) -> dict[str, np.ndarray]:
    """x as rows, as columns (a transpose's layout) and as rows of a wider array."""
    wide = np.zeros((x.shape[0], x.shape[1] + 3), x.dtype)
    wide[:, : x.shape[1]] = x
    return {"rows": x, "columns": np.asfortranarray(x), "strided": wide[:, : x.shape[1]]}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(300, 70, 40), (40, 70, 300), (257, 3, 259), (520, 90, 60),
                                   (60, 90, 520), (257, 33, 259), (300, 40, 900)])  # fmt: skip
def test_products_match_numpy_in_every_layout(rng, dtype, m, k, n):
    """Small products on the calling thread; from SERIAL_MAX multiply-adds rows split between
    threads when m >= n or each share has ROWS_MIN rows (a wide weight gradient), columns
    otherwise; uneven shares."""
    assert (m * k * n >= gemm.SERIAL_MAX) == (m * k * n > 2_000_000)  # both kinds below
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    kernel, want = product_kernel(a, b), a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for la, a_ in layouts(a).items():
        for lb, b_ in layouts(b).items():
            got = np.full((m, n), np.nan, dtype)
            team.last[0] = -1.0
            kernel(a_, b_, got)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{la} @ {lb}")
            # a shared product leaves the team awake (`team`), one on this thread does not
            shared = m * k * n >= gemm.SERIAL_MAX and kernel.threads > 1
            assert (team.last[0] != -1.0) == shared


def batched_kernel(a: np.ndarray, b: np.ndarray):
    out = Value((*a.shape[:-1], b.shape[-1]), a.dtype)
    node = Node(P.matmul, [Value(a.shape, a.dtype), Value(b.shape, b.dtype)], [out])
    [(ok, kernel)] = compile_native([node])
    assert ok
    return kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [(7,), (3, 4), (65,)])
def test_stacks_of_products_match_numpy(rng, dtype, batch):
    """Attention's products: stacks of one batch shape, a key transposed (a view: its batch
    axes still merge), each product on one thread, the stack shared between the threads from
    SERIAL_MAX multiply-adds in all; an output that is not contiguous is computed by NumPy."""
    q, k = (rng.standard_normal((*batch, 33, 64)).astype(dtype) for _ in range(2))
    scores = rng.standard_normal((*batch, 33, 33)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for a, b in ((q, np.swapaxes(k, -1, -2)), (scores, k), (np.swapaxes(scores, -1, -2), q)):
        want = a.astype(np.float64) @ b.astype(np.float64)
        got = np.full(want.shape, np.nan, dtype)
        team.last[0] = -1.0
        batched_kernel(a, b)(a, b, got)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        shared = a.size // a.shape[-1] * a.shape[-1] * b.shape[-1] >= gemm.SERIAL_MAX
        assert (team.last[0] != -1.0) == (shared and numba.get_num_threads() > 1)
        strided = np.full((*want.shape[:-1], want.shape[-1] + 2), np.nan, dtype)[..., :-2]
        batched_kernel(a, b)(a, b, strided)
        np.testing.assert_allclose(strided, want, rtol=tol, atol=tol)


def test_stacks_of_other_batch_shapes_take_numpy():
    """A batch that broadcasts (one matrix against a stack) is not the kernel's."""
    node = Node(P.matmul, [Value((4, 5, 6), np.float32), Value((1, 6, 3), np.float32)],
                [Value((4, 5, 3), np.float32)])  # fmt: skip
    assert compile_native([node]) == [(False, None)]


def test_layouts_blas_cannot_read_and_read_only_operands_go_to_numpy(rng):
    a, b = rng.standard_normal((200, 60)), rng.standard_normal((60, 300))
    kernel = product_kernel(a, b[:, ::2])
    got = np.empty((200, 150))
    kernel(a, b[:, ::2], got)  # every other column: no leading dimension
    np.testing.assert_allclose(got, a @ b[:, ::2], rtol=1e-12)
    kernel(a, b[::-1, :150], got)  # rows backwards: a negative stride
    np.testing.assert_allclose(got, a @ b[::-1, :150], rtol=1e-12)
    a.flags.writeable = False
    kernel(a, b[:, ::2].copy(), got)
    np.testing.assert_allclose(got, a @ b[:, ::2], rtol=1e-12)
    columns = np.empty((150, 200)).T  # a result BLAS would write row by row: NumPy's
    kernel(a.copy(), b[:, ::2].copy(), columns)
    np.testing.assert_allclose(columns, a @ b[:, ::2], rtol=1e-12)


def test_an_empty_inner_dimension_gives_zeros():
    a, b = np.ones((300, 0), np.float32), np.ones((0, 400), np.float32)
    got = np.full((300, 400), np.nan, np.float32)
    product_kernel(a, b)(a, b, got)
    assert not got.any()


def test_openblas_keeps_its_thread_count():
    """The kernel sets OpenBLAS's (global) count to one while its threads run their shares,
    and back: NumPy's own products keep their threads."""
    address = llvm.address_of_symbol("tracegrad_openblas_get_num_threads")  # gemm_symbols'
    blas_threads = ctypes.CFUNCTYPE(ctypes.c_int)(address)
    before = blas_threads()
    a = np.ones((512, 512), np.float32)
    product_kernel(a, a)(a, a, np.empty_like(a))
    assert blas_threads() == before


def test_a_traced_step_runs_its_products_as_kernels(rng):
    w = tg.tensor(rng.standard_normal((256, 256)).astype(np.float32), requires_grad=True)
    gm = tg.GradManager().attach([w])

    def step(x):
        with gm:
            loss = tg.tanh(x @ w).sum()
            gm.backward(loss)
        return loss

    x = rng.standard_normal((512, 256)).astype(np.float32)
    eager_loss, eager_grad = float(step(tg.tensor(x))), w.grad.numpy().copy()
    w.grad = None
    traced = tg.trace(step, backend="numba")
    traced_loss = float(traced(x))
    assert sum("matmul kernel" in line for line in traced.latest.source.splitlines()) == 2
    np.testing.assert_allclose(traced_loss, eager_loss, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), eager_grad, rtol=1e-4, atol=1e-4)

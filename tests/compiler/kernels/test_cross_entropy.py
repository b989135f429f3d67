"""The Numba backend's softmax cross-entropy and log-softmax kernels
(`compiler.kernels.cross_entropy`) against the ops' NumPy versions, and a traced classifier step
that runs them against the eager step."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler.kernels import cross_entropy
from tracegrad.compiler.kernels.native import compile_native
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value
from tracegrad.nn import functional as F


def kernel_of(prim, ins, out_shape, dtype, **attrs):
    node = Node(prim, [Value(a.shape, a.dtype) for a in ins], [Value(out_shape, dtype)], attrs)
    [(ok, kernel)] = compile_native([node])
    assert ok
    return kernel


def run_both(dtype, reduction, weighted, x, labels):
    """Forward and backward by the kernels and by the NumPy versions."""
    attrs = {"ignore_index": -100, "reduction": reduction}
    w = (np.random.default_rng(3).uniform(0.5, 2, x.shape[1]).astype(dtype),) if weighted else ()
    out_shape = x.shape[:1] if reduction == "none" else ()
    g = np.random.default_rng(4).standard_normal(out_shape).astype(dtype)
    loss = np.full(out_shape, np.nan, dtype)
    kernel_of(P.cross_entropy, (x, labels, *w), out_shape, dtype, **attrs)(x, labels, *w, loss)
    dx = np.full(x.shape, np.nan, dtype)
    ins = (g, x, labels, *w)
    kernel_of(P.cross_entropy_grad, ins, x.shape, dtype, **attrs)(*ins, dx)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = P.cross_entropy.impl(x, labels, *w, **attrs)
        want_dx = P.cross_entropy_grad.impl(g, x, labels, *w, **attrs)
    return (loss, dx), (want, want_dx)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(7, 3), (300, 129)])
def test_kernels_match_the_numpy_versions(rng, dtype, reduction, weighted, shape):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    labels = rng.integers(0, shape[1], shape[0])
    labels[::5] = -100  # ignored
    (loss, dx), (want, want_dx) = run_both(dtype, reduction, weighted, x, labels)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(loss, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol)
    assert not dx[::5].any() if reduction != "mean" or weighted else True


@pytest.mark.parametrize("shape, parallel", [((300, 129), False), ((1100, 129), True)])
def test_rows_run_on_several_threads_only_where_that_pays(rng, shape, parallel):
    """Waking the other threads costs more than a small call's work: fewer scores than
    `fused.PARALLEL_MIN` make a module that runs its rows on one thread; either computes what
    the NumPy versions compute."""
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    labels = rng.integers(0, shape[1], shape[0])
    node = Node(P.cross_entropy, [Value(x.shape, x.dtype), Value(labels.shape, labels.dtype)],
                [Value((), x.dtype)], {"ignore_index": -100, "reduction": "mean"})  # fmt: skip
    assert f"parallel={parallel}," in cross_entropy.module(node)[1]
    (loss, dx), (want, want_dx) = run_both(np.float32, "mean", True, x, labels)
    np.testing.assert_allclose(loss, want, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(dx, want_dx, rtol=2e-6, atol=2e-6)


def test_kernels_on_edge_rows(rng):
    """A row of -inf logits and a NaN logit give what the NumPy versions give; a batch with
    every label ignored has a NaN mean and a zero gradient."""
    x = rng.standard_normal((6, 4)).astype(np.float32)
    x[1], x[3, 2] = -np.inf, np.nan
    labels = rng.integers(0, 4, 6)
    (loss, dx), (want, want_dx) = run_both(np.float32, "none", False, x, labels)
    np.testing.assert_array_equal(np.isnan(loss), np.isnan(want))
    np.testing.assert_allclose(loss, want, rtol=2e-6)
    np.testing.assert_array_equal(np.isnan(dx), np.isnan(want_dx))
    x = rng.standard_normal((6, 4)).astype(np.float32)
    (loss, dx), _ = run_both(np.float32, "mean", True, x, np.full(6, -100))
    assert np.isnan(loss) and not dx.any()


@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
@pytest.mark.parametrize("shape", [(7, 3), (2, 5, 129)])
@pytest.mark.parametrize("op, grad", [(P.log_softmax, P.log_softmax_grad),
                                      (P.softmax, P.softmax_grad)])  # fmt: skip
def test_softmax_and_log_softmax_kernels_match_the_numpy_versions(rng, dtype, tol, shape, op, grad):
    """Over the last axis, rows of -inf and a NaN among them, a row masked with the dtype's
    lowest (transformers' attention) and one all -inf; an other axis has no kernel."""
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x[0, 1], x[-1, -1] = -np.inf, np.nan
    rows = x.reshape(-1, shape[-1])
    rows[1, :2], rows[2] = np.finfo(dtype).min, -np.inf
    g = rng.standard_normal(shape).astype(dtype)
    axis = {"axis": (len(shape) - 1,)}
    out, dx = np.full(shape, 7, dtype), np.full(shape, 7, dtype)
    kernel_of(op, (x,), shape, dtype, **axis)(x, out)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = op.impl(x, **axis)
        kernel_of(grad, (g, want), shape, dtype, **axis)(g, want, dx)
        want_dx = grad.impl(g, want, **axis)
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol)
    node = Node(op, [Value(shape, dtype)], [Value(shape, dtype)], {"axis": (0,)})
    assert compile_native([node]) == [(False, None)]


def test_traced_classifier_step_runs_the_kernels_and_matches_eager(rng):
    """(A layer of over `lowering.KERNEL_MIN` weights: a plan of small nodes alone runs NumPy.)"""
    model = tg.nn.Sequential(tg.nn.Linear(300, 256), tg.nn.ReLU(), tg.nn.Linear(256, 10))
    x = tg.tensor(rng.standard_normal((64, 300)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 10, 64))

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    want = step(x, y).numpy()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    traced = tg.trace(step, backend="numba")
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        traced(x, y)
        traced.wait_for_kernels()
    model.zero_grad(set_to_none=True)
    got = traced(x, y).numpy()
    assert "cross_entropy kernel" in traced.latest.source
    assert "cross_entropy_grad kernel" in traced.latest.source
    np.testing.assert_allclose(got, want, rtol=2e-6)
    for p, g in zip(model.parameters(), grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-5, atol=1e-6)

"""Eager calls of ops with kernels of their own (`runtime.eager`): NumPy until the signature's
kernel has loaded, the kernel after, the same results; small calls never load one."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.core import primitives as P
from tracegrad.nn import functional as F
from tracegrad.runtime import eager


def loaded() -> bool:
    """Wait for the kernels requested so far; True if every one loaded."""
    eager.wait_for_kernels()
    return all(k is not None for k in eager._kernels.values())


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_a_large_eager_call_runs_its_kernel_once_loaded(rng, dtype, tol, monkeypatch):
    """The first calls run NumPy; once the kernels have loaded, the same calls (forward and
    backward of a convolution and a max-pooling) run them, NumPy's version refusing to run, and
    give NumPy's results and gradients."""
    monkeypatch.setattr(eager, "_kernels", {})
    # the convolution's result, (8, 16, 32, 32), is over KERNEL_MIN elements
    x = tg.tensor(rng.standard_normal((8, 8, 32, 32)).astype(dtype), requires_grad=True)
    w = tg.tensor(rng.standard_normal((16, 8, 3, 3)).astype(dtype), requires_grad=True)

    def step():
        x.grad = w.grad = None
        y = F.max_pool2d(F.conv2d(x, w, padding=1), 2)
        (y * y).sum().backward()
        return y.numpy(), x.grad.numpy(), w.grad.numpy()

    want = step()  # NumPy, and the kernels' loading starts
    assert loaded()
    ops = {key[0] for key in eager._kernels}
    assert {"conv2d", "conv2d_input_grad", "conv2d_weight_grad", "max_pool2d"} <= ops

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy ran an op whose kernel had loaded")

    for prim in (P.conv2d, P.conv2d_input_grad, P.conv2d_weight_grad, P.max_pool2d):
        monkeypatch.setattr(prim, "impl", refuse)
    for got, expected in zip(step(), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())


def test_small_calls_load_no_kernel(rng, monkeypatch):
    monkeypatch.setattr(eager, "_kernels", {})
    x = tg.tensor(rng.standard_normal((2, 3, 8, 8)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((4, 3, 3, 3)))
    F.conv2d(x, w, padding=1).sum().backward()
    assert eager._kernels == {}


def test_the_ops_it_runs_have_kernels():
    """`eager.OPS` names ops the Numba backend has kernels of its own for."""
    from tracegrad.compiler.kernels.native import GENERATORS

    assert set(eager.OPS) <= set(GENERATORS)

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
    backward of a convolution, a training batch norm and a max-pooling) run them, NumPy's
    version refusing to run, and give NumPy's results, gradients and running statistics."""
    monkeypatch.setattr(eager, "_kernels", {})
    # the convolution's result, (8, 16, 32, 32), is over KERNEL_MIN elements
    x = tg.tensor(rng.standard_normal((8, 8, 32, 32)).astype(dtype), requires_grad=True)
    w = tg.tensor(rng.standard_normal((16, 8, 3, 3)).astype(dtype), requires_grad=True)
    scale = tg.tensor(rng.standard_normal(16).astype(dtype), requires_grad=True)
    mean, var = tg.zeros(16, dtype=dtype), tg.ones(16, dtype=dtype)

    def step():
        x.grad = w.grad = scale.grad = None
        h = F.batch_norm(F.conv2d(x, w, padding=1), mean, var, scale, -scale, training=True)
        y = F.max_pool2d(h, 2)
        (y * y).sum().backward()
        return y.numpy(), x.grad.numpy(), w.grad.numpy(), scale.grad.numpy(), mean.numpy()

    want = step()  # NumPy, and the kernels' loading starts
    assert loaded()
    ops = {key[0] for key in eager._kernels}
    assert {"conv2d", "conv2d_input_grad", "conv2d_weight_grad", "max_pool2d", "batch_norm",
            "batch_norm_grad", "batch_stats"} <= ops  # fmt: skip

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy ran an op whose kernel had loaded")

    for prim in (P.conv2d, P.conv2d_input_grad, P.conv2d_weight_grad, P.max_pool2d,
                 P.batch_norm, P.batch_norm_grad, P.batch_stats):  # fmt: skip
        monkeypatch.setattr(prim, "impl", refuse)
    mean.numpy()[:], var.numpy()[:] = 0, 1  # the statistics move again from where they started
    for got, expected in zip(step(), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_a_large_gelu_runs_a_fused_kernel_once_loaded(rng, dtype, tol, approximate, monkeypatch):
    """GELU's NumPy versions are a dozen passes over memory: once a signature's fused kernel
    (of the op alone) has loaded, its forward and backward run that, NumPy refusing to run,
    with NumPy's results and gradient (x in Fortran order: the kernel reads any layout)."""
    monkeypatch.setattr(eager, "_kernels", {})
    x = tg.tensor(rng.standard_normal((300, 257)).T.astype(dtype) * 3, requires_grad=True)

    def step():
        x.grad = None
        y = F.gelu(x, approximate=approximate)
        (y * y).sum().backward()
        return y.numpy(), x.grad.numpy()

    want = step()
    assert loaded()
    names = {"none": ("gelu", "gelu_slope"), "tanh": ("gelu_tanh", "gelu_tanh_slope")}
    assert {key[0] for key in eager._kernels} == set(names[approximate])

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy ran an op whose kernel had loaded")

    for name in names[approximate]:
        monkeypatch.setattr(getattr(P, name), "impl", refuse)
    for got, expected in zip(step(), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())


def test_small_calls_load_no_kernel(rng, monkeypatch):
    monkeypatch.setattr(eager, "_kernels", {})
    x = tg.tensor(rng.standard_normal((2, 3, 8, 8)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((4, 3, 3, 3)))
    F.conv2d(x, w, padding=1).sum().backward()
    assert eager._kernels == {}


def test_the_ops_it_runs_have_kernels():
    """`eager.OPS` names ops the Numba backend has kernels of its own for; `eager.ELEMENTWISE`,
    ops the fused-kernel generator compiles alone."""
    from tracegrad.compiler.kernels.fused import compile_groups
    from tracegrad.compiler.kernels.native import GENERATORS
    from tracegrad.core.ir import Node, Value

    assert set(eager.OPS) <= set(GENERATORS)
    x, y = Value((4, 5), np.float32), Value((4, 5), np.float32)
    groups = [([x], [Node(prim, [x], [y], {})], [y]) for prim in eager.ELEMENTWISE]
    assert all(ok for ok, _ in compile_groups(groups, compile=False))

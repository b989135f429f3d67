"""Eager calls of ops with kernels of their own (`runtime.eager`): NumPy until the signature's
kernel has loaded, the kernel after, the same results; small calls never load one."""

from __future__ import annotations

import subprocess
import sys

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
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_a_large_cross_entropy_runs_its_kernels_once_loaded(rng, dtype, tol, reduction,
                                                             monkeypatch):  # fmt: skip
    """A language model's loss over its vocabulary (transformers' `ForCausalLMLoss`, with
    ignored positions and class weights): NumPy first, then the cross-entropy's kernels forward
    and back, NumPy's version refusing to run, with NumPy's loss and gradient."""
    monkeypatch.setattr(eager, "_kernels", {})
    x = tg.tensor(rng.standard_normal((64, 1500)).astype(dtype), requires_grad=True)
    labels = rng.integers(0, 1500, 64)
    labels[:5] = -100
    labels, weight = tg.tensor(labels), tg.tensor(rng.uniform(0.5, 2.0, 1500).astype(dtype))

    def step():
        x.grad = None
        loss = F.cross_entropy(x, labels, weight=weight, reduction=reduction)
        loss.sum().backward()
        return loss.numpy(), x.grad.numpy()

    want = step()
    assert loaded()
    assert {"cross_entropy", "cross_entropy_grad"} <= {key[0] for key in eager._kernels}

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy ran an op whose kernel had loaded")

    monkeypatch.setattr(P.cross_entropy, "impl", refuse)
    monkeypatch.setattr(P.cross_entropy_grad, "impl", refuse)
    for got, expected in zip(step(), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())


def test_large_eager_products_run_the_gemm_kernel_once_loaded(rng, monkeypatch):
    """A layer's product and attention's stacked ones (a key transposed), forward and back: the
    plans' GEMM kernel on Numba's threads once it has loaded, NumPy's matmul refusing to run."""
    monkeypatch.setattr(eager, "_kernels", {})
    x = tg.tensor(rng.standard_normal((256, 300)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((300, 256)), requires_grad=True)
    q, k = (tg.tensor(rng.standard_normal((4, 2, 96, 32)), requires_grad=True) for _ in "qk")

    def step():
        x.grad = w.grad = q.grad = k.grad = None
        h = (x @ w).tanh()
        scores = q @ k.transpose(-1, -2)
        (h.sum() + (scores @ k).square().sum()).backward()
        return h.numpy(), x.grad.numpy(), w.grad.numpy(), q.grad.numpy(), k.grad.numpy()

    want = step()
    assert loaded()

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy ran a product whose kernel had loaded")

    monkeypatch.setattr(P.matmul, "impl", refuse)
    for got, expected in zip(step(), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


# activation: (its function, the ops its forward and backward run by their kernels)
ACTIVATIONS = {
    "gelu": (F.gelu, ("gelu", "gelu_slope")),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), ("gelu_tanh", "gelu_tanh_slope")),
    "silu": (F.silu, ("silu", "silu_slope")),
    "sigmoid": (F.sigmoid, ("sigmoid", "sigmoid_grad")),
    "tanh": (F.tanh, ("tanh_grad",)),
}


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_a_large_activation_runs_a_fused_kernel_once_loaded(rng, dtype, tol, activation,
                                                            monkeypatch):  # fmt: skip
    """GELU's, SiLU's and the sigmoid's NumPy versions are many passes over memory: once a
    signature's fused kernel (of the op alone) has loaded, its forward and backward run that,
    NumPy refusing to run, with NumPy's results and gradient (x in Fortran order: the kernel
    reads any layout)."""
    monkeypatch.setattr(eager, "_kernels", {})
    function, names = ACTIVATIONS[activation]
    x = tg.tensor(rng.standard_normal((300, 257)).T.astype(dtype) * 3, requires_grad=True)

    def step():
        x.grad = None
        y = function(x)
        (y * y).sum().backward()
        return y.numpy(), x.grad.numpy()

    want = step()
    assert loaded()
    assert set(names) <= {key[0] for key in eager._kernels}

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy ran an op whose kernel had loaded")

    for name in names:
        monkeypatch.setattr(getattr(P, name), "impl", refuse)
    for got, expected in zip(step(), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())


EXACT = ("add", "sub", "mul", "div", "neg", "maximum", "minimum", "where", "less", "less_equal",
         "greater", "greater_equal", "equal", "not_equal")  # fmt: skip


def test_large_exact_elementwise_ops_run_kernels_with_numpys_bits(rng, monkeypatch):
    """In a process that runs kernels, arithmetic, selects and comparisons on large float
    operands run kernels once loaded (broadcast, transposed, 0-d, mixed float32 and float64, a
    mask), bit for bit NumPy's results and gradients, NumPy's versions refusing to run; integer
    operands stay NumPy's."""
    monkeypatch.setattr(eager, "_kernels", {})
    monkeypatch.setattr(eager, "_quiet", [False])  # some kernel has run
    monkeypatch.setattr(eager, "EXACT_MIN", 1 << 16)  # operands of a test's size
    x = tg.tensor(rng.standard_normal((257, 300)).astype(np.float32).T, requires_grad=True)
    row = tg.tensor(rng.standard_normal(257), requires_grad=True)  # float64, broadcast
    mask = tg.tensor(rng.random((300, 257)) < 0.5)

    def step():
        x.grad = row.grad = None
        y = tg.where(mask, F.relu(x) - x / 3, -x * 0.5)
        z = tg.minimum(y, row) + (x >= row) * 2.0 - (x < 0.25) + (x == x) - (x != row)
        w = z / (1.0 + (x <= row)) + (x > y)
        (w * w).sum().backward()
        return w.numpy(), x.grad.numpy(), row.grad.numpy()

    want = step()
    assert loaded()
    assert set(EXACT) <= {key[0] for key in eager._kernels}

    def refuse(*args, **kwargs):
        raise AssertionError("NumPy ran an op whose kernel had loaded")

    with monkeypatch.context() as patches:
        for name in EXACT:
            patches.setattr(getattr(P, name), "impl", refuse)
        got = step()
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    ints = tg.tensor(np.arange(300 * 257).reshape(300, 257))
    eager._kernels.clear()
    np.testing.assert_array_equal((ints * ints - ints).numpy(), ints.numpy() ** 2 - ints.numpy())
    assert eager._kernels == {}


def test_exact_ops_alone_stay_numpys(rng, monkeypatch):
    """A process that has run no other kernel keeps NumPy's exact ops (and OpenBLAS awake)."""
    monkeypatch.setattr(eager, "_kernels", {})
    monkeypatch.setattr(eager, "_quiet", [])
    x = tg.tensor(rng.standard_normal((300, 257)))
    np.testing.assert_array_equal((x * x + x).numpy(), x.numpy() * x.numpy() + x.numpy())
    assert eager._kernels == {} and eager._quiet == []


def test_small_calls_load_no_kernel_until_one_has_loaded(rng, monkeypatch):
    """A small program never loads Numba; once a kernel has, a small grouped convolution asks
    for its own, as a plan's does (its NumPy version is a call per tap or group at any size),
    and a convolution of one group does not: it keeps NumPy's rounding call after call."""
    monkeypatch.setattr(eager, "_kernels", {})
    monkeypatch.setattr(eager, "_quiet", [])
    requested = []
    monkeypatch.setattr(eager, "_request", lambda key, node: requested.append(key[0]))
    x = tg.tensor(rng.standard_normal((2, 3, 8, 8)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((3, 1, 3, 3)), requires_grad=True)
    F.conv2d(x, w, padding=1, groups=3).sum().backward()
    assert eager._kernels == {} and requested == []
    monkeypatch.setattr(eager, "_quiet", [True])
    F.conv2d(x, tg.tensor(rng.standard_normal((4, 3, 3, 3))), padding=1).sum().backward()
    assert requested == []
    (F.conv2d(x, w, padding=1, groups=3) * 2).sum().backward()
    assert sorted(requested) == ["conv2d", "conv2d_input_grad", "conv2d_weight_grad"]
    F.max_pool2d(x, 2)
    assert requested[3:] == ["max_pool2d_argmax", "max_pool2d"]


def test_the_ops_it_runs_have_kernels():
    """`eager.OPS` names ops the Numba backend has kernels of its own for; `eager.ELEMENTWISE`
    and `eager.EXACT`, ops the fused-kernel generator compiles alone."""
    from tracegrad.compiler.kernels.fused import compile_groups
    from tracegrad.compiler.kernels.native import GENERATORS
    from tracegrad.core.ir import Node, Value

    assert set(eager.OPS) <= set(GENERATORS)
    x, y = Value((4, 5), np.float32), Value((4, 5), np.float32)
    groups = [([x], [Node(prim, [x], [y], {})], [y]) for prim in eager.ELEMENTWISE]
    mask, z = Value((4, 5), np.bool_), Value((4, 5), np.float32)
    for prim in eager.EXACT:
        ins = [mask, x, z] if prim is P.where else [x] if prim is P.neg else [x, z]
        out = Value((4, 5), np.bool_ if prim.name in EXACT[-6:] else np.float32)
        groups.append((ins, [Node(prim, ins, [out], {})], [out]))
    assert all(ok for ok, _ in compile_groups(groups, compile=False))


FORKED = """
import multiprocessing, time
import numpy as np
import tracegrad as tg
from tracegrad.compiler.kernels import fused
from tracegrad.runtime import eager

compile_groups = fused.compile_groups
fused.compile_groups = lambda *a, **k: time.sleep(3) or compile_groups(*a, **k)  # still loading

x = tg.tensor(np.linspace(-3.0, 3.0, 1 << 17))


def child(queue):
    eager.wait_for_kernels()  # the parent's pending request is not this process's to wait for
    for _ in range(2):
        y = tg.nn.functional.gelu(x)  # asked again here, by a thread of this process's own
    eager.wait_for_kernels()
    queue.put(float(tg.nn.functional.gelu(x).sum()))


if __name__ == "__main__":
    want = float(tg.nn.functional.gelu(x).sum())  # its kernel starts loading: a pending request
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    worker = context.Process(target=child, args=(queue,))
    worker.start()
    got = queue.get(timeout=120)
    worker.join(60)
    assert abs(got - want) <= 1e-9 * abs(want), (got, want)
    print("ok")
"""


def test_a_forked_process_loads_its_own_kernels_and_waits_for_its_own(tmp_path):
    """Only the forking thread survives a fork: the loading thread and its queue's pending
    requests stay in the parent (waiting for them in the child never returned)."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]

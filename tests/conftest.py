"""Shared test helpers: gradients checked against float64 central finite differences; every pass
of every compiled step re-checks the graph it returns."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import passes
import tracegrad as tg
from tracegrad.compiler import lowering

os.environ["TRACEGRAD_BACKGROUND_COMPILE"] = "0"  # plans are tested as compiled (test_trace)
passes.VERIFY = True  # every graph a pass returns is re-checked (Graph.verify) in the tests


def on_pytorch(call: Callable[[], Any]) -> Any:
    """`call()` against PyTorch, the oracle, its deprecation warnings quiet. A spelling the
    installed PyTorch has removed (`torch.cholesky`, `torch.qr` in 2.14) skips the test: the
    oracle is gone, and tracegrad keeps the name for the code that still uses it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return call()
        except RuntimeError as error:
            if "is now removed" not in str(error):
                raise
            pytest.skip(f"this PyTorch removed the spelling: {str(error).splitlines()[0]}")


def numeric_grad(f: Callable[[np.ndarray], float], a: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central finite differences of the scalar function `f` at `a`, element by element."""
    a = np.array(a, dtype=np.float64)
    out = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + eps
        up = f(a)
        a[i] = old - eps
        down = f(a)
        a[i] = old
        out[i] = (up - down) / (2 * eps)
    return out


def check_grad(fn: Callable[..., tg.Tensor], *arrays: np.ndarray, tol: float = 1e-5) -> None:
    """Compare tracegrad's gradient of sum(fn(*xs) * c), c a random cotangent, with finite
    differences in float64, for every argument. Also checks grads' shapes and dtypes. Complex
    arrays are complex128, and a complex result's loss is sum(re(fn(*xs) * conj(c))): their
    gradient is PyTorch's, dL/dRe x + i dL/dIm x, each part's by finite differences."""
    arrays = [np.asarray(a, np.complex128 if np.iscomplexobj(a) else np.float64) for a in arrays]
    xs = [tg.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*xs)
    rng = np.random.default_rng(1)
    c = rng.standard_normal(out.shape)
    if out.dtype.kind == "c":
        c = c + 1j * rng.standard_normal(out.shape)
        tg.real(out * tg.tensor(np.conj(c))).sum().backward()
    else:
        (out * c).sum().backward()

    for i, x in enumerate(xs):

        def loss(a: np.ndarray) -> float:
            args = [tg.tensor(b) for b in arrays]
            args[i] = tg.tensor(a)
            return float(np.sum(np.real(fn(*args).numpy() * np.conj(c))))

        a = arrays[i]
        if a.dtype.kind == "c":
            expected = numeric_grad(lambda r, a=a: loss(r + 1j * a.imag), a.real) + 1j * (
                numeric_grad(lambda m, a=a: loss(a.real + 1j * m), a.imag)
            )
        else:
            expected = numeric_grad(loss, a)
        assert x.grad is not None, f"argument {i} got no gradient"
        assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=tol, atol=tol, err_msg=f"arg {i}")


def eager_or_traced(fn, backend, monkeypatch):
    """`fn` itself, or traced on `backend` with every fused group a kernel (small ones too)."""
    if backend is None:
        return fn
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    return tg.trace(fn, backend=backend)


def traced_matches_eager(
    fn: Callable[..., tg.Tensor], *arrays: np.ndarray, backend: str, tol: float = 1e-10
) -> None:
    """One step computing fn(*xs) and the gradient of sum(fn(*xs) * c): traced (the second
    call runs the compiled plan) it gives eager's values and gradients (float64)."""
    xs = [tg.tensor(np.asarray(a, np.float64), requires_grad=True) for a in arrays]
    gm = tg.GradManager().attach(xs)
    c = None

    def step():
        nonlocal c
        with gm:
            out = fn(*xs)
            c = np.random.default_rng(2).standard_normal(out.shape) if c is None else c
            gm.backward((out * c).sum())
        return out

    eager = step().numpy().copy()
    eager_grads = [x.grad.numpy().copy() for x in xs]
    traced = tg.trace(step, backend=backend)
    for _ in range(2):
        for x in xs:
            x.grad = None
        got = traced()
    np.testing.assert_allclose(got.numpy(), eager, rtol=tol, atol=tol)
    for i, (x, g) in enumerate(zip(xs, eager_grads, strict=True)):
        np.testing.assert_allclose(x.grad.numpy(), g, rtol=tol, atol=tol, err_msg=f"arg {i}")


def classifier_step(model: Callable, optimizer) -> Callable:
    """The eager training step of a classifier: cross-entropy, backward through a GradManager
    attached to the model's parameters, the optimizer's step, zeroed gradients."""
    from tracegrad.nn import functional as F

    gm = tg.GradManager().attach(model.parameters())

    def step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return step


def assert_traced_training_matches_eager(
    make_model: Callable, batches: list, backend: str, make_optimizer: Callable | None = None
) -> tuple[list[float], Any, Any]:
    """Two copies of a model (seed 0) trained on `batches` ((x, y) arrays, a step each) with
    cross-entropy, the step written as PyTorch code writes it, one eagerly and one traced on
    `backend`: the same losses and, after, the same `state_dict` (parameters and buffers), to
    float64's tolerance for a float64 model, else float32's. Returns the eager losses and the
    two models."""
    from tracegrad.nn import functional as F

    runs = []
    for traced in (False, True):
        tg.nn.manual_seed(0)
        model = make_model()
        opt = (make_optimizer or (lambda ps: tg.optim.SGD(ps, lr=0.05, momentum=0.9)))(
            list(model.parameters())
        )

        def step(x, y, model=model, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        run = tg.trace(step, backend=backend) if traced else step
        runs.append(([float(run(tg.tensor(x), tg.tensor(y))) for x, y in batches], model))
    (want, eager), (got, compiled) = runs
    double = all(p.dtype == np.float64 for p in eager.parameters())
    np.testing.assert_allclose(got, want, rtol=1e-10 if double else 1e-5)
    eager_state, traced_state = eager.state_dict(), compiled.state_dict()
    assert list(eager_state) == list(traced_state)
    for key, value in eager_state.items():
        np.testing.assert_allclose(traced_state[key].numpy(), value.numpy(),
                                   rtol=1e-9 if double else 1e-4,
                                   atol=1e-12 if double else 1e-6, err_msg=key)  # fmt: skip
    return want, eager, compiled


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def global_state_is_restored():
    """Each test must leave grad mode on and no GradManager recording (else later tests lie);
    the eager kernels it asked for load before the next test, whose measured memory would count
    the loading thread's allocations. A Tensor subclass a test defined put `__torch_function__`
    wrappers in place: they go, so later tests see calls go straight to the ops, as most
    programs do (tests/frontend/test_torch_function.py covers the wrapped namespaces)."""
    yield
    from tracegrad.frontend import torch_function
    from tracegrad.runtime import eager

    torch_function.uninstall()

    eager.wait_for_kernels()
    from tracegrad.frontend import autodiff

    leaked = (not tg.is_grad_enabled(), list(autodiff.Listeners.recording))
    autodiff.Listeners.grad_enabled = True
    autodiff.Listeners.recording.clear()
    assert leaked == (False, []), f"grad mode off or managers still recording: {leaked}"


@pytest.fixture(autouse=True, scope="session")
def sigint_raises_keyboard_interrupt():
    """Python's KeyboardInterrupt for SIGINT, whatever the process inherited: a shell starts a
    background job with SIGINT ignored, Python then installs no handler, and the tests that
    interrupt a step would see no interrupt."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)

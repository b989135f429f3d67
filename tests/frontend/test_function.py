"""`torch.autograd.Function` as PyTorch code writes it (straight-through estimators, gradient
reversal, custom activations, several outputs) and tensor hooks: gradients against finite
differences in float64 and against PyTorch where installed, the errors PyTorch raises, a traced
step against the eager one on both backends, and no reference cycle through a saved output."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, numeric_grad
from tracegrad.compiler import lowering
from tracegrad.frontend.function import Function, once_differentiable

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def functions(lib):
    """The same Functions written against `lib` (tracegrad or torch), as a user writes them."""

    class Softplus(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, beta):
            ctx.save_for_backward(x)
            ctx.beta = beta
            return lib.log1p(lib.exp(beta * x)) / beta

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * lib.sigmoid(ctx.beta * x), None

    class MulAdd(lib.autograd.Function):  # two outputs, a broadcast input, a saved output
        @staticmethod
        def forward(ctx, x, w):
            prod = x * w
            ctx.save_for_backward(x, w, prod)
            return prod, prod + x

        @staticmethod
        def backward(ctx, g_prod, g_sum):
            x, w, prod = ctx.saved_tensors
            gx = g_prod * w + g_sum * (w + 1)
            gw = ((g_prod + g_sum) * x).sum(0)  # w is (n,), broadcast over rows
            return gx, gw

    class Scale(lib.autograd.Function):  # PyTorch 2's style: forward without ctx
        @staticmethod
        def forward(x, k):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    return Softplus, MulAdd, Scale


def _grads(lib, x, w):
    Softplus, MulAdd, Scale = functions(lib)
    x = lib.tensor(x, requires_grad=True)
    w = lib.tensor(w, requires_grad=True)
    prod, total = MulAdd.apply(Softplus.apply(x, 2.0), w)
    loss = (Scale.apply(prod, 3.0) ** 2).sum() + (total * lib.cos(total)).sum()
    loss.backward()
    return [loss.detach().numpy(), x.grad.numpy(), w.grad.numpy()]


def test_functions_gradients_match_finite_differences(rng):
    Softplus, MulAdd, Scale = functions(tg)
    check_grad(lambda x: Softplus.apply(x, 2.0), rng.standard_normal((3, 4)))
    check_grad(lambda x, w: MulAdd.apply(x, w)[0], rng.standard_normal((2, 4)),
               rng.standard_normal(4))  # fmt: skip
    check_grad(lambda x, w: MulAdd.apply(x, w)[1], rng.standard_normal((3, 4)),
               rng.standard_normal(4))  # fmt: skip
    check_grad(lambda x, w: sum(o.sin() for o in MulAdd.apply(x, w)),
               rng.standard_normal((3, 4)), rng.standard_normal(4))  # fmt: skip
    check_grad(lambda x: Scale.apply(x, 3.0), rng.standard_normal(5))


@needs_torch
def test_functions_match_pytorchs(rng):
    x, w = rng.standard_normal((3, 4)), rng.standard_normal(4)
    for got, want in zip(_grads(tg, x, w), _grads(torch, x, w), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


class _RoundSTE(Function):
    """Quantization with a straight-through gradient, as quantization-aware training writes it."""

    @staticmethod
    def forward(ctx, x):
        return tg.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class _GradReverse(Function):
    """Domain-adversarial training's gradient reversal layer."""

    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.neg() * ctx.lam, None


def _train(traced, backend=None, steps=3):
    tg.nn.manual_seed(0)
    features, head, critic = tg.nn.Linear(6, 8), tg.nn.Linear(8, 3), tg.nn.Linear(8, 1)
    params = [*features.parameters(), *head.parameters(), *critic.parameters()]
    opt = tg.optim.SGD(params, lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((5, 6)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 3, 5))

    def step(x, y):
        opt.zero_grad()
        h = _RoundSTE.apply(tg.tanh(features(x)))
        h.register_hook(lambda g: g * 0.5)
        domain = critic(_GradReverse.apply(h, 0.3)).mean()
        loss = tg.nn.functional.cross_entropy(head(h), y) + domain
        loss.backward()
        opt.step()
        return loss

    if traced:
        step = tg.trace(step, backend=backend)
    return [float(step(x, y)) for _ in range(steps)], [p.numpy().copy() for p in params]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_with_functions_and_hooks_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    want, want_params = _train(False)
    got, params = _train(True, backend)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for a, b in zip(params, want_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert want[-1] != want[0]


def test_straight_through_and_reversal_give_the_written_gradients():
    x = tg.tensor([0.1, 0.3, -0.7], requires_grad=True)
    y = _RoundSTE.apply(x)
    np.testing.assert_array_equal(y.numpy(), np.round(x.numpy() * 4) / 4)
    (_GradReverse.apply(y, 2.0) * tg.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [-2.0, -4.0, -6.0])


def test_ctx_says_which_inputs_need_a_gradient():
    seen = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, a, b, k):
            seen.append(ctx.needs_input_grad)
            return a * b * k

        @staticmethod
        def backward(ctx, g):
            return g, g, None

    a, b = tg.ones(2, requires_grad=True), tg.ones(2)
    Probe.apply(a, b, 2.0).sum().backward()
    assert seen == [(True, False, False)]
    out = Probe.apply(b, b, 2.0)  # nothing requires grad: no node
    assert out.grad_fn is None and not out.requires_grad
    with tg.no_grad():
        assert Probe.apply(a, b, 2.0).grad_fn is None


def test_non_differentiable_outputs_and_materialized_grads():
    got = []

    class MaxWithIndex(Function):
        @staticmethod
        def forward(ctx, x):
            i = x.argmax()
            ctx.save_for_backward(x)
            ctx.i = i
            return x.max(), i

        @staticmethod
        def backward(ctx, g, g_index):
            got.append(g_index)
            (x,) = ctx.saved_tensors
            return tg.zeros_like(x).index_put((ctx.i,), g)

    x = tg.tensor([1.0, 5.0, 2.0], requires_grad=True)
    value, index = MaxWithIndex.apply(x)
    assert index.grad_fn is None and value.grad_fn.name() == "MaxWithIndexBackward"
    value.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])
    assert got[0] is not None and got[0].shape == ()

    class Pair(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            got.append((g1, g2))
            return g1 * 2 + g2 * 3

    a, b = Pair.apply(x)
    a.sum().backward()  # b gets no gradient: its slot is zeros in the packed cotangent
    assert got[-1][0] is not None


def test_backward_must_return_a_gradient_per_input():
    class Short(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, g):
            return g

    x = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Short.apply(x, x).sum().backward()


def test_a_broadcast_gradient_is_summed_and_a_wrong_one_refused():
    class Bias(Function):
        @staticmethod
        def forward(ctx, x, b):
            return x + b

        @staticmethod
        def backward(ctx, g):
            return g, g  # b's gradient has x's shape: summed down, as PyTorch does

    x, b = tg.ones((3, 2), requires_grad=True), tg.ones(2, requires_grad=True)
    Bias.apply(x, b).sum().backward()
    np.testing.assert_array_equal(b.grad.numpy(), [3.0, 3.0])

    class Wrong(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g[:1]

    x = tg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"invalid gradient at index 0 - got \[1\]"):
        Wrong.apply(x).sum().backward()


class Square(Function):
    """x * x, its input saved for backward (also test_gradcheck's)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def test_saved_tensors_are_checked_and_freed_like_pytorchs():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = Square.apply(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    y = Square.apply(x).sum()
    with tg.no_grad():
        x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_double_backward_through_a_differentiable_backward():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g

    x = tg.tensor([1.5, -2.0], dtype=np.float64, requires_grad=True)
    (dx,) = tg.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    (ddx,) = tg.autograd.grad(dx.sum(), x)
    np.testing.assert_allclose(ddx.numpy(), 6 * x.numpy())

    class CubeOnce(Cube):
        backward = staticmethod(once_differentiable(Cube.backward))

    (dx,) = tg.autograd.grad(CubeOnce.apply(x).sum(), x, create_graph=True)
    assert dx.grad_fn is None  # its backward ran untracked


def test_an_input_returned_as_it_is_gets_a_new_tensor():
    class Identity(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 10

    x = tg.ones(2, requires_grad=True)
    y = Identity.apply(x)
    assert y is not x and x.is_leaf and x.grad_fn is None
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0])


def test_mark_dirty_rebases_the_modified_input():
    class AddOne(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1.0)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 7

    a = tg.ones(2, requires_grad=True)
    h = a * 2
    out = AddOne.apply(h)
    assert out is h and h.grad_fn.name() == "AddOneBackward"
    np.testing.assert_array_equal(h.numpy(), [3.0, 3.0])
    out.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [14.0, 14.0])
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        AddOne.apply(tg.ones(2, requires_grad=True))


def test_a_saved_output_makes_no_reference_cycle():
    class Exp(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    x = tg.ones(3, requires_grad=True)
    gc.disable()
    try:
        y = Exp.apply(x)
        alive = weakref.ref(y.grad_fn)
        del y
        assert alive() is None, "the node outlived its output: a reference cycle"
    finally:
        gc.enable()
    Exp.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.e * np.ones(3), rtol=1e-6)


def test_legacy_instances_are_refused():
    with pytest.raises(RuntimeError, match="legacy autograd functions"):
        _RoundSTE()(tg.ones(2))


# --- tensor hooks -------------------------------------------------------------------------------


def test_hooks_replace_or_observe_gradients():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(seen.append)
    handle = x.register_hook(lambda g: g * 3)
    h = x * x
    h.register_hook(lambda g: g + 1)  # a non-leaf: what flows on to x
    h.retain_grad()
    h.sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [2.0, 2.0])  # retain_grad sees the hooked one
    np.testing.assert_array_equal(seen[0].numpy(), [4.0, 8.0])  # 2x * (1 + 1)
    np.testing.assert_array_equal(x.grad.numpy(), [12.0, 24.0])
    handle.remove()
    x.grad = None
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


@needs_torch
def test_hooks_match_pytorchs():
    def run(lib):
        x = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64, requires_grad=True)
        x.register_hook(lambda g: g.clamp(-1.0, 1.0))
        h = lib.tanh(x) * 4
        h.register_hook(lambda g: g * lib.tensor([1.0, 0.0, 2.0], dtype=lib.float64))
        (h**2).sum().backward()
        return x.grad.numpy()

    np.testing.assert_allclose(run(tg), run(torch), rtol=1e-12)


def test_hooks_are_checked():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.ones(2).register_hook(lambda g: g)
    x = tg.ones(2, requires_grad=True)
    x.register_hook(lambda g: g[:1])
    with pytest.raises(
        RuntimeError, match=r"shape torch.Size\(\[1\]\) for a tensor of shape torch.Size\(\[2\]\)"
    ):
        (x * 2).sum().backward()


def test_autograd_backward_from_several_outputs_and_into_chosen_inputs():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    w = tg.tensor([3.0], requires_grad=True)
    tg.autograd.backward([(x * w).sum(), x**2], [None, tg.tensor([1.0, 1.0])])
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 7.0])  # w + 2x
    np.testing.assert_array_equal(w.grad.numpy(), [3.0])
    x.grad = w.grad = None
    tg.autograd.backward((x * w).sum(), inputs=[w])
    assert x.grad is None and w.grad.numpy().tolist() == [3.0]


class ExpTwice(tg.autograd.Function):
    """Two outputs, e^x and 2 e^x, saving the first for backward."""

    @staticmethod
    def forward(ctx, x):
        e = tg.exp(x)
        ctx.save_for_backward(e)
        return e, 2 * e

    @staticmethod
    def backward(ctx, g1, g2):
        (e,) = ctx.saved_tensors
        return (g1 + 2 * g2) * e


def test_double_backward_through_a_saved_output_the_caller_dropped():
    """Only the second output is kept, so the saved first one's node has died: a double
    backward still differentiates through it (PyTorch's tutorial `Sinh` does this), against
    finite differences of the first derivative; and the dropped output is not kept alive."""
    x0 = np.array([0.3, -1.2, 2.0])
    x = tg.tensor(x0, requires_grad=True)
    outs = ExpTwice.apply(x)
    dropped = weakref.ref(outs[0])
    y = outs[1]
    del outs
    assert dropped() is None
    (g,) = tg.autograd.grad(y.sum(), x, create_graph=True)
    (gg,) = tg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.numpy(), 2 * np.exp(x0), rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), numeric_grad(lambda v: (2 * np.exp(v)).sum(), x0),
                               rtol=1e-7)  # fmt: skip

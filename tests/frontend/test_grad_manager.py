"""GradManager, as MegEngine's: attach, record, backward, release, and higher order by nesting."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import numeric_grad
from tracegrad import GradManager
from tracegrad.frontend.grad_manager import grad, vjp
from tracegrad.frontend.transforms import vmap


def param(*values: float) -> tg.Tensor:
    return tg.tensor(np.array(values))


def test_attach_a_tensor_or_an_iterable_returns_self() -> None:
    a, b, c = param(1.0), param(2.0), param(3.0)
    gm = GradManager()
    assert gm.attach(a) is gm
    assert gm.attach([b, c]) is gm
    assert gm.attach(t for t in [c]) is gm
    assert [id(t) for t in gm.attached_tensors()] == [id(a), id(b), id(c)]


def test_attached_tensors_in_attach_order_without_duplicates() -> None:
    ts = [param(float(i)) for i in range(4)]
    gm = GradManager().attach([ts[2], ts[0]]).attach(ts[3]).attach([ts[0], ts[2], ts[1]])
    assert [id(t) for t in gm.attached_tensors()] == [id(ts[i]) for i in (2, 0, 3, 1)]


def test_attach_holds_tensors_weakly() -> None:
    t = param(1.0, 2.0)
    ref = weakref.ref(t)
    gm = GradManager().attach(t)
    with gm:
        y = (t * 2.0).sum()  # the recorded graph stays alive, and holds t weakly too
    del t
    gc.collect()
    assert ref() is None
    assert gm.attached_tensors() == []
    assert y.grad_fn is not None


@pytest.mark.parametrize("data", [[1, 2], [True]], ids=["int", "bool"])
def test_attach_rejects_non_floating_tensors(data) -> None:
    with pytest.raises(TypeError, match="floating"):
        GradManager().attach(tg.tensor(data))


def test_backward_accumulates_into_attached_tensors() -> None:
    w, x = param(1.0, -2.0), param(3.0, 4.0)
    gm = GradManager().attach(w)
    for _ in range(2):
        with gm:
            gm.backward((w * w * x).sum())
    np.testing.assert_allclose(w.grad.numpy(), 2 * (2 * w.numpy() * x.numpy()))
    assert x.grad is None and not gm.is_recording


def test_callbacks_run_in_order_before_accumulation() -> None:
    w = param(1.0, 2.0)
    w.grad = tg.tensor([100.0, 100.0])
    seen = []

    def double(t, g):
        seen.append(("double", t is w, g.numpy().tolist()))
        return g * 2.0

    def shift(t, g):
        seen.append(("shift", t is w, g.numpy().tolist()))
        return g + 1.0

    gm = GradManager().attach(w, callbacks=[double, shift])
    with gm:
        gm.backward((w * 3.0).sum())
    assert seen == [("double", True, [3.0, 3.0]), ("shift", True, [6.0, 6.0])]
    np.testing.assert_allclose(w.grad.numpy(), [107.0, 107.0])


class Deferred:
    """An asynchronous callback, as the MPI all-reduce is: it returns an empty gradient and
    fills it (here: with 3 x the true one) only when flushed."""

    def __init__(self) -> None:
        self.waiting: list = []
        self.flushes = 0

    def __call__(self, t: tg.Tensor, g: tg.Tensor) -> tg.Tensor:
        out = np.full(g.shape, np.nan)
        self.waiting.append((g.numpy().copy(), out))
        return tg.from_numpy(out)  # filled in place when flushed

    def flush(self) -> None:
        self.flushes += 1
        for g, out in self.waiting:
            out[...] = 3.0 * g
        self.waiting = []


def test_a_callback_with_flush_is_flushed_before_its_gradients_accumulate() -> None:
    w, v = param(1.0, 2.0), param(3.0)
    cb = Deferred()
    gm = GradManager().attach([w, v], callbacks=cb)
    for step in (1, 2):  # the second backward accumulates into the existing grads
        with gm:
            gm.backward((w * w).sum() + (v * w[0]).sum())
        assert cb.flushes == step  # once per backward, however many tensors it serves
        np.testing.assert_allclose(w.grad.numpy(), step * 3.0 * np.array([2.0 + 3.0, 4.0]))
        np.testing.assert_allclose(v.grad.numpy(), step * 3.0 * np.array([1.0]))


def test_single_callback_and_callbacks_added_by_reattaching() -> None:
    w = param(1.0)
    gm = GradManager().attach(w, callbacks=lambda t, g: g * 2.0)
    gm.attach(w, callbacks=lambda t, g: g * 5.0)
    with gm:
        gm.backward((w * 1.0).sum())
    np.testing.assert_allclose(w.grad.numpy(), [10.0])


def test_record_twice_raises_and_release_is_safe_any_time() -> None:
    gm = GradManager()
    gm.release()
    gm.record()
    with pytest.raises(RuntimeError, match="already recording"):
        gm.record()
    gm.release()
    gm.release()
    assert not gm.is_recording


def test_with_block_records_and_releases_even_on_error() -> None:
    gm = GradManager()
    with gm:
        assert gm.is_recording
    assert not gm.is_recording
    with pytest.raises(KeyError), gm:
        raise KeyError("inside the block")
    assert not gm.is_recording


def test_backward_without_recording_names_the_fix() -> None:
    w = param(1.0)
    gm = GradManager().attach(w)
    with pytest.raises(RuntimeError, match=r"record\(\).*with gm:"):
        gm.backward((w * 2.0).sum())


def test_a_second_backward_says_the_first_released_the_recording() -> None:
    """It said "nothing was recorded. Did you forget ... `with gm:`", inside a `with gm:`."""
    x = tg.tensor([1.0, 2.0])
    gm = GradManager().attach(x)
    with gm:
        y1, y2 = (x * x).sum(), (3.0 * x).sum()
        gm.backward(y1)
        with pytest.raises(RuntimeError, match=r"called again after a backward, which released"):
            gm.backward(y2)
    with gm:  # the remedies it names: record again, or both outputs in one call
        y1, y2 = (x * x).sum(), (3.0 * x).sum()
        gm.backward([y1, y2])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0 + 5.0, 4.0 + 7.0])
    with pytest.raises(RuntimeError, match="nothing was recorded"):
        GradManager().attach(x).backward(y1)


def test_backward_with_lists_of_y_and_dy() -> None:
    w = param(0.5, -1.5)
    gm = GradManager().attach(w)
    d1, d2 = np.array([1.0, 2.0]), np.array([-1.0, 3.0])
    with gm:
        gm.backward([w * w, tg.exp(w)], [tg.tensor(d1), d2])
    v = w.numpy()
    np.testing.assert_allclose(w.grad.numpy(), d1 * 2 * v + d2 * np.exp(v))


def test_dy_defaults_to_ones_and_y_none_just_releases() -> None:
    w = param(0.5, -1.5)
    gm = GradManager().attach(w)
    with gm:
        gm.backward(w * w)  # not a scalar: dy = ones
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy())
    gm.record()
    gm.backward()
    assert not gm.is_recording


def test_attached_tensor_without_a_path_keeps_grad_none() -> None:
    used, unused = param(1.0), param(2.0)
    gm = GradManager().attach([used, unused])
    with gm:
        gm.backward((used * 2.0).sum())
    assert unused.grad is None and used.grad is not None


def test_only_computation_that_depends_on_attached_tensors_is_recorded() -> None:
    w, c = param(1.0), param(2.0)
    gm = GradManager().attach(w)
    with gm:
        assert (c * c).grad_fn is None
        assert (w * c).grad_fn is not None
    assert (w * c).grad_fn is None  # not recording


def test_computation_before_attach_is_ignored() -> None:
    w = param(1.0, 2.0)
    gm = GradManager()
    with gm:
        before = w * 2.0
        gm.attach(w)
        after = w * 3.0
        gm.backward((before + after).sum())
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0])


def test_attaching_an_intermediate_while_recording_gives_it_a_gradient() -> None:
    w = param(1.0, -2.0)
    gm = GradManager().attach(w)
    with gm:
        h = w * 3.0
        gm.attach(h)
        gm.backward((h * h).sum())
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.numpy())
    np.testing.assert_allclose(w.grad.numpy(), 2 * h.numpy() * 3.0)


def test_attaching_a_plain_tensor_while_recording() -> None:
    x = param(1.0, 2.0) * 2.0  # made before any recording: no history
    gm = GradManager()
    with gm:
        gm.attach(x)
        gm.backward(tg.sin(x).sum())
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x.numpy()))


def test_requires_grad_leaves_are_separate_from_attached_tensors() -> None:
    w, r = param(1.0), tg.tensor([2.0], requires_grad=True)
    gm = GradManager().attach(w)
    with gm:
        gm.backward((w * r).sum())
    assert r.grad is None and w.grad is not None  # the manager fills only what it attached
    w.grad = None
    (w * r).sum().backward()
    assert w.grad is None and r.grad is not None  # loss.backward() fills requires_grad leaves


def test_plain_backward_on_requires_grad_leaves() -> None:
    w = tg.tensor(np.array([0.2, -0.4]), requires_grad=True)
    loss = (tg.tanh(w) ** 2).sum()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), numeric_grad(lambda v: np.sum(np.tanh(v) ** 2),
                                                            w.numpy()), rtol=1e-6)  # fmt: skip


def test_two_managers_at_once_fill_their_own_tensors() -> None:
    a, b = param(2.0), param(3.0)
    gm_a, gm_b = GradManager().attach(a), GradManager().attach(b)
    with gm_a, gm_b:
        y = a * b
        gm_b.backward(y.sum())
        gm_a.backward(y.sum())
    np.testing.assert_allclose(a.grad.numpy(), [3.0])
    np.testing.assert_allclose(b.grad.numpy(), [2.0])


@pytest.mark.parametrize(
    "f, df",
    [
        (lambda x: x**3, lambda v: 3 * v**2),
        (tg.tanh, lambda v: 1 - np.tanh(v) ** 2),
        (lambda x: tg.exp(x) * tg.sin(x), lambda v: np.exp(v) * (np.sin(v) + np.cos(v))),
        (lambda x: tg.softmax(x) * x, None),
    ],
    ids=["cube", "tanh", "exp*sin", "softmax*x"],
)
def test_nested_managers_give_second_derivatives(f, df) -> None:
    """x.grad ends as f'(x) + d/dx sum(f'(x)); the second term is checked against finite
    differences of the analytic f' (or of tracegrad's own first derivative as a black box)."""
    v = np.array([0.4, -0.9, 1.3])
    x = tg.tensor(v)
    gm1, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm1:
        with gm2:
            gm2.backward(f(x).sum())
        first = x.grad.numpy().copy()
        gm1.backward(x.grad.sum())

    def first_derivative_sum(a):
        if df is not None:
            return np.sum(df(a))
        return float(tg.grad(lambda t: f(t).sum())(tg.tensor(a)).numpy().sum())

    expected_first = df(v) if df is not None else tg.grad(lambda t: f(t).sum())(tg.tensor(v))
    np.testing.assert_allclose(first, np.asarray(expected_first), rtol=1e-10)
    second = x.grad.numpy() - first
    np.testing.assert_allclose(second, numeric_grad(first_derivative_sum, v), rtol=1e-6, atol=1e-8)


def test_nested_managers_with_a_parameter_and_an_input() -> None:
    """Gradient penalty style: d/dw of |d(loss)/dx|^2, against finite differences in w."""
    xv, wv = np.array([0.3, -0.7]), np.array([1.1, 0.6])
    x, w = tg.tensor(xv), tg.tensor(wv)
    outer, inner = GradManager().attach(w), GradManager().attach(x)
    with outer:
        with inner:
            inner.backward(tg.tanh(x * w).sum())
        outer.backward((x.grad * x.grad).sum())

    def penalty(wa):
        gx = wa * (1 - np.tanh(xv * wa) ** 2)
        return np.sum(gx * gx)

    np.testing.assert_allclose(w.grad.numpy(), numeric_grad(penalty, wv), rtol=1e-6)


def test_vjp_and_grad_of_a_function_returning_its_argument() -> None:
    """The identity's gradient is the cotangent (it was 0: backward ran after the recording
    GradManager closed and did not see the primal returned as it is); also to second order."""
    x = tg.tensor(np.array([1.0, 2.0]))
    out, vjp_fn = tg.vjp(lambda t: t, x)
    assert out.tolist() == [1.0, 2.0] and vjp_fn(tg.tensor([3.0, 4.0]))[0].tolist() == [3.0, 4.0]
    assert tg.grad(lambda t: t)(tg.tensor(2.0)).item() == 1.0
    grads = tg.grad(lambda a, b: a, (0, 1))(tg.tensor(2.0), tg.tensor(3.0))
    assert [g.item() for g in grads] == [1.0, 0.0]
    u = tg.tensor(np.array([3.0, 4.0]))
    tangent = tg.grad(lambda w: (tg.vjp(lambda t: t, x)[1](w)[0] * tg.tensor([5.0, 6.0])).sum())(u)
    assert tangent.tolist() == [5.0, 6.0]


def test_grad_of_several_arguments_is_partial_even_when_one_depends_on_another() -> None:
    """grad(f, (0, 1))(w, z) with z computed from w gives f's partial derivatives (as JAX's and
    torch.func.grad), not w's total derivative through z (it gave 5 here, not 2); so a nested
    grad over a pair (x, x * 1.0) differentiates right, as HIPS autograd's tests check."""
    w = tg.tensor(10.0, dtype=np.float64, requires_grad=True)
    z = w * 1.0
    assert [g.item() for g in tg.grad(lambda a, b: a * 2 + b * 3, (0, 1))(w, z)] == [2.0, 3.0]

    def f(x):
        ga, gb = tg.grad(lambda a, b: a * b, (0, 1))(x, x * 1.0)
        return tg.sin(ga) + tg.sin(gb)

    x = np.array(10.0)
    np.testing.assert_allclose(tg.grad(f)(tg.tensor(x)).item(), 2 * np.cos(10.0), rtol=1e-12)
    second = tg.grad(lambda t: tg.grad(f)(t))(tg.tensor(x)).item()
    np.testing.assert_allclose(second, numeric_grad(lambda v: tg.grad(f)(tg.tensor(v)).item(), x),
                               rtol=1e-6)  # fmt: skip


def test_transforms_record_under_an_outer_no_grad_and_respect_an_inner_one():
    """`torch.func.grad` inside `no_grad` or a backward hook (opacus's functorch mode) gave
    zeros: a transform records whatever the caller's mode, as PyTorch's does."""
    x = tg.tensor([1.0, 2.0])

    def f(x):
        with tg.no_grad():
            frozen = (x**3).sum()  # no gradient flows through it
        return (x**2).sum() + frozen

    with tg.no_grad():
        np.testing.assert_array_equal(grad(f)(x).numpy(), [2.0, 4.0])
        per_row = vmap(grad(lambda r: (r**2).sum()))(tg.ones(3, 2))
        value, _ = vjp(lambda x: x**2, x)
    np.testing.assert_array_equal(per_row.numpy(), np.full((3, 2), 2.0))
    assert value.grad_fn is None  # the value carries no history out of the no_grad block

"""Autodiff semantics (as PyTorch): who requires grad, where grads land, errors, no_grad,
the functional vjp/grad, and NumPy interop that never drops a gradient."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import numeric_grad


def leaf(*values: float) -> tg.Tensor:
    return tg.tensor(np.array(values), requires_grad=True)


def test_result_requires_grad_iff_an_input_does() -> None:
    x, c = leaf(1.0, 2.0), tg.tensor([3.0, 4.0])
    assert (x * c).requires_grad and (c * x).requires_grad
    assert not (c * c).requires_grad
    with tg.no_grad():
        assert not (x * c).requires_grad


def test_leaves_get_grad_non_leaves_only_with_retain_grad() -> None:
    x = leaf(1.0, 2.0)
    h, kept = x * 3.0, x * 2.0
    kept.retain_grad()
    (h * kept).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 12.0 * x.numpy())
    assert h.grad is None
    np.testing.assert_allclose(kept.grad.numpy(), h.numpy())
    assert tg.tensor([1.0]).grad is None


def test_leaf_without_requires_grad_gets_no_grad() -> None:
    x, c = leaf(1.0, 2.0), tg.tensor([3.0, 4.0])
    (x * c).sum().backward()
    assert c.grad is None


def test_gradients_accumulate_until_zeroed() -> None:
    def losses(x):
        return (x * x).sum(), tg.exp(x).sum()

    x, y = leaf(0.5, -1.0), leaf(0.5, -1.0)
    l1, l2 = losses(x)
    l1.backward()
    l2.backward()
    m1, m2 = losses(y)
    (m1 + m2).backward()
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy())
    x.grad = None
    losses(x)[0].backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())


def test_shared_subexpressions_sum_their_paths() -> None:
    x = leaf(0.3, 0.7)
    h = tg.tanh(x)
    (h * h + h).sum().backward()
    t = np.tanh(x.numpy())
    np.testing.assert_allclose(x.grad.numpy(), (2 * t + 1) * (1 - t * t))


def test_slices_of_one_tensor_gather_their_cotangents_in_place(rng) -> None:
    """A tensor read as slices x[t] in a loop, as rows of a repeated index and whole, its
    cotangent gathered in one buffer of the engine's own (getitem's `vjp_into`, `_Sums`): the
    gradients are finite differences'; a retained non-leaf's is not changed by later sums."""
    x0, w0 = rng.standard_normal((5, 3)), rng.standard_normal((3, 3))
    rows = np.array([4, 1, 4, 0, 4])

    def loss(x: tg.Tensor, w: tg.Tensor, keep: list | None = None) -> tg.Tensor:
        h = x * 2.0
        if keep is not None:
            h.retain_grad()
            keep.append(h)
        total = (h[rows] ** 3).sum() + (h @ w).sum() + (w[1:] * w[1:]).sum()
        for t in range(x.shape[0]):
            total = total + (h[t] * h[t]).sum() * (t + 1)
        return total

    x, w, kept = tg.tensor(x0, requires_grad=True), tg.tensor(w0, requires_grad=True), []
    loss(x, w, kept).backward()
    for got, a, at in [(x.grad, x0, 0), (w.grad, w0, 1)]:

        def f(v: np.ndarray, at: int = at) -> float:
            args = [tg.tensor(x0), tg.tensor(w0)]
            args[at] = tg.tensor(v)
            return float(loss(*args))

        np.testing.assert_allclose(got.numpy(), numeric_grad(f, a), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(2.0 * kept[0].grad.numpy(), x.grad.numpy(), rtol=1e-12)


def test_a_cotangent_two_inputs_share_is_never_summed_into_in_place(rng) -> None:
    """add's VJP passes one array to h and to k; h's and k's other cotangents arrive after it
    and must not be added into it, or each would see the other's."""
    x0 = rng.standard_normal((3, 2))
    x = tg.tensor(x0, requires_grad=True)
    h, k = x * 2.0, x * 3.0
    ((h * h).sum() + (k * k).sum() + ((h + k) * x).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), (8.0 + 18.0 + 10.0) * x0, rtol=1e-12)


def test_gradients_kept_without_a_copy_share_no_memory(rng) -> None:
    """`.grad` takes a cotangent's array without copying it only where nothing else holds it
    (`autodiff.Unshared`): after two backward passes no two gradients share memory, and each is
    twice the first."""
    a, b, w = (
        tg.tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 4), (3, 4), (4, 2)]
    )
    h = (a + b) @ w  # add's VJP gives a and b one array; matmul's are new
    h.retain_grad()
    loss = (h * h).sum() + (a * 3.0).sum()
    loss.backward(retain_graph=True)
    first = [t.grad.numpy().copy() for t in (a, b, w, h)]
    loss.backward()
    grads = [t.grad.numpy() for t in (a, b, w, h)]
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, 2 * first[i], rtol=1e-12)
        assert not any(np.shares_memory(g, other) for other in grads[i + 1 :])


def test_backward_of_a_non_scalar_needs_dy() -> None:
    x = leaf(1.0, 2.0)
    y = x * x
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        y.backward()
    y.backward(tg.tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 40.0])


def test_backward_of_a_tensor_without_grad_raises() -> None:
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.tensor(2.0).backward()


def test_second_backward_names_retain_graph() -> None:
    x = leaf(1.0, 2.0)
    y = tg.exp(x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"freed.*retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward() -> None:
    x = leaf(1.0, 2.0)
    y = (tg.exp(x) * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)


def test_detach_cuts_the_graph() -> None:
    x = leaf(1.0, 2.0)
    y = (x.detach() * x).sum()  # only the second factor is differentiated
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), x.numpy())


# --- no_grad -----------------------------------------------------------------------------------


def test_no_grad_as_context_manager() -> None:
    x = leaf(1.0)
    with tg.no_grad():
        assert not tg.is_grad_enabled()
        y = x * 2.0
    assert tg.is_grad_enabled()
    assert y.is_leaf and not y.requires_grad


def test_no_grad_as_decorator() -> None:
    @tg.no_grad()
    def double(t):
        assert not tg.is_grad_enabled()
        return t * 2.0

    assert not double(leaf(1.0)).requires_grad
    assert tg.is_grad_enabled()


def test_no_grad_decorator_restores_after_recursion_and_errors() -> None:
    @tg.no_grad()
    def countdown(n):
        if n == 0:
            raise ValueError("bottom")
        return countdown(n - 1)

    with pytest.raises(ValueError):
        countdown(3)
    assert tg.is_grad_enabled()
    with tg.no_grad(), tg.no_grad():
        pass
    assert tg.is_grad_enabled()


# --- vjp and grad ------------------------------------------------------------------------------


def test_vjp_returns_one_gradient_per_primal() -> None:
    a, b = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -0.5])
    out, vjp_fn = tg.vjp(lambda x, y: tg.sin(x) * y, tg.tensor(a), tg.tensor(b))
    np.testing.assert_allclose(out.numpy(), np.sin(a) * b)
    c = np.array([1.0, 2.0, 3.0])
    gx, gy = vjp_fn(tg.tensor(c))
    np.testing.assert_allclose(gx.numpy(), c * np.cos(a) * b)
    np.testing.assert_allclose(gy.numpy(), c * np.sin(a))
    again = vjp_fn(tg.tensor(c))  # the vjp function can be called again
    np.testing.assert_allclose(again[0].numpy(), gx.numpy())


def test_vjp_leaves_grad_fields_alone_and_zero_for_unused_primals() -> None:
    x, unused = leaf(1.0, 2.0), leaf(3.0)
    _, vjp_fn = tg.vjp(lambda a, b: a * a, x, unused)
    gx, gu = vjp_fn(tg.tensor([1.0, 1.0]))
    np.testing.assert_allclose(gx.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(gu.numpy(), [0.0])
    assert x.grad is None and unused.grad is None


def test_vjp_treats_a_repeated_primal_as_separate_arguments() -> None:
    x = tg.tensor(np.array([1.0, 2.0]))
    _, vjp_fn = tg.vjp(lambda a, b: a * a * b, x, x)
    ga, gb = vjp_fn(tg.tensor([1.0, 1.0]))
    np.testing.assert_allclose(ga.numpy(), 2 * x.numpy() ** 2)
    np.testing.assert_allclose(gb.numpy(), x.numpy() ** 2)


def test_grad_with_int_and_tuple_argnums() -> None:
    def f(x, y):
        return (x * x * y).sum()

    a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    np.testing.assert_allclose(tg.grad(f)(tg.tensor(a), tg.tensor(b)).numpy(), 2 * a * b)
    np.testing.assert_allclose(tg.grad(f, argnums=1)(tg.tensor(a), tg.tensor(b)).numpy(), a * a)
    gx, gy = tg.grad(f, argnums=(0, 1))(tg.tensor(a), tg.tensor(b))
    np.testing.assert_allclose(gx.numpy(), 2 * a * b)
    np.testing.assert_allclose(gy.numpy(), a * a)


def test_grad_of_a_non_scalar_raises() -> None:
    with pytest.raises(RuntimeError, match="scalar"):
        tg.grad(lambda x: x * 2.0)(tg.tensor([1.0, 2.0]))


def test_grad_nests_to_second_order() -> None:
    """d/dx of grad(f) against finite differences of the analytic first derivative."""

    def f(x):
        return (tg.tanh(x) * x).sum()

    a = np.array([0.3, -1.2, 0.8])
    second = tg.grad(lambda x: tg.grad(f)(x).sum())(tg.tensor(a))

    def first(v):
        return np.sum(np.tanh(v) + v * (1 - np.tanh(v) ** 2))

    np.testing.assert_allclose(second.numpy(), numeric_grad(first, a), rtol=1e-6)


# --- NumPy interop: gradients never vanish silently --------------------------------------------


@pytest.mark.parametrize(
    "fn, dfn",
    [
        (lambda a, x: a * x, lambda a, x: a),
        (lambda a, x: a + x, lambda a, x: np.ones_like(x)),
        (lambda a, x: a - x, lambda a, x: -np.ones_like(x)),
        (lambda a, x: a / x, lambda a, x: -a / x**2),
        (lambda a, x: a**x, lambda a, x: a**x * np.log(a)),
    ],
    ids=["mul", "add", "sub", "div", "pow"],
)
def test_ndarray_on_the_left_gives_a_tensor_with_gradient(fn, dfn) -> None:
    a, v = np.array([1.5, 2.0]), np.array([0.5, 3.0])
    x = tg.tensor(v, requires_grad=True)
    out = fn(a, x)
    assert isinstance(out, tg.Tensor) and out.requires_grad
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), dfn(a, v))


def test_ndarray_matmul_on_the_left() -> None:
    a, v = np.arange(6.0).reshape(2, 3), np.array([1.0, -1.0, 2.0])
    x = tg.tensor(v, requires_grad=True)
    out = a @ x
    assert isinstance(out, tg.Tensor)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), a.sum(0))


@pytest.mark.parametrize(
    "ufunc, derivative",
    [(np.exp, np.exp), (np.tanh, lambda v: 1 - np.tanh(v) ** 2), (np.sin, np.cos),
     (np.negative, lambda v: -np.ones_like(v))],
)  # fmt: skip
def test_numpy_ufuncs_dispatch_to_tracegrad(ufunc, derivative) -> None:
    v = np.array([0.5, -0.25])
    x = tg.tensor(v, requires_grad=True)
    out = ufunc(x)
    assert isinstance(out, tg.Tensor)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), derivative(v))


@pytest.mark.parametrize(
    "call",
    [lambda t: np.spacing(t), lambda t: np.copysign(t, t), lambda t: np.add.reduce(t),
     lambda t: np.exp(t, out=np.empty(2))],
    ids=["spacing", "copysign", "add.reduce", "out="],
)  # fmt: skip
def test_unsupported_ufunc_raises_a_clear_type_error(call) -> None:
    with pytest.raises(TypeError, match="not supported on tracegrad tensors"):
        call(tg.tensor([1.0, 2.0], requires_grad=True))


SECOND_ORDER = {
    "exp": tg.exp,
    "log": tg.log,
    "sqrt": tg.sqrt,
    "tanh": tg.tanh,
    "sigmoid": tg.sigmoid,
    "sin": tg.sin,
    "cos": tg.cos,
    "x*x": lambda x: x * x,
    "1/x": lambda x: 1.0 / x,
    "x/(x+1)": lambda x: x / (x + 1.0),
    "x**x": lambda x: x**x,
    "x**3": lambda x: x**3,
    "abs*x": lambda x: abs(x) * x,
    "maximum": lambda x: tg.maximum(x * x, x),
    "where": lambda x: tg.where(x > 1.0, x * x, tg.exp(x)),
    "matmul": lambda x: (x.reshape(2, 2) @ x.reshape(2, 2)).reshape(-1),
    "getitem": lambda x: x[np.array([0, 0, 3])] ** 2,
    "max": lambda x: (x * x).max(keepdims=True),
    "prod": lambda x: x.prod(keepdims=True),
    "prod with a zero": lambda x: (x - 0.7).prod(keepdims=True),  # x[0] - 0.7 == 0
    "softmax": lambda x: tg.softmax(x * x),
    "logsumexp": lambda x: tg.logsumexp(tg.sin(x), -1, keepdim=True),
    "broadcast": lambda x: (tg.broadcast_to(x, (3, 4)) * x[:, None][:3]).sum(0),
    "concatenate": lambda x: tg.concatenate([x * x, tg.exp(x)]),
}


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_order_gradients(name: str) -> None:
    """grad(sum(grad(f))) against finite differences of tracegrad's first-order gradient
    (itself checked against finite differences in test_ops)."""
    fn = SECOND_ORDER[name]
    a = np.array([0.7, 1.3, 0.4, 1.9])
    c = np.random.default_rng(3).standard_normal(fn(tg.tensor(a)).shape)

    def first(x):
        return tg.grad(lambda t: (fn(t) * c).sum())(x)

    second = tg.grad(lambda x: first(x).sum())(tg.tensor(a))
    expected = numeric_grad(lambda v: float(first(tg.tensor(v)).numpy().sum()), a)
    np.testing.assert_allclose(second.numpy(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "call, expected_grad",
    [
        (lambda t: np.concatenate([t, t * 2.0]), [3.0, 3.0, 3.0]),
        (lambda t: np.stack([t, t], axis=1), [2.0, 2.0, 2.0]),
        (lambda t: np.where(np.array([True, False, True]), t, 0.0), [1.0, 0.0, 1.0]),
        (lambda t: np.sum(t * t), [2.0, 4.0, 6.0]),
        (lambda t: np.mean(t, axis=0, keepdims=True), [1 / 3, 1 / 3, 1 / 3]),
        (lambda t: np.max(t), [0.0, 0.0, 1.0]),
        (lambda t: np.clip(t, 1.5, 2.5), [0.0, 1.0, 0.0]),
        (lambda t: np.reshape(t, (3, 1)) * np.transpose(np.reshape(t, (3, 1))), [12.0] * 3),
    ],
    ids=["concatenate", "stack", "where", "sum", "mean", "max", "clip", "reshape/transpose"],
)
def test_numpy_functions_dispatch_to_tracegrad(call, expected_grad) -> None:
    x = tg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    out = call(x)
    assert isinstance(out, tg.Tensor) and out.requires_grad
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected_grad)


def test_unsupported_numpy_function_raises_instead_of_dropping_the_gradient() -> None:
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=r"np\.convolve is not supported on tracegrad tensors"):
        np.convolve(np.ones(2), x)
    np.testing.assert_allclose(x, [1.0, 2.0])  # explicit conversion still works


def test_numpy_functions_without_float_results_still_work() -> None:
    x = tg.tensor([[1.0, 5.0], [3.0, 2.0]], requires_grad=True)
    assert np.shape(x) == (2, 2) and np.ndim(x) == 2
    np.testing.assert_array_equal(np.argmax(x, axis=1), [1, 0])
    assert np.allclose(x, [[1.0, 5.0], [3.0, 2.0]])
    with pytest.raises(TypeError, match=r"np\.unique is not supported"):
        np.unique(x)


def test_in_place_update_of_a_saved_value_is_caught_at_backward():
    """As PyTorch's version counter: the saved w changed, so its gradient would be wrong."""
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    with tg.no_grad():
        w -= 1.0
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()
    alias = w.detach()  # shares the buffer and the version counter
    loss = (w * w).sum()
    alias += 1.0
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()


def test_in_place_update_after_backward_is_fine():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    with tg.no_grad():
        w -= 0.5 * w.grad
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])


@pytest.mark.parametrize("batch", [(4,), (2, 3)])
def test_a_weights_gradient_is_laid_out_as_the_weight(batch) -> None:
    """`x @ W.T` (every Linear) gives W's gradient row-major, as W is (PyTorch's layout
    promise): an optimizer's update over a gradient stored by columns walks memory across
    rows. The value is NumPy's `g.T @ x`."""
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((*batch, 5)))
    w = tg.tensor(rng.standard_normal((3, 5)), requires_grad=True)
    v = tg.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    g = rng.standard_normal((*batch, 3))
    ((x @ w.T) * tg.tensor(g)).sum().backward()
    ((x @ v) * tg.tensor(g)).sum().backward()
    rows, gs = x.numpy().reshape(-1, 5), g.reshape(-1, 3)
    np.testing.assert_allclose(w.grad.numpy(), gs.T @ rows, rtol=1e-12)
    np.testing.assert_allclose(v.grad.numpy(), rows.T @ gs, rtol=1e-12)
    assert w.grad.numpy().flags.c_contiguous and v.grad.numpy().flags.c_contiguous


def test_grad_fn_walks_back_to_the_leaves():
    """`loss.grad_fn.next_functions`, as the PyTorch tutorial walks it: each input's node
    (a leaf's gives the leaf as `variable`), None for an untracked input."""
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    x = tg.tensor([3.0, 4.0])
    loss = (w * x).sum()
    ((mul, _),) = loss.grad_fn.next_functions
    assert mul.name() == "MulBackward0"
    (leaf, _), (untracked, _) = mul.next_functions
    assert leaf.variable is w and leaf.next_functions == () and untracked is None


def test_autograd_grad_materializes_zeros_for_an_unused_input() -> None:
    """PyTorch's `materialize_grads=True`: zeros of the input's shape where allow_unused would
    give None; with allow_unused=False it is a ValueError, as in PyTorch."""
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([[3.0, 4.0]], requires_grad=True)
    ga, gb = tg.autograd.grad((a * a).sum(), [a, b], materialize_grads=True)
    assert ga.tolist() == [2.0, 4.0] and gb.tolist() == [[0.0, 0.0]] and gb.dtype == b.dtype
    assert tg.autograd.grad((a * a).sum(), [a, b], allow_unused=True)[1] is None
    with pytest.raises(ValueError, match="allow_unused"):
        tg.autograd.grad((a * a).sum(), [a, b], materialize_grads=True, allow_unused=False)


def test_autograd_grad_batched_gives_jacobian_and_hessian_rows() -> None:
    """`is_grads_batched`: one gradient per row of `grad_outputs` (PyTorch's vmap over them),
    stacked: the identity's rows give the Jacobian, checked against finite differences
    (float64); with create_graph the rows differentiate again (the Hessian's rows of a sum)."""
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(3)

    def f(v):
        return tg.stack([v[0] * v[1], tg.sin(v[2]), (v**2).sum()])

    x = tg.tensor(x0, requires_grad=True)
    (jac,) = tg.autograd.grad(f(x), x, tg.eye(3, dtype=tg.float64), is_grads_batched=True)
    want = np.stack([numeric_grad(lambda v, i=i: f(tg.tensor(v))[i].item(), x0) for i in range(3)])
    np.testing.assert_allclose(jac.numpy(), want, rtol=1e-6, atol=1e-8)

    (g,) = tg.autograd.grad((x**3).sum() * x[0], x, create_graph=True)
    (hess,) = tg.autograd.grad(g, x, tg.eye(3, dtype=tg.float64), is_grads_batched=True)

    def gradient(v):  # of sum(v**3) * v[0], by hand
        return 3 * v**2 * v[0] + (v**3).sum() * (np.arange(3) == 0)

    want = np.stack([numeric_grad(lambda v, i=i: gradient(v)[i], x0) for i in range(3)])
    np.testing.assert_allclose(hess.numpy(), want, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="batch"):
        tg.autograd.grad(f(x), x, tg.ones(3, dtype=tg.float64), is_grads_batched=True)


def _hooked_gradients(lib, hooks=True):
    """Gradients of a small network whose saved tensors a hook keeps in float16 (as activation
    compression does), and what the hooks saw."""
    seen = []

    def pack(t):
        seen.append(tuple(t.shape))
        return t.detach().numpy().astype(np.float16)

    def unpack(a):
        seen.append("unpacked")
        return lib.tensor(a.astype(np.float64))

    x = lib.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    w = lib.tensor(np.linspace(0.3, 1.1, 12).reshape(3, 4) ** 2, requires_grad=True)
    context = lib.autograd.graph.saved_tensors_hooks(pack, unpack) if hooks else nullcontext()
    with context:
        y = (lib.tanh(x @ w) ** 2 * lib.exp(x[:, :1])).sum()
    y.backward()
    return x.grad.numpy(), w.grad.numpy(), seen


def test_saved_tensors_hooks_pack_what_backward_reads():
    import tracegrad.torch as tt

    gx, gw, seen = _hooked_gradients(tt)
    plain = _hooked_gradients(tt, hooks=False)
    assert seen.count("unpacked") == len(seen) / 2 > 0  # each packed value read once
    assert not np.allclose(gx, plain[0], rtol=1e-6)  # backward read the float16 values
    np.testing.assert_allclose(gx, plain[0], rtol=1e-2)
    with tt.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="no hooks here"):
            tt.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()


def test_saved_tensors_hooks_match_pytorchs():
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")
    import tracegrad.torch as tt

    ours, theirs = _hooked_gradients(tt), _hooked_gradients(torch)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12)


def test_grad_to_an_intermediate_leaves_the_graph_below_it():
    """captum's layer attributions: `grad(y, h)` for a layer's output `h`, then `grad(h, x)`.
    The first does not run h's own node, so it frees nothing below h (PyTorch's engine)."""
    x0 = np.array([0.1, 0.2])
    x = tg.tensor(x0, requires_grad=True)
    h = (x * 3.0).exp()
    (gh,) = tg.autograd.grad((h * h).sum(), h)
    (gx,) = tg.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(gh.numpy(), 2 * np.exp(3 * x0))
    np.testing.assert_allclose(gx.numpy(), 3 * np.exp(3 * x0))


def test_a_functions_saved_tensors_go_through_the_saved_tensors_hooks():
    """What a custom Function's forward saves is packed and unpacked like an op's saved values
    (PyTorch's: offloading and compressing libraries rely on it)."""
    from tracegrad.torch.autograd.graph import saved_tensors_hooks

    log = []

    class Cube(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x**3
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * 3 * y / x

    def pack(t):
        log.append("pack")
        return t.numpy() * 2  # anything may stand for the tensor meanwhile

    def unpack(packed):
        log.append("unpack")
        return tg.tensor(packed / 2)

    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with saved_tensors_hooks(pack, unpack):
        y = Cube.apply(x)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])
    assert log == ["pack", "pack", "unpack", "unpack"]

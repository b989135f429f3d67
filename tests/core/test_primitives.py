"""A user's own op, made with `tracegrad.defprimitive`: eager, higher order, traced on both
backends, fused into a kernel with its neighbours; gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, numeric_grad
from tracegrad.compiler import lowering

softsign = tg.defprimitive(
    "softsign",
    lambda x: x / (1.0 + np.abs(x)),
    vjp=[lambda g, out, x: g / ((1.0 + abs(x)) * (1.0 + abs(x)))],
    saves="in",
    kind="elementwise",
    scalar="({0} / (1.0 + abs({0})))",
)


def clamp_pair_impl(x, y):
    return np.minimum(x, y)


# an opaque two-input op with a shape rule of its own and a non-differentiable second input
smaller = tg.defprimitive(
    "smaller",
    clamp_pair_impl,
    vjp=[lambda g, out, x, y: tg.where(x <= y, g, 0.0), None],
    saves="in",
    shape=lambda x, y: (np.broadcast_shapes(x.shape, y.shape), x.dtype),
)


def test_a_user_op_is_a_callable_op_with_a_gradient():
    x = np.linspace(-3, 3, 12).reshape(3, 4)
    np.testing.assert_allclose(softsign(tg.tensor(x)).numpy(), x / (1 + np.abs(x)))
    check_grad(softsign, x + 0.01)  # float64, central differences
    check_grad(lambda a: smaller(a, tg.tensor(np.full(4, 0.3))), x + 0.01)


def test_a_user_op_differentiates_to_second_order():
    """Nested GradManagers: d/dx sum(d softsign/dx) against finite differences of the first
    derivative (the rule is written in tracegrad ops, so it is itself differentiable)."""
    a = np.array([-2.0, -0.5, 0.3, 1.7])
    x = tg.tensor(a)
    gm1, gm2 = tg.GradManager().attach(x), tg.GradManager().attach(x)
    with gm1:
        with gm2:
            gm2.backward(softsign(x).sum())
        first = x.grad
        gm1.backward(first.sum())
    second = x.grad.numpy() - first.numpy()  # gm1 added its gradient to x.grad

    def first_derivative(v):
        return float(np.sum(1.0 / (1.0 + np.abs(v)) ** 2))

    np.testing.assert_allclose(second, numeric_grad(first_derivative, a), rtol=1e-5)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_user_op_traced_matches_finite_differences(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.standard_normal((5, 4)))
    x = rng.standard_normal((3, 5))
    gm = tg.GradManager().attach(w)

    @tg.trace(backend=backend)
    def step(x):
        with gm:
            loss = (softsign(x @ w + 0.5) * 2.0).sum()
            gm.backward(loss)
        return loss

    loss = step(x)

    def f(wv):
        return float(np.sum(2.0 * softsign(tg.tensor(x @ wv + 0.5)).numpy()))

    np.testing.assert_allclose(loss.item(), f(w.numpy()), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), numeric_grad(f, w.numpy()), rtol=1e-6, atol=1e-8)
    if backend == "numba":  # fused with the add before it and the scale after it
        kernels = [line for line in step.source.splitlines() if line.lstrip().startswith("kernel")]
        assert any("add,softsign,mul" in line for line in kernels), step.source
        assert f"{len(kernels)} kernels" in step.report().splitlines()[0]


def test_defprimitive_checks_its_kind():
    with pytest.raises(ValueError, match="only elementwise ops have a scalar template"):
        tg.defprimitive("bad", np.sin, vjp=None, scalar="sin({0})")
    with pytest.raises(ValueError, match="kind 'weird'"):
        tg.defprimitive("bad", np.sin, vjp=None, kind="weird")


def test_shape_rules_are_remembered_by_shapes_dtypes_and_typed_attributes():
    """A rule runs once per input shapes and dtypes and attribute values of one type (1, 1.0
    and True are three; so are [2] and [2.0], lists keyed item by item, as an index template's
    slices are), anew for other unhashable attributes, and every time it raises."""
    calls = []

    def rule(x, fill):
        calls.append(fill)
        if x.ndim == 0:
            raise ValueError("not a 0-d input")
        return x.shape, np.result_type(
            x.dtype, np.asarray(fill[0] if isinstance(fill, list | np.ndarray) else fill)
        )

    op = tg.defprimitive("filled", lambda x, fill: np.full(x.shape, fill), vjp=None, shape=rule)
    x = tg.tensor(np.zeros(3, np.int8))
    dtypes = [op.shape_rule(x, fill=f)[1] for f in (1, 1.0, True, 1, 1.0, True)]
    assert dtypes == [np.int64, np.float64, np.int8] * 2 and calls == [1, 1.0, True]
    assert op.shape_rule(x, fill=[2])[1] == op.shape_rule(x, fill=[2])[1] == np.int64
    assert op.shape_rule(x, fill=[2.0])[1] == np.float64
    template = [2, (slice(1, 2), None)]  # slices inside, as getitem's
    assert op.shape_rule(x, fill=template)[1] == op.shape_rule(x, fill=list(template))[1]
    unhashable = np.array([2])
    assert op.shape_rule(x, fill=unhashable)[1] == op.shape_rule(x, fill=unhashable)[1] == np.int64
    for _ in range(2):
        with pytest.raises(tg.ShapeError, match="filled: not a 0-d input"):
            op.shape_rule(tg.tensor(np.float32(1.0)), fill=1)
    assert calls == [1, 1.0, True, [2], [2.0], template, unhashable, unhashable, 1, 1]


@pytest.mark.parametrize(
    "name, arithmetic",
    [("add", True), ("where", True), ("maximum", True), ("abs", True), ("greater_equal", True),
     ("exp", False), ("tanh", False), ("pow", False), ("arctan2", False), ("sum", False)],
)  # fmt: skip
def test_arithmetic_is_operators_and_one_instruction_helpers(name, arithmetic):
    """What fuse computes again in another kernel rather than write: operators, abs, maximum;
    not a transcendental call, a power, or an op without a scalar template (a reduction)."""
    from tracegrad.core.primitives import PRIMITIVES

    assert PRIMITIVES[name].arithmetic is arithmetic

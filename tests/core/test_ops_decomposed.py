"""Ops that are one NumPy call and one tape node eagerly and their parts when traced
(`Primitive.decompose`): linear, softmax cross-entropy, softmax and log-softmax. Each eager op
is held to its decomposition (the ops a trace records, differentiated by the tape), its
gradients to finite differences in float64 and to second order, and a trace to the eager
step."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad.core import primitives as P
from tracegrad.nn import functional as F

RNG = np.random.default_rng(7)


def grads_of(fn, *arrays, wanted=None):
    """fn's value and the gradients of sum(fn(...) * c) in every float argument."""
    xs = [tg.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = fn(*xs)
    c = np.random.default_rng(1).standard_normal(out.shape).astype(out.dtype)
    (out * c).sum().backward()
    return out.numpy(), [x.grad.numpy() if x.grad is not None else None for x in xs]


def eager_and_parts(prim, *arrays, **params):
    """The op eagerly, and its decomposition differentiated by the tape (an independent
    derivation of the same function)."""
    eager = grads_of(lambda *xs: prim(*xs, **params), *arrays)
    parts = grads_of(lambda *xs: prim.decompose(*xs, **params), *arrays)
    return eager, parts


def assert_close_grads(eager, parts, tol):
    np.testing.assert_array_equal(eager[0], parts[0])  # the values: bit for bit
    for got, want in zip(eager[1], parts[1], strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# --- cross-entropy -----------------------------------------------------------------------------


def logits_and_labels(n=9, c=5, dtype=np.float32, ignored=(2,)):
    x = (RNG.standard_normal((n, c)) * 3).astype(dtype)
    labels = RNG.integers(0, c, n)
    labels[list(ignored)] = -100
    return x, labels


@pytest.mark.parametrize("loss", [P.cross_entropy, P.nll_loss])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_class_losses_are_their_decompositions(loss, reduction, weighted, dtype):
    x, labels = logits_and_labels(dtype=dtype)
    w = (RNG.uniform(0.5, 2, x.shape[1]).astype(dtype),) if weighted else ()
    eager, parts = eager_and_parts(loss, x, labels, *w, ignore_index=-100, reduction=reduction)
    assert_close_grads(eager, parts, 1e-6 if dtype == np.float32 else 1e-13)


def test_cross_entropy_edge_rows_match_the_decomposition():
    """Every label ignored (the mean is NaN, its gradient 0), a row of -inf logits and a NaN
    logit: the same values and gradients as the parts."""
    x, labels = logits_and_labels(ignored=range(9))
    with np.errstate(invalid="ignore", divide="ignore"):
        eager, parts = eager_and_parts(P.cross_entropy, x, labels, ignore_index=-100,
                                       reduction="mean")  # fmt: skip
    assert np.isnan(eager[0]) and not eager[1][0].any()
    assert_close_grads(eager, parts, 0)
    x, labels = logits_and_labels(ignored=())
    x[1], x[4, 2] = -np.inf, np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        eager, parts = eager_and_parts(P.cross_entropy, x, labels, ignore_index=-100,
                                       reduction="none")  # fmt: skip
    np.testing.assert_array_equal(eager[0], parts[0])
    np.testing.assert_array_equal(np.isnan(eager[1][0]), np.isnan(parts[1][0]))


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize(
    "of_scores", [F.cross_entropy, lambda x, *a, **k: F.nll_loss(x * x, *a, **k)]
)
def test_class_losses_gradients_to_second_order(reduction, of_scores):
    x, labels = logits_and_labels(n=4, c=3, dtype=np.float64, ignored=(1,))
    w = RNG.uniform(0.5, 2, 3)

    def loss(logits, weight):
        return of_scores(logits, tg.tensor(labels), weight, reduction=reduction)

    check_grad(loss, x, w)  # the weight's gradient: no rule of its own, the parts'

    def slope(logits):
        logits = logits if logits.requires_grad else logits.detach().requires_grad_()
        (g,) = tg.autograd.grad((loss(logits, tg.tensor(w)) ** 2).sum(), logits,
                                create_graph=True)  # fmt: skip
        return g

    check_grad(slope, x)


@pytest.mark.parametrize("name", ["cross_entropy", "nll_loss"])
def test_class_losses_are_one_op_eagerly(name):
    """One tape node eagerly; traced, nll_loss is its parts and cross_entropy itself (the Numba
    backend has kernels for it), either way the eager value."""
    x, labels = logits_and_labels()
    t = tg.tensor(x, requires_grad=True)
    loss = getattr(F, name)(t, tg.tensor(labels))
    assert loss.grad_fn.prim.name == name
    loss.backward()
    traced = tg.trace(lambda a, y: getattr(F, name)(a, y), backend="numpy")
    out = traced(tg.tensor(x), tg.tensor(labels))
    np.testing.assert_array_equal(out.numpy(), loss.numpy())
    ops = {n.prim for n in traced.latest.graph.nodes}
    assert (getattr(P, name) in ops) == (name == "cross_entropy")


def test_cross_entropy_errors_name_the_op_and_shapes():
    x, labels = logits_and_labels()
    with pytest.raises(tg.ShapeError, match=r"cross_entropy: weight \(4,\) for 5 classes"):
        P.cross_entropy(tg.tensor(x), tg.tensor(labels), tg.tensor(np.ones(4, np.float32)),
                        ignore_index=-100, reduction="mean")  # fmt: skip


# --- linear ------------------------------------------------------------------------------------


@pytest.mark.parametrize("x_shape", [(6, 4), (2, 3, 4), (4,)])
@pytest.mark.parametrize("bias_shape", [None, (5,), (1, 5)])
def test_linear_is_its_decomposition(x_shape, bias_shape):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal((5, 4)).astype(np.float32)
    b = () if bias_shape is None else (RNG.standard_normal(bias_shape).astype(np.float32),)
    eager, parts = eager_and_parts(P.linear, x, w, *b)
    np.testing.assert_allclose(eager[0], parts[0], rtol=1e-6, atol=1e-6)  # one GEMM or several
    for got, want in zip(eager[1], parts[1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_linear_gradients_to_second_order():
    x, w, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((5, 4)), RNG.standard_normal(5)
    check_grad(F.linear, x, w, b)

    def slope(x, w):
        x = x if x.requires_grad else x.detach().requires_grad_()
        (g,) = tg.autograd.grad((F.linear(x, w) ** 2).sum(), x, create_graph=True)
        return g

    check_grad(slope, x, w)


def test_linear_weight_gradient_is_laid_out_as_the_weight():
    """A C-ordered weight gets a C-ordered gradient (the optimizer walks both in order)."""
    w = tg.tensor(RNG.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
    F.linear(tg.tensor(RNG.standard_normal((3, 7, 4)).astype(np.float32)), w).sum().backward()
    assert w.grad.numpy().flags.c_contiguous


def test_linear_is_its_parts_when_traced():
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    model = tg.nn.Linear(4, 5)
    traced = tg.trace(lambda a: model(a), backend="numpy")
    np.testing.assert_allclose(traced(tg.tensor(x)).numpy(), model(tg.tensor(x)).numpy(),
                               rtol=1e-6, atol=1e-6)  # fmt: skip
    ops = {n.prim for n in traced.latest.graph.nodes}
    assert P.linear not in ops and P.matmul in ops
    with pytest.raises(tg.ShapeError, match=r"linear: input \(6, 3\) and weight \(5, 4\)"):
        P.linear(tg.tensor(x[:, :3]), model.weight)


def test_class_weights_gradient_traced_as_eager():
    """The weights' gradient (no rule of its own: the decomposition's) in a traced step too."""
    x, labels = logits_and_labels(n=8, c=5, dtype=np.float64, ignored=(3,))
    x, labels = tg.tensor(x), tg.tensor(labels)
    w = tg.tensor(RNG.uniform(0.5, 2, 5), requires_grad=True)

    def step(x, y, w):
        loss = F.cross_entropy(x, y, w)
        loss.backward()
        return loss

    step(x, labels, w)
    want, w.grad = w.grad.numpy().copy(), None
    traced = tg.trace(step, backend="numpy")
    for _ in range(2):
        w.grad = None
        traced(x, labels, w)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12, atol=1e-15)


# --- softmax and log-softmax -------------------------------------------------------------------


@pytest.mark.parametrize("op", [P.softmax, P.log_softmax])
@pytest.mark.parametrize("axis", [(0,), (1,), (0, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmaxes_are_their_decompositions(op, axis, dtype):
    x = (RNG.standard_normal((4, 6)) * 3).astype(dtype)
    eager, parts = eager_and_parts(op, x, axis=axis)
    assert_close_grads(eager, parts, 1e-6 if dtype == np.float32 else 1e-13)


def test_softmax_over_either_axis_in_one_function_against_finite_differences():
    """Two softmaxes of one input, over rows and over columns (their second derivatives:
    `tests/nn/test_functional.py`)."""
    x = RNG.standard_normal((3, 5))
    check_grad(lambda a: (tg.softmax(a, 1) ** 2).sum() * tg.softmax(a, 0)[0].sum(), x)

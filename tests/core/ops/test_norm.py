"""The layer-norm and batch-norm ops: NumPy implementations and Numba kernels against eager,
NumPy and finite differences, second-order gradients, and one backward call for three
cotangents."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import numeric_grad
from tracegrad.compiler import lowering
from tracegrad.compiler.kernels import fused
from tracegrad.core import primitives as P
from tracegrad.core.ops import norm as normalization
from tracegrad.core.vocabulary import Phase
from tracegrad.nn import functional as F

NORMS = {  # input shape, weight shape, the normalization
    "layer": ((3, 6), (6,), lambda x, w, b: F.layer_norm(x, (6,), w, b)),
    "batch": ((3, 2, 4), (2,), lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
}


@pytest.mark.parametrize("norm", NORMS)
def test_second_order_gradients_take_the_composed_ops(rng, norm):
    """d/dx of |dL/dweight|^2 + |dL/dx|^2, against finite differences (the first-order gradient
    is the backward op's, the second the composed ops')."""
    shape, features, normalize = NORMS[norm]
    x, w, b, c = (rng.standard_normal(s) for s in [shape, features, features, shape])

    def grad_norm(x: np.ndarray | tg.Tensor, create_graph: bool = False) -> tg.Tensor:
        x = x if isinstance(x, tg.Tensor) else tg.tensor(x, requires_grad=True)
        wt = tg.tensor(w, requires_grad=True)
        y = normalize(x, wt, tg.tensor(b))
        gx, gw = tg.autograd.grad((y * c * y).sum(), [x, wt], create_graph=create_graph)
        return (gw * gw).sum() + (gx * gx).sum()

    xt = tg.tensor(x, requires_grad=True)
    grad_norm(xt, create_graph=True).backward()
    expected = numeric_grad(lambda a: float(grad_norm(tg.tensor(a, requires_grad=True))), x)
    np.testing.assert_allclose(xt.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_one_backward_call_gives_all_three_cotangents(rng, monkeypatch):
    calls = []
    counted = lambda *a, **kw: calls.append(1) or normalization.backward(*a, **kw)
    monkeypatch.setattr(P.layer_norm_grad, "impl", counted)
    x, w, b = (tg.tensor(rng.standard_normal(s), requires_grad=True) for s in [(4, 5), (5,), (5,)])
    (F.layer_norm(x, (5,), w, b) ** 2).sum().backward()
    assert len(calls) == 1 and all(t.grad is not None for t in (x, w, b))


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_traced_kernels_match_eager(rng, dtype, parallel, monkeypatch):
    """Values and gradients of x (Fortran order), weight and bias from the Numba kernels against
    the NumPy op; rows of 1, of 7 (fewer than the kernel's blocks) and of 300; on one thread
    (these small shapes' own kernels), then on several."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    if parallel:
        monkeypatch.setattr(fused, "PARALLEL_MIN", 0)
    shapes = [(3, 1), (7, 5), (3, 100, 7)]
    args = []
    for s in shapes:
        d = s[-1]
        args += [rng.standard_normal(s[::-1]).T.astype(dtype), *(rng.standard_normal((2, d))
                 .astype(dtype)), rng.standard_normal(s).astype(dtype)]  # fmt: skip

    def step(*xs):
        with tg.GradManager().attach([x for i, x in enumerate(xs) if i % 4 != 3]) as gm:
            groups = [xs[i : i + 4] for i in range(0, len(xs), 4)]  # x, weight, bias, c
            ys = [F.layer_norm(x, (x.shape[-1],), w, b) * c for x, w, b, c in groups]
            gm.backward(tg.sum(tg.stack([(y * y).sum() for y in ys])))
        return [*ys, *(x.grad for i, x in enumerate(xs) if i % 4 != 3)]

    traced = tg.trace(step, backend="numba")
    got = traced(*(tg.tensor(a, requires_grad=i % 4 != 3) for i, a in enumerate(args)))
    want = step(*(tg.tensor(a, requires_grad=i % 4 != 3) for i, a in enumerate(args)))
    tol = 1e-12 if dtype == np.float64 else 5e-5
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)
    assert traced.source.count("layer_norm kernel") == traced.source.count("_grad kernel") == 3


def test_group_norms_run_the_layer_norm_kernels(rng, monkeypatch):
    """A group norm is a layer norm of (N, groups, rest) with a constant unit weight and zero
    bias; its kernels take the constants, and a traced step equals eager to float64 precision."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x, w, b = rng.standard_normal((2, 6, 5, 3)), rng.standard_normal(6), rng.standard_normal(6)

    def step(x, w, b):
        with tg.GradManager().attach([x, w, b]) as gm:
            y = F.silu(F.group_norm(x, 3, w, b))
            gm.backward((y * y).sum())
        return y, x.grad, w.grad, b.grad

    traced = tg.trace(step, backend="numba")
    got = traced(*(tg.tensor(a, requires_grad=True) for a in (x, w, b)))
    want = step(*(tg.tensor(a, requires_grad=True) for a in (x, w, b)))
    for a, e in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-12, atol=1e-12)
    assert "layer_norm kernel" in traced.source and "layer_norm_grad kernel" in traced.source


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_x_gradient_alone_skips_the_weights_sums(rng, dtype, tol, monkeypatch):
    """Where the weight and bias need no gradient (a group norm's constant unit weight), the
    backward op computes x's alone (`params=False`): NumPy's and the kernel's equal the dx of
    the full op, and the step's graph holds that op, not the full one."""
    x = rng.standard_normal((40, 33)).T.astype(dtype)  # Fortran order, rows of 40
    w, g = rng.standard_normal(40).astype(dtype), rng.standard_normal((33, 40)).astype(dtype)
    full = normalization.unpack(P.layer_norm_grad.impl(x, w, g, eps=1e-5), x)[0]
    alone = P.layer_norm_grad.impl(x, w, g, eps=1e-5, params=False)
    assert alone.shape == (x.size,)
    np.testing.assert_allclose(alone.reshape(x.shape), full, rtol=tol, atol=tol)

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x6 = rng.standard_normal((2, 6, 5, 3)).astype(dtype)

    def step(x):
        with tg.GradManager().attach([x]) as gm:
            y = F.group_norm(x, 3)
            gm.backward((y * y * y).sum())
        return x.grad

    traced = tg.trace(step, backend="numba")
    got = traced(tg.tensor(x6, requires_grad=True)).numpy()
    want = step(tg.tensor(x6, requires_grad=True)).numpy()
    np.testing.assert_allclose(got, want, rtol=10 * tol, atol=10 * tol)
    [node] = [n for n in traced.graph.nodes if n.prim is P.layer_norm_grad]
    assert node.attrs["params"] is False and "layer_norm_grad kernel" in traced.source


def test_group_norm_gradients_against_finite_differences(rng):
    x = rng.standard_normal((2, 4, 3, 2))
    expected = numeric_grad(lambda a: float((F.group_norm(tg.tensor(a), 2) ** 3).sum()), x)
    xt = tg.tensor(x, requires_grad=True)
    (F.group_norm(xt, 2) ** 3).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), expected, rtol=1e-6, atol=1e-7)


# --- batch norm ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
@pytest.mark.parametrize("shape, parallel", [((4, 3, 4, 4), False), ((2, 5, 7, 9), True),
                                             ((3, 2, 40), False)])  # fmt: skip
def test_batch_norm_kernels_match_numpy(rng, dtype, tol, shape, parallel, monkeypatch):
    """The three batch-norm kernels against the NumPy ops, on x far from zero (a variance from
    sums of squares loses digits there unless summed in float64) and in Fortran order; channels
    on one thread (these small shapes' own kernels) or on several."""
    if parallel:
        monkeypatch.setattr(fused, "PARALLEL_MIN", 0)
    from tracegrad.compiler.kernels import native
    from tracegrad.compiler.kernels.cache import default_cache
    from tracegrad.core import ir

    x = (rng.standard_normal(shape[::-1]).T * 3 + 100).astype(dtype)
    w, b = (rng.standard_normal(shape[1]).astype(dtype) for _ in range(2))
    g = rng.standard_normal(shape).astype(dtype)
    for prim, args, attrs in [(P.batch_norm, (x, w, b), {"eps": 1e-5}), (P.batch_stats, (x,), {}),
                              (P.batch_norm_grad, (x, w, g), {"eps": 1e-5})]:  # fmt: skip
        values = [ir.Value(a.shape, a.dtype) for a in args]
        node = ir.Node(prim, values, [ir.Value(*prim.shape_rule(*values, **attrs))], attrs)
        found = native.modules([node])
        default_cache().load_all(dict(found.values()))
        out = np.empty(node.outputs[0].shape, dtype)
        native.launchers(found)[node](*args, out)
        expected = prim.impl(*args, **attrs)
        np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * np.abs(expected).max())


def test_batch_norms_of_few_values_per_sample_have_no_kernel():
    """(N, C) and (N, C, L) with short L run NumPy: a channel's values would be strided."""
    from tracegrad.compiler.kernels import native
    from tracegrad.core import ir

    for shape in [(64, 32), (64, 32, 15)]:
        values = [ir.Value(shape, np.float32), *[ir.Value((32,), np.float32)] * 2]
        node = ir.Node(P.batch_norm, values, [ir.Value(shape, np.float32)], {"eps": 1e-5})
        assert native.modules([node]) == {}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_batch_norm_is_differentiated_by_its_own_formula(rng, backend, monkeypatch):
    """A trace records batch norm's parts but differentiates it by batch_norm_grad's
    (`traced_vjp`): x's, weight's and bias's gradients through a ReLU against finite
    differences (float64). The statistics are forward's, and on Numba backward reads the batch
    in two kernels, the sums and then dx, writing nothing as large as x before dx."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x, c = rng.standard_normal((4, 3, 5, 2)) + 2.0, rng.standard_normal((4, 3, 5, 2))
    w, b = rng.standard_normal(3), rng.standard_normal(3)

    def loss(x, w, b):
        return (F.relu(F.batch_norm(x, None, None, w, b, training=True)) * tg.tensor(c)).sum()

    def step(x, w, b):
        with tg.GradManager().attach([x, w, b]) as gm:
            gm.backward(loss(x, w, b))
        return x.grad, w.grad, b.grad

    traced = tg.trace(step, backend=backend)
    got = traced(*(tg.tensor(a, requires_grad=True) for a in (x, w, b)))
    args = {"x": x, "w": w, "b": b}
    for name, g in zip(args, got, strict=True):

        def f(a, name=name):
            return float(loss(*(tg.tensor(a if k == name else v) for k, v in args.items())))

        np.testing.assert_allclose(g.numpy(), numeric_grad(f, args[name]), rtol=1e-6, atol=1e-7)
    backward = [n for n in traced.graph.nodes if n.phase is not Phase.FORWARD]
    assert not any(n.prim is P.batch_norm_grad for n in traced.graph.nodes)
    if backend == "numba":
        reads = [n for n in backward if n.op == "fused" and x.shape in [v.shape for v in n.inputs]]
        assert len(reads) == 2, [[m.op for m in n.attrs["body"].nodes] for n in reads]
        assert [v.shape for v in reads[0].outputs] == [(3,), (3,)]

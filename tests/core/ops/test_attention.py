"""The fused attention op (`scaled_dot_product_attention` without a mask, or causal): its NumPy
implementation and Numba kernels against the composed ops and finite differences, second-order
gradients, one backward call for three cotangents, and what a traced step keeps."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, numeric_grad
from tracegrad.compiler import lowering
from tracegrad.compiler.kernels import fused
from tracegrad.core import primitives as P
from tracegrad.core.ops import attention as attention_impl
from tracegrad.nn import functional as F

SHAPES = [  # q, k, v: rows not a multiple of the kernels' blocks of 4, more or fewer keys
    ((2, 3, 7, 5), (2, 3, 9, 5), (2, 3, 9, 4)),
    ((2, 2, 3, 6, 4),) * 3,  # one shape: the gradients interleaved (L, 3, H, E), leading axes
    ((13, 8), (6, 8), (6, 3)),
    ((2, 5, 3), (2, 5, 3), (2, 5, 2)),
]
LONG = [  # past a causal kernel's blocks of rows and of keys (BLOCK); a single query row
    ((1, 2, 150, 8), (1, 2, 140, 8), (1, 2, 140, 6)),
    ((3, 1, 4), (3, 70, 4), (3, 70, 2)),
]


def composed(q, k, v, causal):
    """softmax(q k^T / sqrt(E)) v from NumPy, the mask written out: the reference."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tri(*s.shape[-2:], dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shapes", SHAPES)
def test_gradients_match_finite_differences(rng, shapes, causal):
    q, k, v = (rng.standard_normal(s) for s in shapes)
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    np.testing.assert_allclose(sdpa(*map(tg.tensor, (q, k, v))).numpy(), composed(q, k, v, causal),
                               rtol=1e-12, atol=1e-12)  # fmt: skip
    check_grad(sdpa, q, k, v)


def test_second_order_gradients_take_the_composed_ops(rng):
    """With create_graph the VJP is written in differentiable ops: d/dq of |dL/dk|^2."""
    q, k, v = (rng.standard_normal(s) for s in SHAPES[0])
    c = rng.standard_normal((*q.shape[:-1], v.shape[-1]))

    def grad_norm(q: np.ndarray | tg.Tensor, create_graph: bool = False) -> tg.Tensor:
        kt = tg.tensor(k, requires_grad=True)
        y = F.scaled_dot_product_attention(q, kt, tg.tensor(v), is_causal=True)
        (gk,) = tg.autograd.grad((y * c).sum(), kt, create_graph=create_graph)
        return (gk * gk).sum()

    qt = tg.tensor(q, requires_grad=True)
    grad_norm(qt, create_graph=True).backward()
    expected = numeric_grad(lambda a: float(grad_norm(tg.tensor(a))), q)
    np.testing.assert_allclose(qt.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_one_backward_call_gives_all_three_cotangents(rng, monkeypatch):
    calls = []
    counted = lambda *a, **kw: calls.append(1) or attention_impl.backward(*a, **kw)
    monkeypatch.setattr(P.attention_grad, "impl", counted)
    q, k, v = (tg.tensor(rng.standard_normal(s), requires_grad=True) for s in SHAPES[0])
    F.scaled_dot_product_attention(q, k, v).sum().backward()
    assert len(calls) == 1 and all(t.grad is not None for t in (q, k, v))


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_traced_kernels_match_eager(rng, dtype, parallel, monkeypatch):
    """Values and gradients of q, k, v (q in Fortran order, as a strided view) from the Numba
    kernels against the NumPy op: every shape of SHAPES and LONG, causal or not, in one plan;
    their pairs on one thread (these small shapes' own kernels), then on several."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    if parallel:
        monkeypatch.setattr(fused, "PARALLEL_MIN", 0)
    args = []
    for shapes in SHAPES + LONG:
        q = rng.standard_normal(shapes[0][::-1]).T.astype(dtype)
        args += [q] + [rng.standard_normal(s).astype(dtype) for s in shapes[1:]]

    def step(*xs):
        with tg.GradManager().attach(xs) as gm:
            ys = [F.scaled_dot_product_attention(*xs[i : i + 3], is_causal=causal)
                  for i in range(0, len(xs), 3) for causal in (False, True)]  # fmt: skip
            gm.backward(tg.sum(tg.stack([(y * y).sum() for y in ys])))
        return [*ys, *(x.grad for x in xs)]

    traced = tg.trace(step, backend="numba")
    got = traced(*(tg.tensor(a, requires_grad=True) for a in args))
    want = step(*(tg.tensor(a, requires_grad=True) for a in args))
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)
    source, kernels = traced.source, 2 * len(SHAPES + LONG)
    assert source.count("attention kernel") == source.count("attention_grad") == kernels
    calls = len(re.findall(r"kernel\d+\(", traced.source))  # fused and native kernels
    assert f"nodes, {calls} kernels" in traced.report().splitlines()[0]


def test_a_nan_reaches_its_rows_as_in_pytorch(rng, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    q, k, v = (rng.standard_normal((1, 2, 6, 4)).astype(np.float32) for _ in range(3))
    k[0, 1, 2, 0] = np.nan  # rows that see key 2 of head 1 (causal: rows 2..5) become NaN
    f = tg.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 backend="numba")  # fmt: skip
    y = f(q, k, v).numpy()
    assert np.isnan(y[0, 1, 2:]).all() and not np.isnan(y[0, 1, :2]).any()
    assert not np.isnan(y[0, 0]).any()


def test_backward_keeps_no_scores(rng):
    """The traced step keeps q, k, v and the output for backward, never a (L x S) array."""
    q, k, v = (tg.tensor(rng.standard_normal((2, 3, 10, 4)), requires_grad=True)
               for _ in range(3))  # fmt: skip

    def step(q, k, v):
        with tg.GradManager().attach([q, k, v]) as gm:
            gm.backward(F.scaled_dot_product_attention(q, k, v, is_causal=True).sum())

    traced = tg.trace(step)
    traced(q, k, v)
    shapes = {tuple(v.shape) for n in traced.graph.nodes for v in n.outputs}
    assert not any(s[-2:] == (10, 10) for s in shapes), shapes


def test_a_mask_or_broadcast_heads_take_the_composed_ops(rng):
    q = tg.tensor(rng.standard_normal((2, 3, 4)))
    k = tg.tensor(rng.standard_normal((1, 5, 4)))
    mask = rng.random((3, 5)) > 0.3
    mask[:, 0] = True
    y = F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
    s = q.numpy() @ np.swapaxes(k.numpy(), -1, -2) / 2.0
    p = np.exp(np.where(mask, s, -np.inf) - s.max(-1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), (p / p.sum(-1, keepdims=True)) @ k.numpy())
    y = F.scaled_dot_product_attention(q, k, k)  # leading axes broadcast
    np.testing.assert_allclose(y.numpy(), composed(q.numpy(), np.broadcast_to(k.numpy(),
                               (2, 5, 4)), k.numpy(), False))  # fmt: skip


def test_the_result_merges_its_heads_without_a_copy(rng):
    """attention's result is laid out (B, L, H, E): `y.transpose(1, 2).reshape(B, L, H * E)`,
    what a multi-head layer does next, is a view of it, in eager and in a traced step."""
    q, k, v = (tg.tensor(rng.standard_normal((2, 3, 5, 4))) for _ in range(3))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    merged = y.transpose(1, 2).reshape(2, 5, 12)
    assert np.shares_memory(merged.numpy(), y.numpy())
    np.testing.assert_allclose(y.numpy(), composed(*(t.numpy() for t in (q, k, v)), True))
    f = tg.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v).transpose(1, 2)
                 .reshape(2, 5, 12) * 2)  # fmt: skip
    want = composed(q.numpy(), k.numpy(), v.numpy(), False).transpose(0, 2, 1, 3) * 2
    np.testing.assert_allclose(f(q, k, v).numpy(), want.reshape(2, 5, 12), rtol=1e-12)


def test_the_qkv_gradient_is_the_packed_gradient_itself(rng):
    """q, k, v sliced from one projection (B, L, 3, H, E): attention_grad lays their gradients
    out that way, so the projection's gradient is a view of them, not a concatenation."""
    x = tg.tensor(rng.standard_normal((2, 5, 3, 2, 4)), requires_grad=True)

    def step(x):
        with tg.GradManager().attach([x]) as gm:
            q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            gm.backward((y * y).sum())
        return x.grad

    traced = tg.trace(step)
    got = traced(x).numpy()
    x.grad = None
    np.testing.assert_allclose(got, step(x).numpy(), rtol=1e-12, atol=1e-12)
    assert "attention_grad" in traced.source and "concatenate" not in traced.source


def test_gradients_in_another_order_are_still_concatenated(rng):
    """q, k, v taken from the projection's slots in reverse: their packed gradients do not lie
    in the projection's order, so the plan copies them into place, and the values hold."""
    x = tg.tensor(rng.standard_normal((2, 5, 3, 2, 4)), requires_grad=True)

    def step(x):
        with tg.GradManager().attach([x]) as gm:
            q, k, v = (x[:, :, i].transpose(1, 2) for i in (2, 1, 0))
            gm.backward(F.scaled_dot_product_attention(q, k, v).sum() ** 2)
        return x.grad

    traced = tg.trace(step)
    got = traced(x).numpy()
    x.grad = None
    np.testing.assert_allclose(got, step(x).numpy(), rtol=1e-12, atol=1e-12)
    assert "concatenate" in traced.source


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
@pytest.mark.parametrize("float_mask", [False, True])
def test_a_query_that_sees_no_key_gets_zeros_as_in_pytorch(float_mask, backend, monkeypatch):
    """A fully masked row: output 0 and finite gradients, PyTorch's values (it was NaN, and so
    was all of v's gradient)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 6)))
    c = rng.standard_normal((2, 3, 6))
    mask = rng.random((3, 5)) > 0.4
    mask[0, 0], mask[1] = True, False
    mask = np.where(mask, 0.0, -np.inf) if float_mask else mask

    def step(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        (y * c).sum().backward()
        return y

    if backend is not None:
        monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
        step = tg.trace(step, backend=backend)
    ours = [tg.tensor(a, requires_grad=True) for a in (q, k, v)]
    y = step(*ours)
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(*theirs, attn_mask=torch.tensor(mask))
    (want * torch.tensor(c)).sum().backward()
    np.testing.assert_array_equal(y.numpy()[:, 1], 0.0)
    np.testing.assert_allclose(y.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-14)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_kernels_copy_inputs_whose_rows_repeat(rng):
    """BLAS reads a pair in place only where its rows lie a row apart: keys broadcast along their
    rows (stride 0, read-only) are copied first, not refused or misread."""
    from tracegrad.compiler.kernels.native import compile_native
    from tracegrad.core.ir import Node, Value

    q = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    k = np.broadcast_to(rng.standard_normal((2, 3, 1, 4)).astype(np.float32), (2, 3, 6, 4))
    v = rng.standard_normal((2, 3, 6, 4)).astype(np.float32)
    attrs = dict(scale=0.5, causal=False)
    values = [Value(a.shape, a.dtype) for a in (q, k, v)]
    node = Node(P.attention, values, [Value(*P.attention.shape_rule(*values, **attrs))], attrs)
    [(native, kernel)] = compile_native([node])
    out = np.empty(node.outputs[0].shape, np.float32)
    kernel(q, k, v, out)
    assert native
    np.testing.assert_allclose(out, P.attention.impl(q, k, v, **attrs), rtol=1e-6, atol=1e-6)

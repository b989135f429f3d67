"""Max-pooling: its ops (argmax, maxima, scatter, gather: core/ops/pooling.py) against float64
finite differences (first and second order) and PyTorch (ties, padding, strides, dilation,
NaN), traced against eager on both backends (the Numba backend's own kernels), and what
backward keeps."""

from __future__ import annotations

import numpy as np
import pytest

import passes
import tracegrad as tg
from tests.conftest import check_grad, classifier_step, numeric_grad
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.core import primitives as P
from tracegrad.nn import functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # CI has no torch: the other checks still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

GEOMETRIES = [  # kernel_size, stride, padding, dilation
    (2, None, 0, 1),  # the CNN's: windows tile the plane
    (3, 2, 1, 1),  # overlapping, padded
    (3, 1, 1, 1),  # stride 1
    (2, 1, 0, 2),  # dilated, overlapping
    (3, 2, 1, 2),  # dilated and padded
    ((2, 3), (1, 2), (1, 0), (2, 1)),  # every attribute a pair
    (2, 3, 0, 1),  # gaps between the windows
]
SHAPE = (2, 3, 7, 6)


def pool(*geometry):
    kernel, stride, padding, dilation = geometry
    return lambda x: F.max_pool2d(x, kernel, stride, padding, dilation)


def with_ties(rng, shape=SHAPE):
    """Random values, a third of them rounded to a few levels: many windows have tied maxima."""
    x = rng.standard_normal(shape)
    x[..., ::3, :] = np.round(x[..., ::3, :])
    x[0, 0] = 1.0  # a whole plane of ties
    return x


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_gradients_match_finite_differences(rng, geometry):
    check_grad(pool(*geometry), rng.standard_normal(SHAPE))


def test_second_derivative_matches_finite_differences(rng):
    """The gradient is a scatter of the indices; its VJP, a gather, is recorded too."""
    x = rng.standard_normal((1, 2, 5, 5))
    f = pool(3, 2, 1, 1)

    def gradient_norm(x):
        (gx,) = tg.grad(lambda x: (f(x) ** 3.0).sum(), (0,))(x)
        return (gx * gx).sum()

    (g2,) = tg.grad(gradient_norm, (0,))(tg.tensor(x))
    expected = numeric_grad(lambda a: float(gradient_norm(tg.tensor(a))), x)
    np.testing.assert_allclose(g2.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_errors_name_the_op_and_the_geometry():
    x = tg.zeros((1, 1, 2, 2))
    with pytest.raises(tg.ShapeError, match="max_pool2d_argmax.*padding only"):
        F.max_pool2d(x, 2, 1, 1, 3)  # taps at -1 and 2 of rows 0..1
    with pytest.raises(tg.ShapeError, match="at most half"):
        F.max_pool2d(x, 2, 1, 2)
    with pytest.raises(tg.ShapeError, match="smaller than the kernel"):
        F.max_pool2d(x, 3)
    with pytest.raises(tg.ShapeError, match="4-d"):
        F.max_pool2d(tg.zeros((2, 2, 2, 2, 2)), 2)
    assert F.max_pool2d(tg.zeros((2, 2, 2)), 2).shape == (2, 1, 1)  # one unbatched image


def test_integers_pool_without_a_gradient():
    x = np.arange(32, dtype=np.int64).reshape(1, 2, 4, 4)
    np.testing.assert_array_equal(F.max_pool2d(tg.tensor(x), 2, padding=1).numpy()[0, 0],
                                  [[0, 2, 3], [8, 10, 11], [12, 14, 15]])  # fmt: skip


# --- against PyTorch ---------------------------------------------------------------------------


def both(x, geometry):
    """Values and gradients of sum(max_pool2d(x) * c) in tracegrad and PyTorch (float64)."""
    kernel, stride, padding, dilation = geometry
    a, t = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y = F.max_pool2d(a, kernel, stride, padding, dilation)
    ty = TF.max_pool2d(t, kernel, stride if stride is not None else kernel, padding, dilation)
    c = np.random.default_rng(5).standard_normal(y.shape)
    (y * c).sum().backward()
    (ty * torch.tensor(c)).sum().backward()
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_matches_torch_with_ties(rng, geometry):
    """Ties send the whole gradient to the first maximum in row-major order."""
    both(with_ties(rng), geometry)


@needs_torch
@pytest.mark.parametrize("geometry", [(2, None, 0, 1), (3, 2, 1, 1)])
def test_matches_torch_with_nan_and_infinities(rng, geometry):
    """A NaN is the maximum (the last NaN of a window gets the gradient); a window of -inf
    sends its gradient to its first element inside the input, not to the padding."""
    x = rng.standard_normal(SHAPE)
    x[0, 0, 1, 1] = x[0, 0, 2, 2] = x[1, 2, 0, 0] = np.nan
    x[0, 1] = -np.inf
    x[1, 0, :3] = np.inf
    with np.errstate(invalid="ignore"):  # sum(y * c) of NaN
        both(x, geometry)


# --- compiled: traced against eager, the Numba backend's kernels -------------------------------


@pytest.mark.parametrize(
    "geometry, backend, dtype",
    [(g, b, np.float64) for g in GEOMETRIES[:5] for b in ("numpy", "numba")]
    + [(GEOMETRIES[0], b, np.float32) for b in ("numpy", "numba")],  # the CNN's float32 kernels
)
def test_traced_matches_eager(rng, geometry, backend, dtype, monkeypatch):
    """Value, gradient and the gradient's own gradient (a gather), with ties and NaN."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)  # every pooling op runs a Numba kernel
    x = with_ties(rng).astype(dtype)
    x[1, 1, 3, 3] = np.nan
    f = pool(*geometry)
    c = tg.tensor(rng.standard_normal(f(x).shape).astype(dtype))

    def step(x):
        with tg.GradManager().attach(x) as gm:
            y = f(x)
            (gx,) = tg.autograd.grad((y * c).sum(), x, create_graph=True)
            gm.backward((gx * gx * x).sum())
        return y, gx, x.grad

    traced = tg.trace(step, backend=backend)
    for _ in range(2):
        x = with_ties(rng).astype(dtype)
        x[1, 1, 3, 3] = np.nan
        got = traced(tg.tensor(x))
        want = step(tg.tensor(x))
        tol = 1e-14 if dtype == np.float64 else 1e-6  # overlapping windows: sums in any order
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)
    if backend == "numba":  # the argmax's kernel writes the maxima too
        assert "max_pool2d_argmax kernel" in traced.source
        assert "max_pool2d kernel" not in traced.source


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.head(tg.reshape(F.max_pool2d(F.relu(self.conv(x)), 2), (x.shape[0], -1)))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_backward_keeps_the_indices_not_the_activations(rng, backend, monkeypatch):
    """Forward keeps the pooled pre-activations (ReLU's mask is taken at the maxima alone,
    simplify's `mask_before_scatter`) and the int8 positions of the maxima, nothing of the
    conv's size; the head's input is the pooled values' ReLU again. The traced step matches
    eager."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    data = [(rng.standard_normal((6, 1, 8, 8)), rng.integers(0, 3, 6)) for _ in range(2)]
    models = []
    for traced in (False, True):
        nn.manual_seed(0)
        model = Net()
        for p in model.parameters():
            p._value = p.numpy().astype(np.float64)
        step = classifier_step(model, optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        models.append((model, tg.trace(step, backend=backend) if traced else step))
    for x, y in data:
        losses = [float(step(tg.tensor(x), tg.tensor(y))) for _, step in models]
        np.testing.assert_allclose(losses[1], losses[0], rtol=1e-12)
    for (k, v), (_, w) in zip(*(m.state_dict().items() for m, _ in models), strict=True):
        np.testing.assert_allclose(w.numpy(), v.numpy(), rtol=1e-10, atol=1e-12, err_msg=k)
    graph = models[1][1].graph  # on numba, one kernel makes the indices and the maxima
    producers = graph.producers()
    saved = {(producers[v].prim, v.dtype.kind, v.shape) for v in passes.saved_values(graph)}
    pooling = {P.max_pool2d_argmax, P.max_pool2d}
    assert {(k, s) for p, k, s in saved if p in pooling} == {
        ("i", (6, 4, 4, 4)),
        ("f", (6, 4, 4, 4)),
    }
    assert all(p is not P.maximum and s != (6, 4, 8, 8) for p, _, s in saved)


def test_lowering_runs_the_large_nodes_of_ops_the_kernel_registry_has():
    """One registry says which ops have a kernel of their own: the compiler's generators."""
    from tracegrad.compiler import lowering
    from tracegrad.compiler.kernels.native import GENERATORS
    from tracegrad.core.ir import Graph, Node, Value

    assert set(GENERATORS) <= set(P.PRIMITIVES.values())
    assert {P.max_pool2d, P.max_pool2d_argmax, P.max_pool2d_scatter, P.matmul} <= set(GENERATORS)
    rows, f32 = lowering.KERNEL_MIN // 64, np.float32
    big, small, w = Value((rows, 64), f32), Value((2, 16), f32), Value((64, 64), f32)
    w_small = Value((16, 16), f32)  # below even gemm's own KERNEL_MIN
    nodes = [
        Node(P.matmul, [big, w], [Value((rows, 64), f32)]),
        Node(P.matmul, [small, w_small], [Value((2, 16), f32)]),
        Node(P.exp, [big], [Value((rows, 64), f32)]),
    ]
    graph = Graph([big, small, w, w_small], nodes, [v for n in nodes for v in n.outputs])
    assert lowering.native_nodes(graph) == nodes[:1]


@pytest.mark.parametrize(
    "geometry, dtype, parallel",
    [(GEOMETRIES[k], np.float64, False) for k in (0, 1, 4, 6)]  # as the traced tests compile
    + [(GEOMETRIES[k], np.float32, False) for k in (0, 6)]  # unpadded kernels compile fastest
    + [(GEOMETRIES[k], np.float32, True) for k in (0, 1)],  # vectorized (and padded) loops
)
def test_kernels_match_numpy(rng, geometry, dtype, parallel, monkeypatch):
    """Each Numba kernel against its op's NumPy implementation, bit for bit but for the order
    of sums where windows overlap; NaN and infinities in the values and the gradient (whose
    infinity must not turn the other taps' zeros into NaN). `parallel`: the kernels large ones
    get, whose loops LLVM vectorizes."""
    from tracegrad.compiler.kernels import pool
    from tracegrad.compiler.kernels.native import compile_native
    from tracegrad.core.ir import Node, Value
    from tracegrad.core.ops import pooling

    kernel, stride, padding, dilation = geometry
    pair = lambda v: (v, v) if isinstance(v, int) else v
    attrs = dict(kernel=pair(kernel), stride=pair(stride or kernel), padding=pair(padding),
                 dilation=pair(dilation))  # fmt: skip
    monkeypatch.setattr(pool, "PARALLEL_MIN", 1 if parallel else None)
    x = with_ties(rng, (2, 3, 7, 37) if parallel else SHAPE).astype(dtype)  # rows past a vector
    x[0, 1, 2, 2] = x[0, 1, 2, 3] = x[1, 2, 4, 4] = np.nan
    x[1, 0] = -np.inf
    idx = pooling.argmax(x, **attrs)
    g = rng.standard_normal(idx.shape).astype(dtype)
    g[0, 0, 0, 0], g[0, 2, 1, 1], g[1, 1, 0, 1] = np.inf, -np.inf, np.nan
    xv, iv, gv = (Value(a.shape, a.dtype) for a in (x, idx, g))
    cases = [
        (P.max_pool2d_argmax, [x], [xv], {}),
        (P.max_pool2d, [x, idx], [xv, iv], {}),
        (P.max_pool2d_gather, [x, idx], [xv, iv], {}),
        (P.max_pool2d_scatter, [g, idx], [gv, iv], {"shape": x.shape}),
    ]
    for prim, arrays, values, extra in cases:
        node = Node(prim, values, [Value(*prim.shape_rule(*values, **extra, **attrs))],
                    {**extra, **attrs})  # fmt: skip
        want = prim.impl(*arrays, **extra, **attrs)
        got = np.full_like(want, 7)
        [(ok, kernel)] = compile_native([node])
        kernel(*arrays, got)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=prim.name)

"""Generated fused kernels against the NumPy reference (ir.evaluate with each primitive's impl),
and the kernel cache. Compiling is the slow part, so the module shares one cache directory and
keeps the number of distinct kernel structures small."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

import passes
from tracegrad.compiler.kernels import cache, compile_group, fused, team
from tracegrad.compiler.kernels.fused import analyze, structure_key
from tracegrad.core import primitives as primitives
from tracegrad.core.ir import Graph, Node, Value, evaluate
from tracegrad.core.primitives import PRIMITIVES, Primitive


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory) -> Path:
    """One kernel cache directory for the whole test run: each structure compiles once."""
    directory = tmp_path_factory.mktemp("kernels")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(cache.ENV_VAR, str(directory))
        yield directory


class Group:
    """Builds a fused group by hand: inputs, constants and nodes typed by the op table."""

    def __init__(self):
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []

    def input(self, shape, dtype=np.float32) -> Value:
        self.inputs.append(Value(shape, dtype))
        return self.inputs[-1]

    @staticmethod
    def const(value, dtype=np.float32) -> Value:
        value = np.asarray(value, dtype)
        return Value(value.shape, dtype, const=value)

    def __call__(self, op: str, *args: Value, **attrs) -> Value:
        prim = PRIMITIVES[op]
        out = Value(*prim.shape_rule(*args, **attrs))
        self.nodes.append(Node(prim, args, [out], attrs))
        return out

    def run(self, outputs: list[Value], arrays: list[np.ndarray]):
        """(kernel results, NumPy reference results) for `outputs` on `arrays`."""
        kernel = compile_group(self.inputs, self.nodes, outputs)
        got = [np.full(v.shape, -7, v.dtype) for v in outputs]
        kernel(*arrays, *got)
        graph = Graph(self.inputs, self.nodes, outputs)
        want = evaluate(graph, arrays)
        return got, [np.asarray(w).astype(v.dtype) for w, v in zip(want, outputs, strict=True)]


# --- every elementwise primitive ----------------------------------------------------------------

ELEMENTWISE = sorted(
    p.name for p in vars(primitives).values() if isinstance(p, Primitive) and p.scalar is not None
)


def all_primitives(dtype):
    """Each elementwise primitive applied to the group inputs directly, one output each, so a
    template's error shows up alone rather than mixed into a chain."""
    g = Group()
    pos, y, z = g.input((37, 29), dtype), g.input((37, 29), dtype), g.input((37, 29), dtype)
    cond = g.input((37, 29), np.bool_)
    unit, above1 = g.input((37, 29), dtype), g.input((37, 29), dtype)
    outs = {}
    for op in ("neg", "exp", "expm1", "tanh", "sigmoid", "softplus", "erf", "sin", "cos", "sign",
               "abs", "gelu", "gelu_slope", "gelu_tanh", "gelu_tanh_slope", "silu",
               "silu_slope"):  # fmt: skip
        outs[op] = g(op, y)
    for op in ("log", "log1p", "sqrt", "log2", "log10"):
        outs[op] = g(op, pos)
    for op in ("tan", "arcsin", "arccos", "arctanh", "arctan", "sinh", "cosh", "arcsinh", "exp2",
               "positive"):  # fmt: skip
        outs[op] = g(op, unit)
    outs["arccosh"] = g("arccosh", above1)
    if dtype == np.float32:  # its only dtype (kernels.casts' test checks its bits)
        outs["bfloat16_rounded"] = g("bfloat16_rounded", y)
    for op in ("arctan2", "hypot", "remainder", "fmod"):
        outs[op] = g(op, y, pos)
    outs["pow"] = g("pow", pos, y)
    for exponent in (0.5, 2.0, 3.0):  # constant exponents (simplify makes products of most)
        base = y if exponent > 1 else pos
        outs[f"pow by {exponent}"] = g("pow", base, g.const(exponent, dtype))
    for op in ("add", "sub", "mul", "div", "maximum", "minimum", "less", "less_equal",
               "greater", "greater_equal", "equal", "not_equal", "tanh_grad",
               "sigmoid_grad"):  # fmt: skip
        outs[op] = g(op, y, z)
    outs["where"] = g("where", cond, y, z)
    outs["astype"] = g("astype", y, dtype=np.dtype(np.int32))
    iy, iz = (g("astype", v, dtype=np.dtype(np.int64)) for v in (y, z))  # -9..9
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        outs[op] = g(op, iy, iz)
    outs["bitwise_not"] = g("bitwise_not", iy)
    count = g("bitwise_and", iz, g.const(7, np.int64))  # a shift by 0..7
    for op in ("bitwise_left_shift", "bitwise_right_shift"):
        outs[op] = g(op, iy, count)
    rng = np.random.default_rng(0)
    yv = (rng.standard_normal((37, 29)) * 3).astype(dtype)
    zv = np.where(rng.random((37, 29)) < 0.3, yv, rng.standard_normal((37, 29))).astype(dtype)
    arrays = [rng.uniform(0.1, 4, (37, 29)).astype(dtype), yv, zv, rng.random((37, 29)) < 0.5,
              rng.uniform(-0.9, 0.9, (37, 29)).astype(dtype),
              rng.uniform(1.1, 4, (37, 29)).astype(dtype)]  # fmt: skip
    return g, outs, arrays


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_elementwise_primitive(dtype):
    g, outs, arrays = all_primitives(dtype)
    ops = [op for op in ELEMENTWISE if op != "bfloat16_rounded" or dtype == np.float32]
    assert sorted({n.op for n in g.nodes}) == ops, "a new primitive needs a case here"
    got, want = g.run(list(outs.values()), arrays)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    for op, a, b in zip(outs, got, want, strict=True):
        assert a.dtype == b.dtype, op
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=op)
        else:
            np.testing.assert_array_equal(a, b, err_msg=op)
    if dtype == np.float64:  # exact math.*, not the float32 approximations: within 2 ulp
        for op in ("exp", "log", "tanh", "erf"):
            np.testing.assert_allclose(got[list(outs).index(op)], want[list(outs).index(op)],
                                       rtol=5e-16, atol=0, err_msg=op)  # fmt: skip


def test_nan_propagates_through_maximum_from_either_side():
    g, outs, arrays = all_primitives(np.float32)
    arrays[1][0, 0] = arrays[2][0, 1] = np.nan
    with np.errstate(invalid="ignore"):  # astype(int32) of nan, also in the group
        got, want = g.run(list(outs.values()), arrays)
    for op in ("maximum", "minimum"):
        a, b = got[list(outs).index(op)], want[list(outs).index(op)]
        assert np.isnan(a[0, :2]).all()
        np.testing.assert_array_equal(a, b)


# --- wiring, broadcasting and reductions ------------------------------------------------------


def gelu_with_everything(m, n, scale=0.5):
    """x * bias-row + column + a scalar input + a graph constant, through tanh-GELU, with every
    reduction form: columns, rows (keepdims), all, and max/min."""
    g = Group()
    shapes = [(m, n), (n,), (1, n), (m, 1), ()]
    x, row, row2, col, s = (g.input(shape) for shape in shapes)
    y = g("sub", g("add", g("mul", x, row), col), g("mul", row2, s))
    cube = g("pow", y, g.const(3.0))
    inner = g("mul", g.const(0.7978846), g("add", y, g("mul", g.const(0.044715), cube)))
    h = g("mul", g("mul", g.const(scale), y), g("add", g.const(1.0), g("tanh", inner)))
    outputs = [
        h,
        g("sum", h, axis=(0,), keepdims=False),
        g("sum", h, axis=(1,), keepdims=True),
        g("sum", h, axis=(0, 1), keepdims=False),
        g("max", h, axis=(1,), keepdims=False),
        g("min", h, axis=(0,), keepdims=True),
    ]
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    return g, outputs, arrays


@pytest.mark.parametrize("m, n", [(1101, 257), (3, 5), (1, 40)])
def test_broadcasts_and_reductions(m, n):
    """(1101, 257) runs in parallel, in two chunks of 550 and 551 rows on two threads; the
    others on one thread."""
    g, outputs, arrays = gelu_with_everything(m, n)
    kernel = compile_group(g.inputs, g.nodes, outputs)
    assert kernel.structure.parallel == (m * n >= fused.PARALLEL_MIN)
    if kernel.structure.parallel:
        assert kernel.chunks == min(2, numba.get_num_threads())
    got, want = g.run(outputs, arrays)
    h = np.abs(want[0]).astype(np.float64)
    scales = [h, h.sum(0), h.sum(1, keepdims=True), h.sum(), 1, 1]
    for k, (a, b, scale) in enumerate(zip(got, want, scales, strict=True)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=np.max(scale) * 1e-6, err_msg=str(k))


@pytest.mark.parametrize("shape", [(256, 32, 28, 28), (2, 3, 5, 4)])
def test_a_channel_bias_and_relu_over_nchw_is_one_3d_kernel(shape):
    """(N, C, H, W) + (C, 1, 1), then max(0, .): three canonical axes (N, C, H * W)."""
    g = Group()
    x, b = g.input(shape), g.input((shape[1], 1, 1))
    outputs = [g("maximum", g.const(0.0), g("add", x, b))]
    kernel = compile_group(g.inputs, g.nodes, outputs)
    assert kernel.structure.ndim == 3
    assert kernel.structure.parallel == (math.prod(shape) >= fused.PARALLEL_MIN)
    rng = np.random.default_rng(3)
    got, want = g.run(outputs, [rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("shape", [(64, 32, 20, 20), (2, 3, 5, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_channels_statistics_over_nchw_fold_around_the_channel_axis(shape, dtype):
    """A batch norm's sums over (0, 2, 3) of (N, C, H, W) with a channel's mean subtracted,
    and a maximum with a NaN in one channel: three canonical axes, folded over the outer and
    inner into one number per channel (and over everything), beside the elementwise result."""
    g = Group()
    x, mean = g.input(shape, dtype), g.input((shape[1], 1, 1), dtype)
    d = g("sub", x, mean)
    outputs = [
        d,
        g("sum", g("mul", d, d), axis=(0, 2, 3), keepdims=True),
        g("max", d, axis=(0, 2, 3), keepdims=False),
        g("sum", d, axis=(0, 1, 2, 3), keepdims=False),
    ]
    kernel = compile_group(g.inputs, g.nodes, outputs)
    assert kernel.structure.ndim == 3
    assert kernel.structure.parallel == (math.prod(shape) >= fused.PARALLEL_MIN)
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(v.shape).astype(dtype) for v in g.inputs]
    arrays[0][1, 2, 3, 1] = np.nan
    got, want = g.run(outputs, arrays)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[2], want[2])
    assert np.isnan(got[2][2]) and np.isnan(got[3])
    scale = (want[0].astype(np.float64) ** 2).sum((0, 2, 3), keepdims=True)
    tolerance = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got[1], want[1], rtol=tolerance, atol=np.nanmax(scale) * tolerance)


@pytest.mark.parametrize("shape", [(64, 32, 16, 16), (2, 3, 5, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_squeeze_and_excitation_pools_each_cell_over_nchw(shape, dtype):
    """A channel's scale, a sample's channel gate and SiLU over (N, C, H, W), and their sums and
    maxima over (2, 3) per sample and channel (keeping the axes or not): three canonical axes,
    each (N, C) cell folded over the inner one, beside the elementwise result."""
    g = Group()
    n, c = shape[:2]
    x, scale, gate = g.input(shape, dtype), g.input((c, 1, 1), dtype), g.input((n, c, 1, 1), dtype)
    y = g("mul", g("mul", x, scale), gate)
    outputs = [
        g("mul", y, g("sigmoid", y)),
        g("sum", g("mul", y, x), axis=(2, 3), keepdims=True),
        g("max", y, axis=(2, 3), keepdims=False),
    ]
    kernel = compile_group(g.inputs, g.nodes, outputs)
    assert kernel.structure.ndim == 3
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(v.shape).astype(dtype) for v in g.inputs]
    arrays[0][1, 2, 3, 1] = np.nan
    got, want = g.run(outputs, arrays)
    tolerance = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got[0], want[0], rtol=tolerance, atol=tolerance)
    np.testing.assert_array_equal(got[2], want[2])
    assert np.isnan(got[1][1, 2, 0, 0]) and np.isnan(got[2][1, 2])
    size = math.prod(shape[2:])
    np.testing.assert_allclose(got[1], want[1], rtol=tolerance, atol=size * tolerance)


def test_reductions_of_inputs_and_integers_in_one_dimension():
    """Full-size operands only: the domain collapses to 1-D. Sums of a bool and of an input."""
    g = Group()
    a, b = g.input((50, 1000), np.float64), g.input((50, 1000), np.float64)
    big = g("greater", a, b)
    outputs = [
        g("sum", big, axis=(0, 1), keepdims=False),
        g("sum", a, axis=(0, 1), keepdims=True),
        g("max", g("mul", a, b), axis=(0, 1), keepdims=False),
    ]
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((50, 1000)), rng.standard_normal((50, 1000))]
    got, want = g.run(outputs, arrays)
    assert got[0].dtype == np.int64 and got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    assert got[2] == want[2]


def test_noncontiguous_and_mistyped_inputs_and_outputs():
    g, outputs, arrays = gelu_with_everything(40, 30)
    kernel = compile_group(g.inputs, g.nodes, outputs)
    want = evaluate(Graph(g.inputs, g.nodes, outputs), arrays)
    arrays[0] = np.asfortranarray(arrays[0])
    arrays[4] = arrays[4].astype(np.float64)  # a float64 0-d array for a float32 scalar: cast
    got = [np.empty(v.shape, np.float32) for v in outputs]
    kernel(*arrays, *got)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6, atol=1e-6)
    got[0] = np.empty((30, 40), np.float32).T  # a reused buffer of any layout: copied into
    kernel(*arrays, *got)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6, atol=1e-6)


def test_the_plans_launch_binds_the_layout_and_falls_back_to_the_careful_call():
    """`kernel.launch` (what a plan calls) computes what `kernel(...)` does for every argument
    `kernel` takes: arrays as the signature takes them go straight to the compiled function
    (reshaped to the one canonical axis), others through the careful call; an output it
    cannot write through is computed apart and copied in, never written into a reshaped copy
    that is then lost. After one fallback,
    a launch takes the careful call at once (Numba's error is slow), still right."""
    g, (y, total) = scaled_sum((6, 5), 0.5)
    launch = compile_group(g.inputs, g.nodes, [y, total]).launch  # each time a new launcher
    x = np.arange(30, dtype=np.float32).reshape(6, 5)
    readonly = x.copy()
    readonly.flags.writeable = False
    for given in (x, np.asfortranarray(x), readonly, x.astype(np.float64), x.tolist(), x):
        for kernel in (launch, compile_group(g.inputs, g.nodes, [y, total]).launch):
            got = np.full((6, 5), -7, np.float32), np.full((), -7, np.float32)
            kernel(given, *got)
            np.testing.assert_array_equal(got[0], x * np.float32(0.5))
            assert got[1] == np.sum(x * np.float32(0.5), dtype=np.float64)
    for strided in (np.empty((5, 6), np.float32).T, np.empty((6, 10), np.float32)[:, ::2]):
        total_out = np.empty((), np.float32)
        compile_group(g.inputs, g.nodes, [y, total]).launch(x, strided, total_out)
        np.testing.assert_array_equal(strided, x * np.float32(0.5))  # computed apart, copied in


def test_bfloat16_arrays_load_and_store_as_bits_in_one_kernel():
    """A bfloat16 op as a plan has it: both operands cast to float32, the op, the result
    rounded back, in one kernel that loads and stores bfloat16's bits (NaN, infinities, ties
    and subnormals among them), through the careful call and the plan's launch alike; the bits
    are the NumPy reference's. A cast from float64 to bfloat16 stays NumPy's (through float32
    it would round twice)."""
    from tracegrad.core.bfloat16 import BFLOAT16, to_bfloat16

    g = Group()
    a, b = g.input((37, 29), BFLOAT16), g.input((37, 29), BFLOAT16)
    total = g("add", g("astype", a, dtype=np.dtype(np.float32)),
              g("astype", b, dtype=np.dtype(np.float32)))  # fmt: skip
    wide = g("mul", total, g.const(1.5))
    out = g("astype", wide, dtype=BFLOAT16)
    rng = np.random.default_rng(0)
    values = rng.standard_normal((2, 37, 29)) * 10.0 ** rng.integers(-40, 38, (2, 37, 29))
    values[0, 0, :6] = [np.nan, np.inf, -np.inf, 1.00390625, -0.0, 1e-40]
    arrays = [to_bfloat16(v.astype(np.float32)) for v in values]
    got, want = g.run([out, wide], arrays)
    assert got[0].dtype == BFLOAT16
    np.testing.assert_array_equal(got[0].view(np.uint16), want[0].view(np.uint16))
    np.testing.assert_array_equal(got[1], want[1])
    launched = np.zeros((37, 29), BFLOAT16), np.zeros((37, 29), np.float32)
    compile_group(g.inputs, g.nodes, [out, wide]).launch(*arrays, *launched)
    np.testing.assert_array_equal(launched[0].view(np.uint16), want[0].view(np.uint16))
    h = Group()
    narrowed = h("astype", h.input((4,), np.float64), dtype=BFLOAT16)
    with pytest.raises(NotImplementedError, match="astype of float64"):
        compile_group(h.inputs, h.nodes, [narrowed])


# --- the cache key --------------------------------------------------------------------------


def scaled_sum(shape, scale, dtype=np.float32):
    g = Group()
    x = g.input(shape, dtype)
    y = g("mul", x, g.const(scale, dtype))
    return g, [y, g("sum", y, axis=tuple(range(len(shape))), keepdims=False)]


def test_groups_differing_in_sizes_and_constants_share_one_kernel():
    small, outs_small = scaled_sum((1000,), 0.5)
    big, outs_big = scaled_sum((7, 13, 11), -2.0)  # 3-D, but every operand spans it: 1-D
    k1 = compile_group(small.inputs, small.nodes, outs_small)
    k2 = compile_group(big.inputs, big.nodes, outs_big)
    assert k1.key == k2.key and k1.compiled is k2.compiled
    for g, outs in ((small, outs_small), (big, outs_big)):
        x = np.random.default_rng(3).standard_normal(g.inputs[0].shape).astype(np.float32)
        got, want = g.run(outs, [x])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5)


def key_of(g: Group, outputs) -> str:
    return structure_key(analyze(g.inputs, g.nodes, outputs)[0])


def test_key_tells_apart_what_the_code_depends_on():
    base = key_of(*scaled_sum((10, 4), 1.0))
    assert key_of(*scaled_sum((3, 9), 7.0)) == base
    assert key_of(*scaled_sum((10, 4), 1.0, np.float64)) != base
    g, outs = scaled_sum((10, 4), 1.0)
    g.nodes.pop()  # the sum
    assert key_of(g, outs[:1]) != base
    row_sum = g("sum", outs[0], axis=(1,), keepdims=False)
    assert key_of(g, [outs[0], row_sum]) != base
    g2 = Group()
    x, b = g2.input((10, 4)), g2.input((4,))
    assert key_of(g2, [g2("add", x, b)]) != key_of(g2, [g2("add", b, x)])


@pytest.mark.parametrize(
    "build",
    [
        lambda g: [
            g("sum", g("add", g.input((2, 3, 4)), g.input((3, 1))), axis=(0,), keepdims=False)
        ],  # three canonical axes and a reduction over the outer one
        lambda g: [g("add", g.input((2, 3, 4, 5)), g.input((3, 1, 5)))],  # four canonical axes
        lambda g: [g("matmul", g.input((2, 3)), g.input((3, 2)))],  # not elementwise
        lambda g: [g("add", (s := g("sum", g.input((4, 5)), axis=(0,), keepdims=True)), s)],
        lambda g: [g("add", g.input((4, 5)), g.input((5,))), g("mul", g.input((5,)), g.const(2.0))],
    ],
    ids=["3-D reduction", "4-D", "matmul", "columns read again", "output smaller than the group"],
)
def test_unsupported_patterns_raise_not_implemented(build):
    g = Group()
    outputs = build(g)
    with pytest.raises(NotImplementedError):
        compile_group(g.inputs, g.nodes, outputs)


# --- on disk ------------------------------------------------------------------------------------


def test_cache_directory_is_private(tmp_path, monkeypatch):
    fresh = tmp_path / "a" / "kernels"
    cache.KernelCache(fresh)
    assert fresh.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    cache.KernelCache(loose)
    assert loose.stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv(cache.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "tracegrad" / "kernels"


def distinct_groups(count: int):
    """`count` groups with distinct kernels: one unary op each."""
    for op in ["exp", "tanh", "log", "neg", "abs", "sqrt"][:count]:
        g = Group()
        y = g(op, g.input((64, 3), np.float32))
        yield g, [y]


@pytest.mark.parametrize("helper", ["works", "fails"])
@pytest.mark.parametrize("background", [False, True])
def test_new_kernels_compile_in_a_child_process_too(tmp_path, monkeypatch, helper, background):
    """Four new kernels: a child compiles two into Numba's disk cache while this process
    compiles the others, or (from a background thread) children compile all four, one child
    per core; a child that cannot start or dies leaves its kernels to this process."""
    monkeypatch.setattr(cache, "HELPER_MIN_S", 0.5)
    monkeypatch.setattr(cache.os, "cpu_count", lambda: 2)
    spawned, children = [], []
    real = cache.KernelCache._compile_in_child

    def spy(self, names):
        spawned.extend(names)
        if helper == "fails":
            monkeypatch.setattr(cache.sys, "executable", "/bin/false")
        children.append(real(self, names))
        return children[-1]

    monkeypatch.setattr(cache.KernelCache, "_compile_in_child", spy)
    kc = cache.KernelCache(tmp_path / "k")
    groups = list(distinct_groups(4))
    bodies = [(g.inputs, g.nodes, o) for g, o in groups]
    kernels = fused.compile_groups(bodies, cache=kc, background=background)
    assert len(spawned) == (4 if background else 2) and len(children) == (2 if background else 1)
    assert all((c.returncode == 0) == (helper == "works") for c in children)
    cached = [bool(kc._numba_files(n, ".nbi")) for n in spawned]
    assert all(cached)  # written by the children, or by this process after they failed
    for (g, outs), (ok, kernel) in zip(groups, kernels, strict=True):
        assert ok
        x = np.random.default_rng(0).uniform(0.5, 2.0, (64, 3)).astype(np.float32)
        got = np.empty((64, 3), np.float32)
        kernel(x, got)
        np.testing.assert_allclose(got, evaluate(Graph(g.inputs, g.nodes, outs), [x])[0], rtol=1e-5)


def test_a_mid_sized_elementwise_group_shares_its_work_only_while_the_team_is_awake(monkeypatch):
    """Below PARALLEL_MIN elements, a group without partial sums compiles for both: on all
    threads when the last parallel call has just returned (the team still spins), else on the
    calling thread, which leaves the team asleep. Its results are the same bits either way; a
    group with a sum over everything (partials per chunk) stays on one thread."""
    monkeypatch.setattr(team, "WINDOW", 60.0)  # "just returned", however slow this machine is
    g = Group()
    x, y = g.input((64, 300)), g.input((64, 300))
    outputs = [g("mul", g("tanh", x), y)]
    assert 64 * 300 < fused.PARALLEL_MIN and 64 * 300 * 2 >= fused.AWAKE_MIN  # two nodes
    kernel = compile_group(g.inputs, g.nodes, outputs)
    threads = numba.get_num_threads() > 1
    assert kernel.structure.parallel == kernel.when_awake == threads
    if threads:
        assert "    if chunks == 1:" in kernel.source and "in prange(chunks)" in kernel.source
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs]
    asleep, awake = np.empty((64, 300), np.float32), np.empty((64, 300), np.float32)
    team.last[0] = -1e9  # long ago
    kernel.launch(*arrays, asleep)
    assert team.last[0] == -1e9
    team.finished()
    before = team.last[0]
    kernel.launch(*arrays, awake)
    assert (team.last[0] > before) == threads
    np.testing.assert_array_equal(asleep, awake)
    np.testing.assert_allclose(awake, np.tanh(arrays[0]) * arrays[1], rtol=1e-6, atol=1e-6)
    total = [g("sum", outputs[0], axis=(0, 1), keepdims=False)]
    assert not compile_group(g.inputs, g.nodes, total).structure.parallel


def test_the_awake_window_follows_the_users_wait_policy(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert team._window() == pytest.approx(25e-6)
    monkeypatch.setenv("GOMP_SPINCOUNT", "300")
    assert team._window() == pytest.approx(2.5e-6)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert team._window() == 0.0


def test_one_thread_compiles_serial_kernels(monkeypatch):
    g, outputs, _ = gelu_with_everything(1101, 257)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    assert not analyze(g.inputs, g.nodes, outputs)[0].parallel


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs chown")
def test_someone_elses_directory_is_not_used(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.warns(RuntimeWarning, match="another user"):
        assert cache.KernelCache(theirs).directory != theirs


_CHILD = """
import numpy as np
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node, Value
from tracegrad.compiler.kernels import compile_group
x = Value({shape}, np.float32)
c = Value((), np.float32, const=np.array(0.5, np.float32))
y = Value({shape}, np.float32)
s = Value((), np.float32)
nodes = [Node(P.mul, [x, c], [y]), Node(P.sum, [y], [s], dict(axis={axes}, keepdims=False))]
kernel = compile_group([x], nodes, [y, s])
out = [np.empty({shape}, np.float32), np.empty((), np.float32)]
kernel(np.ones({shape}, np.float32), *out)
assert out[1] == 0.5 * np.prod({shape}), out[1]
"""


def run_child(shape, cache_dir) -> tuple[bool, bool]:
    """Whether a new process compiling `scaled_sum`'s structure (loaded, saved) the kernel's
    machine code from or to Numba's cache, as Numba's cache debug log tells."""
    code = _CHILD.format(shape=shape, axes=tuple(range(len(shape))))
    env = dict(os.environ, NUMBA_DEBUG_CACHE="1", **{cache.ENV_VAR: str(cache_dir)})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    ours = [line for line in out.stdout.splitlines() if "tracegrad_kernel_" in line]
    return any("data loaded" in x for x in ours), any("data saved" in x for x in ours)


@pytest.mark.slow
def test_a_new_process_loads_kernels_from_disk(kernel_cache):
    g, outs = scaled_sum((1000,), 0.5)
    compile_group(g.inputs, g.nodes, outs)  # written to the test run's cache (if not yet)
    assert run_child((64, 8), kernel_cache) == (True, False)


def copy_kernel(key: str, source: Path, target: Path) -> None:
    """Copy a kernel's file and Numba's machine code for it (kept next to it, in __pycache__)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        pytest.skip("NUMBA_CACHE_DIR is set: Numba keeps its cache there, not next to the file")
    target.mkdir(mode=0o700, exist_ok=True)
    (target / "__pycache__").mkdir(exist_ok=True)
    for path in source.glob(f"*{key}*"):
        shutil.copy2(path, target / path.name)
    for path in (source / "__pycache__").glob(f"*{key}*"):
        shutil.copy2(path, target / "__pycache__" / path.name)


@pytest.mark.slow
def test_corrupt_cache_entries_are_rebuilt(kernel_cache, tmp_path):
    g, outs = scaled_sum((1000,), 0.5)
    key = compile_group(g.inputs, g.nodes, outs).key
    copy_kernel(key, kernel_cache, tmp_path)
    source = next(tmp_path.glob(f"*{key}.py"))
    good = source.read_text()
    source.write_text("this is not python (")
    assert run_child((5,), tmp_path) == (True, False)  # the file is rewritten; the code still fits
    assert source.read_text() == good
    for path in (tmp_path / "__pycache__").iterdir():
        path.write_bytes(path.read_bytes()[:40])  # truncated index and code
    assert run_child((5,), tmp_path) == (False, True)  # compiled afresh
    assert run_child((5,), tmp_path) == (True, False)  # and cached again


def test_generated_source_is_readable_python():
    g, outs = scaled_sum((1000,), 0.5)
    kernel = compile_group(g.inputs, g.nodes, outs)
    text = kernel.source
    compile(text, str(kernel.path), "exec")
    assert "parallel=False" in text and "prange" not in text.split("def kernel")[1]
    assert "cache=True" in text
    assert "0.5" not in text  # constants are arguments, not literals
    g, outputs, _ = gelu_with_everything(1101, 257)
    text = compile_group(g.inputs, g.nodes, outputs).source
    assert "parallel=True" in text and "for c in prange(chunks):" in text
    # the helpers the group's ops name in the op table, and nothing else
    assert "from tracegrad.compiler.kernels.scalar import maximum, minimum, tanh\n" in text


def test_kernels_of_simplified_groups_multiply_instead_of_calling_powf():
    """simplify rewrites x ** 3 into products (the eager impl computes the same products), so a
    kernel of a simplified group has no `**`, which would keep its loop scalar."""
    g, outputs, _ = gelu_with_everything(1101, 257)
    graph, _ = passes.simplify(Graph(g.inputs, g.nodes, outputs))
    assert "pow" not in {n.op for n in graph.nodes}
    text = compile_group(graph.inputs, graph.nodes, graph.outputs).source
    assert "**" not in text and "(v" in text


def test_a_result_may_overwrite_the_input_it_is_computed_from():
    """The memory plan writes a fused group's result into a dying input of its shape, also when
    the group reduces: one pass reads each element before it writes the result's there."""
    g, outputs, arrays = gelu_with_everything(1101, 257)
    kernel = compile_group(g.inputs, g.nodes, outputs)
    want = evaluate(Graph(g.inputs, g.nodes, outputs), arrays)
    x = arrays[0].copy()
    got = [x] + [np.full(v.shape, -7, v.dtype) for v in outputs[1:]]
    kernel(x, *arrays[1:], *got)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


_NAMES = """
from tracegrad.compiler.kernels import attention, cache, normalization
for gen, extra in ((attention, ("int64",)), (normalization, ())):  # BLAS's integers, if any
    for op in sorted(set(gen.OPS.values())):
        for dtype in gen.DTYPES:
            print(cache.named(gen.__name__, gen.generate_source(op, dtype, *extra))[0])
"""


def test_generated_module_names_do_not_depend_on_string_hashing():
    """A module's name is its text's hash: text that followed a process's string hashing (a
    set's repr) made every process write and compile its kernels afresh."""
    names = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", _NAMES], env=env, capture_output=True,
                             text=True)  # fmt: skip
        assert out.returncode == 0, out.stderr
        names.append(out.stdout.split())
    assert len(names[0]) == 14 and names[0] == names[1]


def test_a_node_of_row_and_scalar_operands_is_computed_once_a_row():
    """log-softmax's last step, x - log(sum), and a scalar chain: log(s) is computed per row
    (before the loop over the columns) and exp(c) once, before every loop; the results are
    NumPy's."""
    g = Group()
    x, s, c = g.input((9, 37)), g.input((9, 1)), g.input(())
    shifted = g("sub", x, g("log", s))
    scaled = g("mul", shifted, g("exp", c))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((9, 37)).astype(np.float32),
              rng.uniform(1, 5, (9, 1)).astype(np.float32), np.float32(0.5)]  # fmt: skip
    got, want = g.run([shifted, scaled], arrays)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    source = compile_group(g.inputs, g.nodes, [shifted, scaled]).source
    lines = [line.strip() for line in source.split("def kernel")[1].splitlines()]
    at = {what: next(k for k, line in enumerate(lines) if what in line)
          for what in ("log(", "exp(", "for c in", "for col in")}  # fmt: skip
    assert at["exp("] < at["for c in"] < at["log("] < at["for col in"]


def softmax_family(m: int, n: int):
    """A row's max read again (log-softmax, softmax, with the bias add before them), a row sum
    read again, a per-row result stored once a row, and a column sum of the last stage."""
    g = Group()
    x, b = g.input((m, n)), g.input((n,))
    z = g("add", x, b)
    top = g("max", z, axis=(1,), keepdims=True)
    e = g("exp", g("sub", z, top))
    total = g("sum", e, axis=(1,), keepdims=True)
    lse = g("add", g("log", total), top)
    logp = g("sub", z, lse)
    p = g("div", e, total)
    cols = g("sum", p, axis=(0,), keepdims=False)
    rng = np.random.default_rng(5)
    arrays = [(rng.standard_normal((m, n)) * 4).astype(np.float32),
              rng.standard_normal(n).astype(np.float32)]  # fmt: skip
    arrays[0][m // 2, n // 2] = np.nan  # the max folds apart from its NaN check: NaN all the same
    return g, [logp, p, lse, total, top, cols], arrays


@pytest.mark.parametrize("m, n", [(700, 1000), (3, 5), (1, 40)])
def test_row_reductions_read_again_sweep_each_row_once_a_stage(m, n):
    """(700, 1000) runs in parallel; each row is swept three times (the max; the exps and their
    sum; the outputs), and the results are NumPy's (a row with a NaN too), also when the first
    output takes the input's buffer (only the last sweep reads it and writes there)."""
    g, outputs, arrays = softmax_family(m, n)
    kernel = compile_group(g.inputs, g.nodes, outputs)
    assert kernel.structure.ndim == 2 and len(kernel.structure.folds) == 2
    assert kernel.source.split("def kernel")[1].count("j = np.uint64(col)") == 3
    want = evaluate(Graph(g.inputs, g.nodes, outputs), arrays)
    for in_place in (False, True):
        x = arrays[0].copy()
        got = [x if in_place else np.full((m, n), -7, np.float32)]
        got += [np.full(v.shape, -7, v.dtype) for v in outputs[1:]]
        kernel(x, arrays[1], *got)
        for k, (a, w) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5 * n, err_msg=str(k))


def test_a_value_read_again_in_a_later_sweep_has_the_same_bits():
    """The gradient of a row's max: y == max(y) must hold somewhere in every row, so the sweep
    that compares reads y as the sweep that took the max computed it (from a row of scratch),
    never computed again (contractions into FMAs may differ between loops)."""
    g = Group()
    x = g.input((64, 37))
    y = g("pow", g("add", g("mul", g("tanh", x), g("tanh", x)), g.const(0.5)), g.const(1.5))
    top = g("max", y, axis=(1,), keepdims=True)
    hits = g("sum", g("astype", g("equal", y, top), dtype=np.dtype(np.float32)), axis=(1,),
             keepdims=True)  # fmt: skip
    kernel = compile_group(g.inputs, g.nodes, [hits])
    assert "row" in kernel.source.split("def kernel")[1].split("for row")[0]  # the scratch
    x0 = np.random.default_rng(0).standard_normal((64, 37)).astype(np.float32)
    got, _ = g.run([hits], [x0])
    assert (got[0] >= 1).all()

"""Property-based differential testing: random programs over the op table's ops, on random
shapes (broadcasting, axes of size 0 and 1, non-contiguous inputs) and dtypes.

- Eager gradients against float64 central finite differences.
- Traced (NumPy and Numba backends; some groups of >= 2^16 elements, so kernels compile)
  against eager: results, input gradients, and raising the same error.

Layers (convolution, pooling, normalization, attention, embedding, losses with their options)
get the same two checks; random draws (dropout, randn, rand, randint, randperm, normal_,
bernoulli, multinomial) in traced steps must give eager's numbers for the same seed, call after
call.

The default profile ("ci") runs in a few minutes; `HYPOTHESIS_PROFILE=long` runs 20,000
examples per test (`HYPOTHESIS_EXAMPLES=N`: N instead), most of the time in Numba compiling
kernels for structures it has not cached yet.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tests.conftest import numeric_grad
from tracegrad.compiler import lowering

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile(  # HYPOTHESIS_EXAMPLES: a shorter long run, to time one
    "long",
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", 20_000)),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Each op keeps every value broadcastable against the program's base shape (reductions keep
# their axes), and is smooth where random inputs land (no ties fed to max, no log of <= 0).
UNARY = {
    "tanh": tg.tanh,
    "sigmoid": tg.sigmoid,
    # sin and cos of an argument in [-3, 3]: of a large one (a cube of a power, ~1e3) they turn
    # the argument's float32 rounding (an ulp, 6e-5 at 735, where a kernel's power may differ
    # from NumPy's) into the same absolute error in the result, beyond any fixed tolerance
    "sin": lambda v: tg.sin(3.0 * tg.tanh(v)),
    "cos": lambda v: tg.cos(3.0 * tg.tanh(v)),
    "softplus": tg.softplus,
    "erf": tg.erf,
    "exp_tanh": lambda v: tg.exp(tg.tanh(v)),
    "log1p_sq": lambda v: tg.log1p(v * v),
    "sqrt": lambda v: tg.sqrt(v * v + 1.0),
    "pow": lambda v: (v * v + 0.5) ** 1.5,
    "cube": lambda v: v**3,
    "neg": lambda v: -v,
    "scale": lambda v: v * 0.5 - 1.0,
    "reverse": lambda v: v[..., ::-1] if v.ndim else v,  # a strided view
    "reshape": lambda v: tg.reshape(tg.reshape(v, (-1,)), v.shape),
    "sum": lambda v: tg.sum(v, axis=-1, keepdims=True) if v.ndim else v,
    "mean": lambda v: tg.mean(v, axis=0, keepdims=True) if v.ndim else v,
    "max": lambda v: tg.amax(v, dim=-1, keepdim=True) if v.ndim else v,
    "logsumexp": lambda v: tg.logsumexp(v, dim=-1, keepdim=True) if v.ndim else v,
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (1.5 + tg.tanh(b)),
    # offsets keep operands that are nearly equal by construction (x and tanh(x) near 0) off
    # the kinks: there, float32 kernels (within an ulp or two of NumPy) may pick the other side.
    # They are 0.1, 0.1 sqrt(2) and 0.1 sqrt(3), so that no chain of them cancels: with equal
    # offsets, where(x > minimum(y, x) + offsets) compared x with x +- rounding
    "maximum": lambda a, b: tg.maximum(a, b + 0.1),
    "minimum": lambda a, b: tg.minimum(a, b - 0.1414213562373095),
    "where": lambda a, b: tg.where(a > b + 0.17320508075688773, a, b * 2.0),
}


@dataclass(frozen=True)
class Program:
    """Inputs' shapes (and which are passed as non-contiguous views), then steps: (op, operand
    indices) over the pool of inputs and earlier results; the output is the last result."""

    base: tuple[int, ...]
    inputs: tuple[tuple[int, ...], ...]
    strided: tuple[bool, ...]
    steps: tuple[tuple[str, tuple[int, ...]], ...]
    weight_dim: int  # a matmul by a fixed (d, d) weight is one of the steps' ops, "matmul"

    def run(self, xs: list[tg.Tensor], weight: tg.Tensor) -> tg.Tensor:
        pool = list(xs)
        for op, args in self.steps:
            operands = [pool[i] for i in args]
            if op == "matmul":
                pool.append(operands[0] @ weight)
            elif op in UNARY:
                pool.append(UNARY[op](operands[0]))
            else:
                pool.append(BINARY[op](*operands))
        return pool[-1]


@st.composite
def programs(draw, big: bool = False) -> Program:
    if big:  # >= 2^16 elements: the Numba backend compiles kernels for these groups
        base = draw(st.sampled_from([(256, 300), (2, 200, 200), (300, 256)]))
    else:
        base = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 4]), min_size=0, max_size=3)))
    n_inputs = draw(st.integers(1, 3))
    inputs = []
    for _ in range(n_inputs):
        lead = draw(st.integers(0, len(base)))  # dropped leading axes broadcast
        shape = tuple(d if draw(st.booleans()) else 1 for d in base[lead:])
        inputs.append(shape)
    inputs[0] = base  # one input spans the whole shape
    strided = tuple(draw(st.booleans()) and len(s) > 0 for s in inputs)
    steps = []
    for k in range(draw(st.integers(1, 5))):
        pool = n_inputs + k
        op = draw(st.sampled_from([*UNARY, *BINARY, "matmul"]))
        if op in BINARY:
            a = draw(st.integers(0, pool - 1))
            b = draw(st.integers(0, pool - 1).filter(lambda i, a=a: i != a or pool == 1))
            steps.append((op, (a, b)))
        else:
            steps.append((op, (draw(st.integers(0, pool - 1)),)))
    weight_dim = base[-1] if base else 1
    return Program(base, tuple(inputs), strided, tuple(steps), weight_dim)


def arrays_for(p: Program, dtype, seed: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xs = []
    for shape, strided in zip(p.inputs, p.strided, strict=True):
        a = rng.standard_normal(shape).astype(dtype)
        xs.append(np.ascontiguousarray(a[..., ::-1])[..., ::-1] if strided else a)
    weight = (rng.standard_normal((p.weight_dim, p.weight_dim)) / 2).astype(dtype)
    cotangent = rng.standard_normal(p.base).astype(dtype)
    return xs, weight, cotangent


def step_fn(p: Program, weight: np.ndarray, cotangent: np.ndarray):
    """The program with its gradient: (output, d(sum(out * c))/d input for each input)."""
    w = tg.tensor(weight)

    def step(*xs):
        gm = tg.GradManager().attach(list(xs))
        with gm:
            out = p.run(list(xs), w)
            out = tg.broadcast_to(out, cotangent.shape)
            gm.backward((out * tg.tensor(cotangent)).sum())
        return (out, *(tg.zeros_like(x) if x.grad is None else x.grad for x in xs))

    return step


def outcome(fn, *args):
    """The results as arrays, or the type of the error raised."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return [np.asarray(r.numpy()) for r in fn(*args)]
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:
        return type(e)


def tensors(arrays: list[np.ndarray]) -> list[tg.Tensor]:
    return [tg.tensor(a) for a in arrays]


@given(programs(), st.integers(0, 2**16))
def test_eager_gradients_match_finite_differences(p: Program, seed: int):
    assume(int(np.prod(p.base)) <= 24)  # finite differences cost two runs per element
    xs, weight, cotangent = arrays_for(p, np.float64, seed)
    step = step_fn(p, weight, cotangent)
    got = outcome(step, *tensors(xs))
    if isinstance(got, type):
        return  # the program is invalid for these shapes (a max over an empty axis): eager
        # raising is checked against traced below
    with np.errstate(all="ignore"):
        value = p.run(tensors(xs), tg.tensor(weight)).numpy()
    # where the program's value is not finite (a mean over an empty axis), the chain rule gives
    # 0 * nan = nan, as PyTorch and JAX do, while differences of a broadcast-away value give 0
    assume(np.all(np.isfinite(value)))
    for i, x in enumerate(xs):

        def loss(a: np.ndarray, i=i) -> float:
            args = tensors(xs)
            args[i] = tg.tensor(a)
            with np.errstate(all="ignore"):
                out = tg.broadcast_to(p.run(args, tg.tensor(weight)), cotangent.shape)
            return float(np.sum(out.numpy() * cotangent))

        want = numeric_grad(loss, x)
        # central differences lose |f| * 2e-16 / eps to rounding: huge values (nested powers)
        # leave small components of the gradient in that noise
        noise = 1e-8 * abs(loss(x))
        np.testing.assert_allclose(got[1 + i], want, rtol=1e-4, atol=1e-6 + noise,
                                   err_msg=f"input {i}")  # fmt: skip


def check_traced_matches_eager(p: Program, seed: int, dtype, backend: str) -> None:
    xs, weight, cotangent = arrays_for(p, dtype, seed)
    step = step_fn(p, weight, cotangent)
    want = outcome(step, *tensors(xs))
    got = outcome(tg.trace(step, backend=backend), *xs)  # ndarray arguments, maybe strided
    if isinstance(want, type) or isinstance(got, type):
        assert got == want
        return
    tol = 1e-4 if dtype == np.float32 else 1e-9
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True, err_msg=k)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@given(programs(), st.integers(0, 2**16), st.sampled_from([np.float32, np.float64]))
def test_traced_matches_eager(backend, p: Program, seed: int, dtype):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lowering, "KERNEL_MIN", 0)  # small groups compile too
        check_traced_matches_eager(p, seed, dtype, backend)


@settings(max_examples=max(4, settings().max_examples // 10))
@given(programs(big=True), st.integers(0, 2**16))
def test_traced_matches_eager_with_large_kernels(p: Program, seed: int):
    check_traced_matches_eager(p, seed, np.float32, "numba")


# --- layers: convolution, pooling, normalization, attention, embedding, losses, random draws ---

F = tg.nn.functional


@dataclass(frozen=True)
class Layer:
    """One library op with its options: `options` are (name, value) pairs; `build` turns it
    into a function over tensors and the arrays it runs on."""

    op: str
    options: tuple[tuple[str, object], ...]

    def __getitem__(self, key: str):
        return dict(self.options)[key]


def _conv_out(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


@st.composite
def layers(draw) -> Layer:
    op = draw(st.sampled_from(sorted(LAYER_DRAWS)))
    return Layer(op, tuple(LAYER_DRAWS[op](draw)))


def _draw_conv(draw):
    groups = draw(st.sampled_from([1, 2]))
    k, stride, dilation = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = draw(st.sampled_from([0, 1, "same"] if stride == 1 else [0, 1]))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    p = 0 if pad == "same" else pad
    assume(pad == "same" or min(_conv_out(h, k, stride, p, dilation),
                                _conv_out(w, k, stride, p, dilation)) >= 1)  # fmt: skip
    return [("n", draw(st.integers(1, 2))), ("cin", groups * draw(st.integers(1, 2))),
            ("cout", groups * draw(st.integers(1, 2))), ("groups", groups), ("k", k),
            ("stride", stride), ("pad", pad), ("dilation", dilation), ("hw", (h, w)),
            ("bias", draw(st.booleans()))]  # fmt: skip


def _draw_conv_transpose(draw):
    stride, k, dilation = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    pad = draw(st.integers(0, 1))
    extra = draw(st.integers(0, max(stride, dilation) - 1))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    assume(min((h - 1) * stride - 2 * pad + dilation * (k - 1) + extra + 1,
               (w - 1) * stride - 2 * pad + dilation * (k - 1) + extra + 1) >= 1)  # fmt: skip
    return [("n", draw(st.integers(1, 2))), ("cin", draw(st.integers(1, 3))),
            ("cout", draw(st.integers(1, 3))), ("k", k), ("stride", stride), ("pad", pad),
            ("extra", extra), ("dilation", dilation), ("hw", (h, w)),
            ("bias", draw(st.booleans()))]  # fmt: skip


def _draw_pool(draw):
    k = draw(st.integers(1, 3))
    stride = draw(st.sampled_from([None, 1, 2]))
    pad = draw(st.integers(0, k // 2))
    ceil = False  # ceil_mode: not supported (raises NotImplementedError)
    h, w = draw(st.integers(k, 6)), draw(st.integers(k, 6))
    return [("k", k), ("stride", stride), ("pad", pad), ("ceil", ceil), ("hw", (h, w)),
            ("count_include_pad", draw(st.booleans())),
            ("channels", draw(st.integers(1, 3)))]  # fmt: skip


def _draw_norm(draw):
    return [("shape", (draw(st.integers(2, 4)), draw(st.sampled_from([2, 4])),
                       draw(st.integers(1, 3)))),
            ("training", draw(st.booleans())), ("affine", draw(st.booleans()))]  # fmt: skip


def _draw_attention(draw):
    lq, lk = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    causal = draw(st.booleans())
    mask = "none" if causal else draw(st.sampled_from(["none", "bool", "float"]))
    return [("b", draw(st.integers(1, 2))), ("h", draw(st.integers(1, 2))), ("lq", lq),
            ("lk", lk), ("e", draw(st.integers(1, 4))), ("causal", causal),
            ("mask", mask)]  # fmt: skip


def _draw_embedding(draw):
    v = draw(st.integers(2, 6))
    return [("v", v), ("d", draw(st.integers(1, 3))), ("n", draw(st.integers(1, 5))),
            ("padding_idx", draw(st.sampled_from([None, 0, v - 1])))]  # fmt: skip


def _draw_classification(draw):
    c = draw(st.integers(2, 4))
    return [("n", draw(st.integers(1, 4))), ("c", c), ("extra", draw(st.sampled_from([(), (2,)]))),
            ("weight", draw(st.booleans())), ("ignore", draw(st.sampled_from([-100, 0, 1]))),
            ("smoothing", draw(st.sampled_from([0.0, 0.1]))),
            ("reduction", draw(st.sampled_from(["mean", "sum", "none"])))]  # fmt: skip


def _draw_regression(draw):
    return [("shape", tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))),
            ("loss", draw(st.sampled_from(["mse", "l1", "smooth_l1", "huber", "bce_logits"]))),
            ("beta", draw(st.sampled_from([0.5, 1.0, 2.0]))), ("weights", draw(st.booleans())),
            ("reduction", draw(st.sampled_from(["mean", "sum", "none"])))]  # fmt: skip


LAYER_DRAWS = {
    "conv2d": _draw_conv, "conv_transpose2d": _draw_conv_transpose, "max_pool2d": _draw_pool,
    "avg_pool2d": _draw_pool, "adaptive_avg_pool2d": _draw_pool, "batch_norm": _draw_norm,
    "layer_norm": _draw_norm, "group_norm": _draw_norm, "attention": _draw_attention,
    "embedding": _draw_embedding, "cross_entropy": _draw_classification,
    "nll_loss": _draw_classification, "regression": _draw_regression,
}  # fmt: skip


def build(layer: Layer, dtype, seed: int):
    """(fn over tensors, its arrays, which of them are differentiated)."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(dtype)

    op = layer.op
    if op == "conv2d":
        n, cin, cout, g, k = (layer[s] for s in ("n", "cin", "cout", "groups", "k"))
        arrays = [normal(n, cin, *layer["hw"]), normal(cout, cin // g, k, k) / k]
        arrays += [normal(cout)] if layer["bias"] else []
        fn = lambda x, w, b=None: F.conv2d(x, w, b, layer["stride"], layer["pad"],
                                           layer["dilation"], g)  # fmt: skip
        return fn, arrays, [True] * len(arrays)
    if op == "conv_transpose2d":
        n, cin, cout, k = (layer[s] for s in ("n", "cin", "cout", "k"))
        arrays = [normal(n, cin, *layer["hw"]), normal(cin, cout, k, k) / k]
        arrays += [normal(cout)] if layer["bias"] else []
        options = (layer["stride"], layer["pad"], layer["extra"], 1, layer["dilation"])
        fn = lambda x, w, b=None: F.conv_transpose2d(x, w, b, *options)
        return fn, arrays, [True] * len(arrays)
    if op in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"):
        x = normal(2, layer["channels"], *layer["hw"])
        if op == "max_pool2d":
            fn = lambda x: F.max_pool2d(x, layer["k"], layer["stride"], layer["pad"],
                                        ceil_mode=layer["ceil"])  # fmt: skip
        elif op == "avg_pool2d":
            fn = lambda x: F.avg_pool2d(x, layer["k"], layer["stride"], layer["pad"],
                                        layer["ceil"], layer["count_include_pad"])  # fmt: skip
        else:
            fn = lambda x: F.adaptive_avg_pool2d(x, (layer["k"], layer["hw"][1] - layer["pad"]))
        return fn, [x], [True]
    if op in ("batch_norm", "layer_norm", "group_norm"):
        n, c, h = layer["shape"]
        arrays = [normal(n, c, h) * 2 + 1]
        arrays += [normal(c) + 1.5, normal(c)] if layer["affine"] else []
        if op == "batch_norm":
            stats = [np.abs(normal(c)), np.abs(normal(c)) + 0.5]

            def fn(x, w=None, b=None):
                mean, var = (tg.tensor(s.copy()) for s in stats)  # fresh each call
                return F.batch_norm(x, mean, var, w, b, layer["training"], 0.1)
        elif op == "layer_norm":
            arrays[1:] = [normal(c, h) + 1.5, normal(c, h)] if layer["affine"] else []
            fn = lambda x, w=None, b=None: F.layer_norm(x, (c, h), w, b)
        else:
            fn = lambda x, w=None, b=None: F.group_norm(x, 2, w, b)
        return fn, arrays, [True] * len(arrays)
    if op == "attention":
        b, h, lq, lk, e = (layer[s] for s in ("b", "h", "lq", "lk", "e"))
        arrays = [normal(b, h, lq, e), normal(b, h, lk, e), normal(b, h, lk, e)]
        mask = None
        if layer["mask"] == "bool":
            mask = rng.random((lq, lk)) > 0.3
            mask[:, 0] = True
        elif layer["mask"] == "float":
            mask = normal(lq, lk)
        fn = lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, None if mask is None else tg.tensor(mask), is_causal=layer["causal"]
        )
        return fn, arrays, [True] * 3
    if op == "embedding":
        idx = rng.integers(0, layer["v"], layer["n"])
        fn = lambda i, w: F.embedding(i, w, layer["padding_idx"])
        return fn, [idx, normal(layer["v"], layer["d"])], [False, True]
    if op in ("cross_entropy", "nll_loss"):
        n, c, extra = layer["n"], layer["c"], layer["extra"]
        logits = normal(n, c, *extra) * 2
        labels = rng.integers(0, c, (n, *extra))
        weight = np.abs(normal(c)) + 0.5 if layer["weight"] else None
        options = dict(ignore_index=layer["ignore"], reduction=layer["reduction"])
        if op == "cross_entropy":
            options["label_smoothing"] = layer["smoothing"]
        loss = F.cross_entropy if op == "cross_entropy" else F.nll_loss
        inputs = (lambda x: x) if op == "cross_entropy" else (lambda x: F.log_softmax(x, 1))
        fn = lambda x, t: loss(inputs(x), t, None if weight is None else tg.tensor(weight),
                               **options)  # fmt: skip
        return fn, [logits, labels], [True, False]
    shape, kind = layer["shape"], layer["loss"]
    x, t = normal(*shape), normal(*shape)
    r = layer["reduction"]
    if kind == "bce_logits":
        t = rng.random(shape).astype(dtype)
        w = np.abs(normal(*shape[-1:])) + 0.5 if layer["weights"] else None
        fn = lambda x, t: F.binary_cross_entropy_with_logits(
            x,
            t,
            None if w is None else tg.tensor(w),
            reduction=r,
            pos_weight=None if w is None else tg.tensor(w * 2),
        )
    elif kind == "smooth_l1":
        fn = lambda x, t: F.smooth_l1_loss(x, t, reduction=r, beta=layer["beta"])
    elif kind == "huber":
        fn = lambda x, t: F.huber_loss(x, t, reduction=r, delta=layer["beta"])
    else:
        f = F.mse_loss if kind == "mse" else F.l1_loss
        fn = lambda x, t: f(x, t, reduction=r)
    return fn, [x, t], [True, True]


def layer_step(fn, arrays, differentiated, cotangent_seed: int):
    """fn with its gradient: (output, d(sum(out * c))/d each differentiated input)."""

    def step(*xs):
        attached = [x for x, d in zip(xs, differentiated, strict=True) if d]
        gm = tg.GradManager().attach(attached)
        with gm:
            out = fn(*xs)
            c = np.random.default_rng(cotangent_seed).standard_normal(out.shape)
            gm.backward((out * tg.tensor(c.astype(out.dtype))).sum())
        return (out, *(tg.zeros_like(x) if x.grad is None else x.grad for x in attached))

    return step


@given(layers(), st.integers(0, 2**16))
def test_layer_gradients_match_finite_differences(layer: Layer, seed: int):
    fn, arrays, differentiated = build(layer, np.float64, seed)
    step = layer_step(fn, arrays, differentiated, seed)
    got = outcome(step, *tensors(arrays))
    assert not isinstance(got, type), got  # every drawn layer is valid
    # a mean over no element (every label ignored) is nan, as in PyTorch; its gradient is 0
    assume(np.all(np.isfinite(got[0])))
    at = 1
    for i, (x, d) in enumerate(zip(arrays, differentiated, strict=True)):
        if not d:
            continue

        def loss(a: np.ndarray, i=i) -> float:
            args = tensors(arrays)
            args[i] = tg.tensor(a)
            out = fn(*args).numpy()
            c = np.random.default_rng(seed).standard_normal(out.shape)
            return float(np.sum(out * c))

        want = numeric_grad(loss, x)
        if layer.op == "embedding" and layer["padding_idx"] is not None:
            want[layer["padding_idx"]] = 0.0  # PyTorch's definition: that row never learns
        np.testing.assert_allclose(got[at], want, rtol=1e-4, atol=1e-6, err_msg=f"input {i}")
        at += 1


# Each new structure compiles kernels on the Numba backend: fewer examples in the short profile.
SHORT = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci"
FEWER = settings(max_examples=20 if SHORT else settings().max_examples)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@FEWER
@given(layers(), st.integers(0, 2**16), st.sampled_from([np.float32, np.float64]))
def test_traced_layers_match_eager(backend, layer: Layer, seed: int, dtype):
    fn, arrays, differentiated = build(layer, dtype, seed)
    step = layer_step(fn, arrays, differentiated, seed)
    want = outcome(step, *tensors(arrays))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lowering, "KERNEL_MIN", 0)
        got = outcome(tg.trace(step, backend=backend), *tensors(arrays))
    tol = 1e-4 if dtype == np.float32 else 1e-9
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True, err_msg=k)


RANDOM_DRAWS = {
    "dropout": lambda x: F.dropout(x, 0.3),
    "randn_like": lambda x: x * tg.randn_like(x),
    "rand": lambda x: x + tg.rand(*x.shape, dtype=x.dtype),
    "normal_": lambda x: x * tg.zeros_like(x).normal_(1.0, 2.0),
    "randint": lambda x: x * tg.randint(0, 5, x.shape).astype(x.dtype),
    "randperm": lambda x: x[..., tg.randperm(x.shape[-1])] if x.ndim else x,
    "bernoulli": lambda x: x * tg.bernoulli(tg.sigmoid(x)),
    "multinomial": lambda x: x * tg.multinomial(tg.softmax(x.reshape(-1, x.shape[-1]), -1),
                                                 1, True).sum() if x.ndim and x.size else x,
}  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@FEWER
@given(st.lists(st.sampled_from(sorted(RANDOM_DRAWS)), min_size=1, max_size=3),
       st.lists(st.integers(1, 4), max_size=3), st.integers(0, 2**16),
       st.sampled_from([np.float32, np.float64]))  # fmt: skip
def test_random_draws_in_traced_steps_match_eager_for_a_seed(backend, draws, shape, seed, dtype):
    """The same seed, the same numbers: at every call, not only the first."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)

    def step(x):
        gm = tg.GradManager().attach(x)
        with gm:
            out = x
            for name in draws:
                out = RANDOM_DRAWS[name](out)
            gm.backward(out.sum())
        return out, x.grad if x.grad is not None else tg.zeros_like(x)

    def run(f):
        tg.manual_seed(seed)
        return [outcome(f, tg.tensor(x)) for _ in range(2)]

    want = run(step)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lowering, "KERNEL_MIN", 0)
        got = run(tg.trace(step, backend=backend))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)

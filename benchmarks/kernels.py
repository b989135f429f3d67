"""The measurements behind docs/kernels.md. Run `python benchmarks/kernels.py [what ...]` with
`what` among accuracy (all 2**32 float32 inputs: minutes), tanh (fast tanh against math.tanh in
a parallel loop), underflow (the fast exp on inputs whose results are subnormal or zero), groups
(typical fused kernels against NumPy op by op), cache (a new process's first calls, cold and
warm), native (attention's and layer norm's own kernels alone, on the GPT's shapes), alias (a
kernel's time per array element as it writes and reads more arrays, about the fuse pass's
ALIAS_CHECKS_MAX), gemm (the plan's GEMM kernel against np.matmul on small products), scan (the
LSTM's and GRU's scan kernels against their NumPy versions) and xent (the cross-entropy's
kernels over a vocabulary and over a few classes); `--help` says so too."""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np
from numba import prange

from tracegrad.compiler.kernels import compile_group, fastmath, scalar
from tracegrad.core import primitives
from tracegrad.core.ir import Graph, Node, Value, evaluate

_SUBNORMAL_ULP = 2.0**-149  # float32's smallest step
_SMALLEST_NORMAL = 2.0**-126


# --- accuracy: all 2**32 inputs against float64 math ------------------------------------------


@numba.njit(parallel=True, error_model="numpy")
def _errors(fast, exact, x, stats):
    """stats[c] = (max ulps on normal results, its x, max error on subnormal results in units
    of 2**-149, mismatched specials) for the c-th slice of x."""
    chunks = stats.shape[0]
    for c in prange(chunks):
        worst = worst_x = worst_sub = bad = 0.0
        for k in range(c * x.size // chunks, (c + 1) * x.size // chunks):
            y = np.float64(fast(x[k]))
            r = exact(np.float64(x[k]))
            r32 = np.float64(np.float32(r))
            if r != r or math.isinf(r32):
                bad += 0.0 if (y != y and r != r) or y == r32 else 1.0
            elif math.isinf(y) or y != y:
                bad += 1.0
            elif abs(r) >= _SMALLEST_NORMAL:
                ulp = math.ldexp(1.0, math.frexp(r)[1] - 24)
                if abs(y - r) / ulp > worst:
                    worst, worst_x = abs(y - r) / ulp, np.float64(x[k])
            else:
                worst_sub = max(worst_sub, abs(y - r) / _SUBNORMAL_ULP)
        stats[c, 0], stats[c, 1], stats[c, 2], stats[c, 3] = worst, worst_x, worst_sub, bad


def float32_errors(fast, exact, step: int = 1) -> tuple[float, float, float, int]:
    """(max ulps on normal results, where, max subnormal error in 2**-149, wrong specials) of
    `fast` against float64 `exact` over every `step`-th float32 bit pattern."""
    stats = np.zeros((2 * numba.get_num_threads(), 4))
    worst, worst_x, worst_subnormal, wrong = 0.0, 0.0, 0.0, 0
    span = 1 << 24
    for start in range(0, 1 << 32, span * step):
        bits = np.arange(start, start + span * step, step, dtype=np.uint64).astype(np.uint32)
        _errors(fast, exact, bits.view(np.float32), stats)
        i = int(np.argmax(stats[:, 0]))
        if stats[i, 0] > worst:
            worst, worst_x = stats[i, 0], stats[i, 1]
        worst_subnormal = max(worst_subnormal, stats[:, 2].max())
        wrong += int(stats[:, 3].sum())
    return worst, worst_x, worst_subnormal, wrong


EXACT = {
    "exp": (fastmath.exp_f32, numba.njit(lambda x: math.exp(x))),
    "log": (fastmath.log_f32, scalar._exact_log),
    "tanh": (fastmath.tanh_f32, numba.njit(lambda x: math.tanh(x))),
    "sigmoid": (fastmath.sigmoid_f32, scalar._exact_sigmoid),
    "erf": (fastmath.erf_f32, numba.njit(lambda x: math.erf(x))),
}


def accuracy() -> None:
    print("function  max error (normal results)  at x             subnormal results  specials")
    for name, (fast, exact) in EXACT.items():
        ulps, where, sub, bad = float32_errors(fast, exact)
        print(
            f"{name:8}  {ulps:6.3f} ulp {'':15} {where:<16.9g} {sub:6.3f} x 2**-149   {bad} wrong"
        )


# --- speed: a parallel loop with fast tanh against math.tanh ----------------------------------

_FLAGS = set(fastmath.FLAGS | {"reassoc"})


@numba.njit(parallel=True, fastmath=_FLAGS, error_model="numpy")
def _fast_tanh(x, out):
    for i in prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = scalar.tanh(x[i, j])


@numba.njit(parallel=True, fastmath=True)
def _math_tanh(x, out):
    for i in prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = math.tanh(x[i, j])


def call_seconds(f, *args, runs: int = 25) -> list[float]:
    """The time of each of `runs` calls of f(*args), after one untimed call."""
    f(*args)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - start)
    return times


def median_seconds(f, *args, runs: int = 25) -> float:
    return float(np.median(call_seconds(f, *args, runs=runs)))


def tanh_speed(shape: tuple[int, int] = (4096, 512)) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3
    out = np.empty_like(x)
    fast = median_seconds(_fast_tanh, x, out)
    slow = median_seconds(_math_tanh, x, out)
    ref = median_seconds(lambda a, o: np.tanh(a, out=o), x, out)
    print(
        f"tanh of float32 {shape}, {numba.get_num_threads()} threads, median of 25: fast "
        f"{fast * 1e3:.2f} ms, math.tanh {slow * 1e3:.2f} ms ({slow / fast:.1f}x slower), "
        f"np.tanh {ref * 1e3:.2f} ms"
    )


@numba.njit(parallel=True, fastmath=_FLAGS, error_model="numpy")
def _fast_exp(x, out):
    for i in prange(x.shape[0]):
        out[i] = fastmath.exp_f32(x[i])


def underflow_speed(size: int = 1 << 20) -> None:
    """The fast exp on inputs whose results are normal, subnormal (x in -103.9..-87.3: each
    product that makes one costs a microcode assist on Intel cores) and zero (a softmax's
    scores masked with -inf or float32's lowest, which must not pay the same)."""
    out = np.empty(size, np.float32)
    print(f"fast exp of {size} equal float32 inputs, {numba.get_num_threads()} threads, median "
          "of 25, ms:")  # fmt: skip
    lowest = float(np.finfo(np.float32).min)
    for x in (0.0, -50.0, -90.0, -100.0, -200.0, lowest, -np.inf):
        seconds = median_seconds(_fast_exp, np.full(size, x, np.float32), out)
        print(f"  x = {x:<14.6g} e**x = {out[0]:<12.6g} {seconds * 1e3:7.3f}")
    import tracegrad
    from tracegrad.runtime.eager import wait_for_kernels

    scores = np.random.default_rng(0).standard_normal((8, 4, 256, 256)).astype(np.float32)
    masked = tracegrad.tensor(scores).masked_fill(tracegrad.ones(256, 256).triu(1).bool(), lowest)
    softmax = tracegrad.nn.functional.softmax
    softmax(masked, -1)
    wait_for_kernels()
    seconds = median_seconds(softmax, masked, -1)
    print(f"eager softmax over causally masked (8, 4, 256, 256) scores: {seconds * 1e3:.2f} ms")


# --- fused groups against NumPy, one op at a time ---------------------------------------------


def group_speed(batch: int = 4096, width: int = 256) -> None:
    names = ["bias + tanh-GELU", "its backward + bias grad", "softmax exp + row sums", "SGD step"]
    rng = np.random.default_rng(0)
    print(f"median of 25, {numba.get_num_threads()} threads, batch {batch}, width {width}:")
    for name, (inputs, nodes, outputs) in zip(names, example_groups(batch, width), strict=True):
        kernel = compile_group(inputs, nodes, outputs)
        arrays = [rng.standard_normal(v.shape).astype(v.dtype) for v in inputs]
        results = [np.empty(v.shape, v.dtype) for v in outputs]
        fused = median_seconds(kernel, *arrays, *results)
        graph = Graph(inputs, nodes, outputs)
        numpy = median_seconds(lambda: evaluate(graph, arrays))
        print(f"  {name:26} kernel {fused * 1e6:7.0f} us   NumPy {numpy * 1e6:7.0f} us")


# --- alias: LLVM's limit on runtime overlap checks ---------------------------------------------


def alias_checks(shape: tuple[int, int] = (64, 128)) -> None:
    """A kernel reading R arrays (their sum) and writing W (multiples of it): time per array
    element on either side of W (W - 1) / 2 + W R = 128, past which LLVM leaves the loop
    unvectorized (passes/fuse.py's ALIAS_CHECKS_MAX)."""
    rng = np.random.default_rng(0)
    print(f"median of 25, one {shape} float32 array each; pairs = W (W - 1) / 2 + W R:")
    for read, written in [(1, 15), (1, 16), (62, 2), (66, 2), (15, 7), (17, 8)]:
        inputs = [Value(shape, np.dtype(np.float32)) for _ in range(read)]
        nodes, total = [], inputs[0]
        for x in inputs[1:]:
            total = _node(nodes, "add", total, x)
        outputs = [_node(nodes, "mul", total, _constant(k + 2.0)) for k in range(written)]
        kernel = compile_group(inputs, nodes, outputs)
        arrays = [rng.standard_normal(shape).astype(np.float32) for _ in inputs]
        arrays += [np.empty(shape, np.float32) for _ in outputs]
        seconds = median_seconds(kernel, *arrays)
        pairs = written * (written - 1) // 2 + written * read
        print(
            f"  R {read:2}  W {written:2}  pairs {pairs:3}: "
            f"{seconds / (len(arrays) * math.prod(shape)) * 1e9:.3f} ns per array element"
        )


def _node(nodes: list, op: str, *inputs: Value) -> Value:
    out = Value(inputs[0].shape, inputs[0].dtype)
    nodes.append(Node(primitives.PRIMITIVES[op], list(inputs), [out], {}))
    return out


def _constant(x: float) -> Value:
    value = np.asarray(x, np.float32)
    return Value(value.shape, value.dtype, const=value)


# --- gemm: the plan's GEMM kernel against np.matmul on small products -----------------------


def gemm_sizes() -> None:
    """`compiler.kernels.gemm`'s kernel (MKL's GEMM with the `mkl` extra, on Numba's threads)
    against np.matmul (NumPy's OpenBLAS, its own threads), float32, small products: where the
    kernel starts to pay (`gemm.KERNEL_MIN`); and the kernel on the calling thread against all
    threads, called back to back and after a pause longer than the threads' spin, where they
    have fallen asleep: where sharing a product starts to pay (`gemm.SERIAL_MAX`)."""
    from tracegrad.compiler.kernels import native
    from tracegrad.compiler.kernels.blas import quiet_openblas

    quiet_openblas()  # as a plan does
    rng = np.random.default_rng(0)
    print("median of 25, float32 (m x k) @ (k x n), us; one thread / all, back to back and after")
    print("a 100 us pause:")
    shapes = [(16, 16, 16), (32, 32, 32), (64, 10, 256), (64, 64, 64), (32, 128, 128),
              (32, 128, 384), (128, 128, 128), (64, 128, 384), (20, 200, 800), (128, 128, 384),
              (256, 256, 256)]  # fmt: skip
    for m, k, n in shapes:
        a, b = Value((m, k), np.dtype(np.float32)), Value((k, n), np.dtype(np.float32))
        node = Node(primitives.matmul, [a, b], [Value((m, n), np.dtype(np.float32))], {})
        ((_, kernel),) = native.compile_native([node])
        x, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        out = np.empty((m, n), np.float32)
        ours, numpy = median_seconds(kernel, x, w, out), median_seconds(np.matmul, x, w, out)
        shares = [_paused_seconds(kernel.compiled, pause, x, w, out, threads)
                  for pause in (0, 100e-6) for threads in (1, kernel.threads)]  # fmt: skip
        print(
            f"  {m:4} x {k:4} x {n:4}  largest operand {max(m * k, k * n, m * n):6}: "
            f"kernel {ours * 1e6:6.1f}   np.matmul {numpy * 1e6:6.1f}   "
            + "   ".join(
                f"{one * 1e6:5.1f} / {every * 1e6:5.1f}" for one, every in (shares[:2], shares[2:])
            )  # fmt: skip
        )


def _paused_seconds(f, pause: float, *args, runs: int = 25) -> float:
    """The median time of f(*args), each call after spinning `pause` seconds on this thread
    (the kernels' threads left idle meanwhile)."""
    f(*args)
    times = []
    for _ in range(runs):
        until = time.perf_counter() + pause
        while time.perf_counter() < until:
            pass
        start = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


# --- cache: a new process's first kernels, cold and warm --------------------------------------

_CHILD = """
import sys, time
start = time.perf_counter()
import numpy as np
from tracegrad.compiler.kernels import compile_group
sys.path.insert(0, {here!r})
from kernels import example_groups
imported = time.perf_counter()
for inputs, nodes, outputs in example_groups():
    kernel = compile_group(inputs, nodes, outputs)
    arrays = [np.ones(v.shape, v.dtype) for v in inputs]
    kernel(*arrays, *(np.empty(v.shape, v.dtype) for v in outputs))
done = time.perf_counter()
print(f"{imported - start:.3f} {done - imported:.3f}")
"""


def example_groups(batch: int = 4096, width: int = 256) -> list:
    """Four typical groups of a training step: bias + tanh-GELU, its backward with the bias
    gradient, a softmax's exp and row sums, and an SGD update."""

    def group(*input_shapes):
        inputs = [Value(s, np.float32) for s in input_shapes]
        nodes = []

        def op(name, *args, **attrs):
            args = [Value((), np.float32, np.array(a, np.float32)) if isinstance(a, float) else a
                    for a in args]  # fmt: skip
            prim = getattr(primitives, name)
            out = Value(*prim.shape_rule(*args, **attrs))
            nodes.append(Node(prim, args, [out], attrs))
            return out

        return inputs, nodes, op

    def gelu_inner(op, y):
        return op(
            "mul", 0.7978846, op("add", y, op("mul", 0.044715, op("mul", y, op("mul", y, y))))
        )

    groups = []
    (x, b), nodes, op = group((batch, width), (width,))
    y = op("add", x, b)
    t = op("tanh", gelu_inner(op, y))
    groups.append(([x, b], nodes, [op("mul", op("mul", 0.5, y), op("add", 1.0, t))]))

    (g, y), nodes, op = group((batch, width), (batch, width))
    t = op("tanh", gelu_inner(op, y))
    dt = op(
        "mul",
        op("sub", 1.0, op("mul", t, t)),
        op("add", 0.7978846, op("mul", 0.1070322, op("mul", y, y))),
    )
    dy = op(
        "mul", g, op("add", op("mul", 0.5, op("add", 1.0, t)), op("mul", op("mul", 0.5, y), dt))
    )
    groups.append(([g, y], nodes, [dy, op("sum", dy, axis=(0,), keepdims=False)]))

    (z, m), nodes, op = group((batch, 10), (batch, 1))
    e = op("exp", op("sub", z, m))
    groups.append(([z, m], nodes, [e, op("sum", e, axis=(1,), keepdims=True)]))

    (w, dw), nodes, op = group((width, width), (width, width))
    groups.append(([w, dw], nodes, [op("sub", w, op("mul", 0.01, dw))]))
    return groups


def cache_timing() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TRACEGRAD_CACHE_DIR=tmp, NUMBA_CACHE_DIR=os.path.join(tmp, "nb"))
        for label in ("cold", "warm"):
            out = subprocess.run(
                [sys.executable, "-c", _CHILD.format(here=os.path.dirname(__file__))],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            print(
                f"{label}: import {float(out[0]):.2f} s, then compile/load + first call of "
                f"{len(example_groups(8, 8))} kernels {float(out[1]):.2f} s"
            )


def native_speed(calls: int = 200) -> None:
    """Attention's and layer norm's kernels alone on the GPT of `benchmarks/models.py`: q, k, v
    strided views of one (16, 128, 3, 4, 64) float32 array, causal; rows of (2048, 256). The
    fastest of `calls`, with NumPy's OpenBLAS threads quieted as a plan quiets them."""
    from tracegrad.compiler.kernels import attention, normalization
    from tracegrad.compiler.kernels.blas import gemm_symbols, quiet_openblas
    from tracegrad.compiler.kernels.cache import default_cache, named
    from tracegrad.core.ops.attention import unpack

    quiet_openblas()
    cache = default_cache()

    def kernel(generator, prefix: str, op: str, *extra: str):
        name, text = named(prefix, generator.generate_source(op, "float32", *extra))
        return cache.load(name, lambda: text)

    def fastest(f, *args) -> str:
        return f"{min(call_seconds(f, *args, runs=calls)) * 1e3:.2f} ms"

    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((16, 128, 3, 4, 64), dtype=np.float32)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    g = rng.standard_normal((16, 128, 4, 64), dtype=np.float32).transpose(0, 2, 1, 3)
    out, packed = np.empty((16, 128, 4, 64), np.float32), np.empty(3 * q.size, np.float32)
    scale = np.float32(0.125)
    flat = lambda *arrays: [x for a in arrays for x in attention.flat(a)]  # noqa: E731
    ints = gemm_symbols()  # BLAS's integer type, which the attention kernels call
    forward = kernel(attention, "sdpa", "output", ints)
    backward = kernel(attention, "sdpa", "grads", ints)
    o = out.transpose(0, 2, 1, 3)
    print("attention forward ", fastest(forward, *flat(q, k, v), scale, True, *flat(o)))
    grads = flat(*unpack(packed, q, k, v))
    print("attention backward", fastest(backward, *flat(q, k, v, o, g), scale, True, *grads))
    x, dy = (rng.standard_normal((2048, 256), dtype=np.float32) for _ in range(2))
    w, b = rng.standard_normal(256, dtype=np.float32), rng.standard_normal(256, dtype=np.float32)
    y, dx, dw, db = np.empty_like(x), np.empty_like(x), np.empty_like(w), np.empty_like(b)
    norm = kernel(normalization, "norm", "output")
    print("layer norm forward ", fastest(norm, x, w, b, 1e-5, y))
    norm_grad = kernel(normalization, "norm", "grads")
    print("layer norm backward", fastest(norm_grad, x, w, dy, 1e-5, dx, dw, db))


SCAN_SHAPES = {  # (steps, batch, hidden) of the recurrent nets of zoo.py and torch_models.py
    "lstm": {"zoo lstm": (35, 20, 200), "char-lstm": (64, 32, 256), "bilstm": (100, 64, 128)},
    "gru": {"gru": (50, 64, 128)},
}


def scan_speed(runs: int = 10) -> None:
    """The LSTM and GRU scans forward and backward, float32, as eager runs them: the NumPy
    versions (NumPy's OpenBLAS threads quieted, as in a process that runs kernels) against the
    kernels. Medians of `runs` calls."""
    from tracegrad.compiler.kernels.blas import quiet_openblas
    from tracegrad.compiler.kernels.native import compile_native

    quiet_openblas()
    rng = np.random.default_rng(0)
    for scan, shapes in SCAN_SHAPES.items():
        op, grad = getattr(primitives, f"{scan}_scan"), getattr(primitives, f"{scan}_scan_grad")
        gates = 4 if scan == "lstm" else 3
        for name, (steps, batch, hidden) in shapes.items():
            x = rng.standard_normal((steps, batch, gates * hidden), dtype=np.float32)
            w_hh_t = rng.uniform(-0.1, 0.1, (gates * hidden, hidden)).astype(np.float32).T
            h0 = np.zeros((batch, hidden), np.float32)
            states = (h0, h0) if scan == "lstm" else (np.zeros(gates * hidden, np.float32), h0)
            ins = (x, w_hh_t, *states)
            out = op.impl(*ins, reverse=False)
            g = rng.standard_normal(out.shape, dtype=np.float32)
            packed = grad.impl(g, out, *ins, reverse=False)
            calls = ((op, ins, out.shape), (grad, (g, out, *ins), packed.shape))
            nodes = [Node(p, [Value(a.shape, a.dtype) for a in args], [Value(shape, np.float32)],
                          {"reverse": False}) for p, args, shape in calls]  # fmt: skip
            (_, forward), (_, backward) = compile_native(nodes)
            ms = lambda f, *a, **k: median_seconds(lambda: f(*a, **k), runs=runs) * 1e3  # noqa: E731
            numpy = ms(op.impl, *ins, reverse=False), ms(grad.impl, g, out, *ins, reverse=False)
            kernels = ms(forward, *ins, np.empty_like(out)), ms(backward, g, out, *ins, packed)
            print(f"{scan} {name} {(steps, batch, hidden)}: NumPy {numpy[0]:.2f} / "
                  f"{numpy[1]:.2f} ms, kernels {kernels[0]:.2f} / {kernels[1]:.2f} ms "
                  "(forward / backward)")  # fmt: skip


# (rows, classes): a language model's tokens by its vocabulary (the zoo LSTM's, an eighth of
# GPT-2's), an ImageNet-sized head, a 10-class classifier
XENT_SHAPES = [(700, 10000), (2048, 50257 // 8), (64, 1000), (256, 10)]


def xent_speed(runs: int = 30) -> None:
    """The softmax cross-entropy's kernels, forward and backward, float32, on random scores:
    the fastest of `runs` calls."""
    from tracegrad.compiler.kernels.native import compile_native

    rng = np.random.default_rng(0)
    for rows, classes in XENT_SHAPES:
        x = rng.standard_normal((rows, classes), dtype=np.float32)
        labels, g = rng.integers(0, classes, rows), np.ones((), np.float32)
        attrs = {"ignore_index": -100, "reduction": "mean"}
        v = lambda a: Value(a.shape, a.dtype)  # noqa: E731
        loss_op, grad_op = primitives.cross_entropy, primitives.cross_entropy_grad
        nodes = [Node(loss_op, [v(x), v(labels)], [v(g)], attrs),
                 Node(grad_op, [v(g), v(x), v(labels)], [v(x)], attrs)]  # fmt: skip
        (_, forward), (_, backward) = compile_native(nodes)
        loss, dx = np.empty((), np.float32), np.empty_like(x)
        fastest = lambda f, *a: min(call_seconds(f, *a, runs=runs)) * 1e3  # noqa: E731
        print(f"cross-entropy ({rows}, {classes}): forward {fastest(forward, x, labels, loss):.3f}"
              f" ms, backward {fastest(backward, g, x, labels, dx):.3f} ms")  # fmt: skip


JOBS = {"accuracy": accuracy, "tanh": tanh_speed, "underflow": underflow_speed,
        "groups": group_speed, "cache": cache_timing, "native": native_speed,
        "alias": alias_checks, "gemm": gemm_sizes, "scan": scan_speed,
        "xent": xent_speed}  # fmt: skip

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="*", help=f"any of {', '.join(JOBS)} (default: all)")
    chosen = parser.parse_args().what or list(JOBS)
    unknown = set(chosen) - set(JOBS)
    if unknown:
        parser.error(f"unknown measurement {', '.join(sorted(unknown))}")
    for what in chosen:
        JOBS[what]()

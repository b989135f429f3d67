"""Property-based differential testing: random programs over the op table's ops, on random
shapes (broadcasting, axes of size 0 and 1, non-contiguous inputs) and dtypes.

- Eager gradients against float64 central finite differences.
- Traced (NumPy and Numba backends; some groups of >= 2^16 elements, so kernels compile)
  against eager: results, input gradients, and raising the same error.

The default profile ("ci") runs in about a minute; `HYPOTHESIS_PROFILE=long` runs 20,000
programs per test.
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
settings.register_profile(
    "long", max_examples=20_000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Each op keeps every value broadcastable against the program's base shape (reductions keep
# their axes), and is smooth where random inputs land (no ties fed to max, no log of <= 0).
UNARY = {
    "tanh": tg.tanh,
    "sigmoid": tg.sigmoid,
    "sin": tg.sin,
    "cos": tg.cos,
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

"""The Numba backend's casts between float32 and bfloat16 (`compiler.kernels.casts`): the bits
each float32 rounds to, worked out per element in Python integers, and the NumPy version's."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch
from tracegrad.compiler.kernels import compile_groups, team
from tracegrad.compiler.kernels.native import compile_native
from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16, from_bfloat16, to_bfloat16
from tracegrad.core.ir import Node, Value


def cast_kernel(shape, source, target):
    node = Node(P.astype, [Value(shape, np.dtype(source))], [Value(shape, np.dtype(target))],
                {"dtype": np.dtype(target)})  # fmt: skip
    [(ok, kernel)] = compile_native([node])
    return kernel if ok else None


def rounded_by_hand(bits: int) -> int:
    """float32 bits to bfloat16's: the upper half, plus one if the lower half is over half of
    it, or exactly half and the upper half odd; every NaN the quiet 0x7FC0."""
    if bits & 0x7FFFFFFF > 0x7F800000:
        return 0x7FC0
    upper, lower = bits >> 16, bits & 0xFFFF
    return upper + (lower > 0x8000 or (lower == 0x8000 and upper & 1))


def awkward_floats(rng, n: int) -> np.ndarray:
    """Random bits of every exponent, and the cases rounding gets wrong: ties to even both ways,
    NaNs whose payload is in the lower half only, infinities, zeros, subnormals, the largest
    finite floats (which round to infinity)."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    special = [0x3F808000, 0x3F818000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7F800000,
               0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x7F7FFFFF,
               0xFF7FFFFF, 0x3F80FFFF, 0x3F807FFF]  # fmt: skip
    bits[: len(special)] = special
    return bits.view(np.float32)


@pytest.mark.parametrize("n", [1000, 70_001])
def test_rounds_each_float_as_worked_out_by_hand_on_one_thread_or_all(rng, n):
    x = awkward_floats(rng, n)
    want = np.array([rounded_by_hand(int(b)) for b in x.view(np.uint32)], np.uint16)
    kernel = cast_kernel(x.shape, np.float32, BFLOAT16)
    for last in (-1e9, team.clock()):  # asleep long ago, awake just now
        team.last[0] = last
        out = np.empty(x.shape, BFLOAT16)
        kernel(x, out)
        np.testing.assert_array_equal(out.view(np.uint16), want)
    np.testing.assert_array_equal(to_bfloat16(x).view(np.uint16), want)  # the NumPy version


def test_widens_exactly_and_takes_any_layout(rng):
    bits = rng.integers(0, 2**16, (300, 250), dtype=np.uint16)
    b = bits.view(BFLOAT16)[:, ::2]  # not contiguous: the launcher copies it first
    out = np.empty(b.shape, np.float32)
    cast_kernel(b.shape, BFLOAT16, np.float32)(b, out)
    want = bits[:, ::2].astype(np.uint32) << 16
    np.testing.assert_array_equal(out.view(np.uint32), want)
    np.testing.assert_array_equal(from_bfloat16(b).view(np.uint32), want)


def test_bfloat16_rounded_in_a_fused_kernel_rounds_as_worked_out_by_hand(rng):
    """The simplify pass turns a cast to bfloat16 and back into `bfloat16_rounded`, which fuses:
    its float32 template rounds as the casts do."""
    x = awkward_floats(rng, 5000)
    want = np.array([rounded_by_hand(int(b)) << 16 for b in x.view(np.uint32)], np.uint32)
    inputs, out = [Value(x.shape, np.dtype(np.float32))], Value(x.shape, np.dtype(np.float32))
    [(ok, kernel)] = compile_groups([(inputs, [Node(P.bfloat16_rounded, inputs, [out])], [out])])
    assert ok
    got = np.empty_like(x)
    kernel(x, got)
    np.testing.assert_array_equal(got.view(np.uint32), want)
    np.testing.assert_array_equal(P.bfloat16_rounded.impl(x).view(np.uint32), want)


def test_other_casts_are_not_these_kernels():
    assert cast_kernel((4,), np.float64, BFLOAT16) is None
    assert cast_kernel((4,), np.float32, np.float64) is None


def test_a_traced_bfloat16_step_casts_in_kernels_and_computes_as_eager():
    layer = torch.nn.Linear(256, 512).to(torch.bfloat16)
    x = torch.randn(256, 256).bfloat16()

    def step(x):
        loss = torch.nn.functional.gelu(layer(x)).float().square().mean()
        loss.backward()
        return loss

    want = step(x)
    grad, layer.weight.grad, layer.bias.grad = layer.weight.grad.clone(), None, None
    traced = tg.trace(step, backend="numba")
    np.testing.assert_allclose(traced(x).item(), want.item(), rtol=1e-6)  # float32's sums
    assert layer.weight.grad.dtype is torch.bfloat16
    got, grad = layer.weight.grad.float().numpy(), grad.float().numpy()
    np.testing.assert_allclose(got, grad, rtol=2**-7, atol=1e-3 * np.abs(grad).max())
    casts = [line for line in traced.latest.source.splitlines() if "astype" in line]
    assert any("kernel" in line for line in casts), casts  # fused with their neighbours

"""The functions of a float's bits: `frexp` (mantissa and int32 exponent; the mantissa's gradient
2^-exponent) and `nextafter` (PyTorch's gradient: the cotangent for input, zeros for other),
as functions and Tensor methods (`nextafter_` in place): values bit for bit against PyTorch's in
float16, float32 and float64, zeros, infinities, nan and subnormals included; gradients
against finite differences and PyTorch's; traced against eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad, traced_matches_eager

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(11)
SPECIAL = [0.0, -0.0, 1.0, -3.0, 0.1, 1e30, -1e-30, np.inf, -np.inf, np.nan]
DTYPES = ["float64", "float32", "float16"]


def values(dtype):
    x = np.concatenate([SPECIAL, R.standard_normal(20) * 10.0 ** R.integers(-8, 8, 20)])
    with np.errstate(over="ignore"):  # past float16's range: infinities
        x = x.astype(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    return np.concatenate([x, np.array([tiny, -3 * tiny, np.finfo(dtype).max], dtype)])


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_frexp_matches_torch_bit_for_bit(dtype):
    x = values(dtype)
    for got in (ttorch.frexp(ttorch.tensor(x)), ttorch.tensor(x).frexp()):
        want = torch.frexp(torch.tensor(x))
        assert type(got)._fields == ("mantissa", "exponent")
        assert got.mantissa.dtype == np.dtype(dtype) and got.exponent.dtype == np.int32
        np.testing.assert_array_equal(got.mantissa.numpy(), want.mantissa.numpy())
        np.testing.assert_array_equal(got.exponent.numpy(), want.exponent.numpy())


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_nextafter_matches_torch_bit_for_bit(dtype):
    x, y = values(dtype), values(dtype)[::-1].copy()
    want = torch.nextafter(torch.tensor(x), torch.tensor(y)).numpy()
    for got in (ttorch.nextafter(ttorch.tensor(x), ttorch.tensor(y)),
                ttorch.tensor(x).nextafter(ttorch.tensor(y))):  # fmt: skip
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.numpy(), want)
    t = ttorch.tensor(x)
    assert t.nextafter_(ttorch.tensor(y)) is t
    np.testing.assert_array_equal(t.numpy(), want)


@needs_torch
def test_nextafter_broadcasts_and_promotes_as_torch():
    for a, b in [(np.ones((2, 1), np.float32), np.zeros(3, np.float64)),
                 (np.ones(2, np.float32), np.array(2.0))]:  # fmt: skip
        got = ttorch.nextafter(ttorch.tensor(a), ttorch.tensor(b))
        want = torch.nextafter(torch.tensor(a), torch.tensor(b))
        assert str(got.dtype) == str(want.dtype) and got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@needs_torch
def test_gradients_match_torch():
    x, y = R.standard_normal(6), R.standard_normal(6)
    c = R.standard_normal(6)
    ours = [ttorch.tensor(a, requires_grad=True) for a in (x, y)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, y)]
    for lib, (a, b) in ((ttorch, ours), (torch, theirs)):
        out = lib.frexp(a * 100.0).mantissa + lib.nextafter(a, b) * 3.0 + lib.nextafter(b, a)
        (out * lib.tensor(c)).sum().backward()
    for mine, want in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine.grad.numpy(), want.grad.numpy())
    exponent = ttorch.frexp(ours[0]).exponent
    assert not exponent.requires_grad


def test_frexp_mantissa_gradient_matches_finite_differences():
    x = R.uniform(0.6, 0.9, 5) * 2.0 ** R.integers(-5, 5, 5) * np.sign(R.standard_normal(5))
    check_grad(lambda a: tg.frexp(a).mantissa, x)  # 2^-e, constant between powers of two
    a = tg.tensor([0.0, np.inf, np.nan], requires_grad=True)
    tg.frexp(a).mantissa.sum().backward()
    assert a.grad.tolist() == [1.0, 1.0, 1.0]  # exponent 0: PyTorch's grad / 2^0


def test_only_floats():
    with pytest.raises(RuntimeError, match="only supports floating-point"):
        tg.frexp(tg.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="nextafter"):
        tg.nextafter(tg.tensor([1, 2]), tg.tensor([2, 1]))
    assert not hasattr(tg, "frexp_mantissa") and not hasattr(tg.tensor(1.0), "frexp_exponent")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend):
    def f(x, y):
        return tg.frexp(x * 7.0).mantissa + tg.nextafter(x, y) + tg.frexp(y).exponent

    traced_matches_eager(f, R.standard_normal(5), R.standard_normal(5), backend=backend)

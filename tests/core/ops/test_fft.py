"""The three Fourier transforms of the op table (core/ops/fft.py): known values, dtypes, scales,
and gradients against finite differences of the real and imaginary parts."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError

rng = np.random.default_rng(0)


def complex_normal(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def test_a_delta_transforms_to_ones_and_back():
    delta = np.zeros(8, np.complex128)
    delta[0] = 1
    ones = P.fft_c2c(tg.tensor(delta), axes=(0,), scale="none", forward=True)
    np.testing.assert_allclose(ones.numpy(), np.ones(8), atol=1e-15)
    back = P.fft_c2c(ones, axes=(0,), scale="n", forward=False)
    np.testing.assert_allclose(back.numpy(), delta, atol=1e-15)
    shifted = np.roll(delta, 1)  # a delta at 1: the bins turn by -2 pi k / 8
    phases = P.fft_c2c(tg.tensor(shifted), axes=(0,), scale="none", forward=True).numpy()
    np.testing.assert_allclose(phases, np.exp(-2j * np.pi * np.arange(8) / 8), atol=1e-15)


def test_a_cosine_is_two_bins_and_its_half_spectrum_one():
    n, k = 16, 3
    t = np.arange(n)
    cosine = np.cos(2 * np.pi * k * t / n)
    full = P.fft_c2c(tg.tensor(cosine + 0j), axes=(0,), scale="none", forward=True).numpy()
    want = np.zeros(n, np.complex128)
    want[k] = want[n - k] = n / 2
    np.testing.assert_allclose(full, want, atol=1e-12)
    half = P.fft_r2c(tg.tensor(cosine), axes=(0,), scale="none")
    np.testing.assert_allclose(half.numpy(), want[: n // 2 + 1], atol=1e-12)
    back = P.fft_c2r(half, axes=(0,), scale="n", n=n)
    np.testing.assert_allclose(back.numpy(), cosine, atol=1e-15)


def test_the_scales_and_directions():
    x = complex_normal(4, 6)
    for scale, divide in (("none", 1.0), ("sqrt", np.sqrt(24.0)), ("n", 24.0)):
        got = P.fft_c2c(tg.tensor(x), axes=(0, 1), scale=scale, forward=True).numpy()
        np.testing.assert_allclose(got, np.fft.fft2(x) / divide, atol=1e-13)
        got = P.fft_c2c(tg.tensor(x), axes=(1, 0), scale=scale, forward=False).numpy()
        np.testing.assert_allclose(got, np.fft.ifft2(x) * 24.0 / divide, atol=1e-13)
    unitary = P.fft_c2c(tg.tensor(x), axes=(0, 1), scale="sqrt", forward=True).numpy()
    np.testing.assert_allclose(np.linalg.norm(unitary), np.linalg.norm(x))


def test_dtypes_keep_the_precision():
    x32 = rng.standard_normal((3, 8)).astype(np.float32)
    half = P.fft_r2c(tg.tensor(x32), axes=(1,), scale="none")
    assert half.dtype == np.complex64 and half.shape == (3, 5)
    assert P.fft_c2c(half, axes=(0,), scale="sqrt", forward=True).dtype == np.complex64
    back = P.fft_c2r(half, axes=(1,), scale="n", n=8)
    assert back.dtype == np.float32 and back.shape == (3, 8)
    np.testing.assert_allclose(back.numpy(), x32, atol=1e-6)


@pytest.mark.parametrize("scale", ["none", "sqrt", "n"])
def test_gradients_match_finite_differences(scale):
    """Each op's VJP is its adjoint: the other direction, the half spectrum padded, the bins
    that stand for two doubled (n even and odd, one axis and two)."""
    check_grad(lambda x: P.fft_c2c(x, axes=(1,), scale=scale, forward=True), complex_normal(2, 5))
    check_grad(lambda x: P.fft_c2c(x, axes=(0, 2), scale=scale, forward=False),
               complex_normal(3, 2, 4))  # fmt: skip
    for n in (6, 7):
        check_grad(lambda x: P.fft_r2c(x, axes=(1,), scale=scale), rng.standard_normal((2, n)))
        check_grad(lambda x, n=n: P.fft_c2r(x, axes=(1,), scale=scale, n=n),
                   complex_normal(2, n // 2 + 1))  # fmt: skip
        check_grad(lambda x: P.fft_r2c(x, axes=(0, 1), scale=scale), rng.standard_normal((3, n)))
        check_grad(lambda x, n=n: P.fft_c2r(x, axes=(0, 1), scale=scale, n=n),
                   complex_normal(3, n // 2 + 1))  # fmt: skip
    check_grad(lambda x: P.fft_c2r(x, axes=(0,), scale=scale, n=1), complex_normal(1, 2))


def test_bad_inputs_name_the_op_and_shapes():
    with pytest.raises(ShapeError, match=r"fft_c2c: a complex input, not float64"):
        P.fft_c2c(tg.tensor(np.zeros(4)), axes=(0,), scale="none", forward=True)
    with pytest.raises(ShapeError, match=r"fft_r2c: axes \(0, 0\) of a 2-d input"):
        P.fft_r2c(tg.tensor(np.zeros((4, 4))), axes=(0, 0), scale="none")
    with pytest.raises(ShapeError, match=r"fft_c2r: 8 points from a half spectrum of 4 along "):
        P.fft_c2r(tg.tensor(np.zeros((2, 4), np.complex128)), axes=(1,), scale="none", n=8)
    with pytest.raises(ShapeError, match=r"fft_c2c: scale 'ortho' is not one of"):
        P.fft_c2c(tg.tensor(np.zeros(4, np.complex128)), axes=(0,), scale="ortho", forward=True)

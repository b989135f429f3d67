"""Running sums and products: float32 accumulated in float64, each result rounded once, as
PyTorch's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_float32_running_sum_does_not_drift(dtype):
    """A float32 running sum of a million 0.1s came to 100958 (PyTorch's: 100000)."""
    n = 1_000_000 if dtype == np.float32 else 2_000
    x = np.full(n, 0.1, dtype)
    got = tg.cumsum(tg.tensor(x), 0).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.cumsum(x.astype(np.float64)).astype(dtype))


def test_running_products_round_once_eager_and_traced():
    """A diffusion noise schedule's cumulative product of 1 - beta, eager and in a plan."""
    betas = np.linspace(1e-4, 0.02, 1000, dtype=np.float32)
    want = np.cumprod((1.0 - betas).astype(np.float64)).astype(np.float32)
    x = tg.tensor(1.0 - betas)
    np.testing.assert_array_equal(tg.cumprod(x, 0).numpy(), want)
    np.testing.assert_array_equal(tg.trace(lambda v: tg.cumprod(v, 0))(x).numpy(), want)
    torch = pytest.importorskip("torch")
    ref = torch.cumprod(torch.tensor(1.0 - betas), 0).numpy()
    np.testing.assert_array_equal(tg.cumprod(x, 0).numpy(), ref)

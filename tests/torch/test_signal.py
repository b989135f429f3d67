"""torch.signal.windows: each window against PyTorch's (SciPy's formulas), and by its
definition where PyTorch is not installed."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as ttorch

windows = ttorch.signal.windows
OPTIONS = {"general_cosine": {"a": [0.5, 0.3, 0.2]}, "general_hamming": {"alpha": 0.6},
           "kaiser": {"beta": 5.0}, "gaussian": {"std": 1.7},
           "exponential": {"tau": 2.0}}  # fmt: skip


@pytest.mark.parametrize("name", windows.__all__)
@pytest.mark.parametrize("sym", [True, False])
def test_windows_match_pytorch(name, sym):
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")
    for m in (0, 1, 2, 5, 8):
        options = dict(OPTIONS.get(name, {}))
        if name == "exponential" and not sym:
            options["center"] = 1.5
        for ours_dtype, theirs_dtype, tol in ((ttorch.float64, torch.float64, 1e-12),
                                              (ttorch.float32, torch.float32, 1e-6)):  # fmt: skip
            ours = getattr(windows, name)(m, sym=sym, dtype=ours_dtype, **options)
            theirs = getattr(torch.signal.windows, name)(m, sym=sym, dtype=theirs_dtype, **options)
            assert ours.dtype == np.dtype(ours_dtype) and ours.shape == tuple(theirs.shape)
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=tol, atol=tol)


def test_windows_by_definition():
    np.testing.assert_allclose(windows.hann(5).numpy(), [0, 0.5, 1, 0.5, 0], atol=1e-7)
    np.testing.assert_allclose(windows.hann(4, sym=False).numpy(), [0, 0.5, 1, 0.5], atol=1e-7)
    np.testing.assert_allclose(windows.bartlett(5).numpy(), [0, 0.5, 1, 0.5, 0], atol=1e-7)
    np.testing.assert_allclose(windows.hamming(3).numpy(), [0.08, 1, 0.08], atol=1e-7)
    gauss = windows.gaussian(5, std=2.0, dtype=ttorch.float64).numpy()
    np.testing.assert_allclose(gauss, np.exp(-((np.arange(5) - 2) ** 2) / 8), rtol=1e-15)
    assert windows.kaiser(7, beta=0.0).tolist() == [1.0] * 7
    assert windows.blackman(1).tolist() == [1.0] and windows.cosine(0).shape == (0,)
    assert windows.hann(3, requires_grad=True).requires_grad


def test_windows_refuse_what_pytorch_refuses():
    with pytest.raises(ValueError, match="non-negative window length"):
        windows.hann(-1)
    with pytest.raises(ValueError, match="Center must be None"):
        windows.exponential(4, center=1.0)
    with pytest.raises(ValueError, match="std must be positive"):
        windows.gaussian(4, std=0.0)
    with pytest.raises(ValueError, match="floating point"):
        windows.hann(4, dtype=ttorch.int64)

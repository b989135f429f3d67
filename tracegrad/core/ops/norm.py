"""Layer norm's ops in NumPy (their records are in `primitives`; the Numba backend runs kernels of
its own, `compiler.kernels.normalization`). Over the last axis of x (..., D), with weight and
bias (D,):

- `layer_norm`: (x - mean) / sqrt(var + eps) * weight + bias, the variance biased (PyTorch's);
- `layer_norm_grad(x, weight, g)`: the cotangents of x, weight and bias for the cotangent g of
  the result, packed into one flat array [dx | dweight | dbias] (`unpack`). The statistics are
  computed again from x: backward keeps x, not the normalized values.
"""

from __future__ import annotations

import numpy as np


def unpack(packed, x) -> tuple:
    """Views (dx, dweight, dbias) of a flat array (or tensor) laid out as [dx | dw | db]."""
    n, d = x.size, x.shape[-1]
    return packed[:n].reshape(x.shape), packed[n : n + d], packed[n + d :]


def scratch(x) -> int:
    """Bytes of one call's temporaries: two arrays of x's size (forward and backward alike)."""
    return 2 * x.size * np.dtype(x.dtype).itemsize


def layer_norm(x, weight, bias, eps: float, out=None) -> np.ndarray:
    centered, rstd = _statistics(x, eps)
    out = np.multiply(centered, rstd, out=out)
    out *= weight
    out += bias
    return out


def layer_norm_grad(x, weight, g, eps: float, out=None) -> np.ndarray:
    out = np.empty(x.size + 2 * x.shape[-1], x.dtype) if out is None else out
    dx, dweight, dbias = unpack(out, x)
    xhat, rstd = _statistics(x, eps)
    xhat *= rstd
    rows = tuple(range(x.ndim - 1))
    np.sum(g * xhat, axis=rows, out=dweight)
    np.sum(g, axis=rows, out=dbias)
    dxhat = g * weight
    dx[...] = dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True)
    dx *= rstd
    return out


def _statistics(x, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """x minus its mean over the last axis, and 1 / sqrt(var + eps) (keepdims)."""
    centered = x - x.mean(-1, keepdims=True)
    var = np.mean(np.square(centered), axis=-1, keepdims=True)
    return centered, 1.0 / np.sqrt(var + eps)

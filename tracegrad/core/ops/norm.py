"""Layer norm's ops in NumPy (their records at the end; the Numba backend runs kernels of
its own, `compiler.kernels.normalization`). Over the last axis of x (..., D), with weight and
bias (D,):

- `layer_norm`: (x - mean) / sqrt(var + eps) * weight + bias, the variance biased (PyTorch's);
- `layer_norm_grad(x, weight, g)`: the cotangents of x, weight and bias for the cotangent g of
  the result, packed into one flat array [dx | dweight | dbias] (`unpack`). The statistics are
  computed again from x: backward keeps x, not the normalized values.
"""

from __future__ import annotations

import numpy as np

from tracegrad.core.vocabulary import Primitive


def unpack(packed, x) -> tuple:
    """Views (dx, dweight, dbias) of a flat array (or tensor) laid out as [dx | dw | db]."""
    n, d = x.size, x.shape[-1]
    return packed[:n].reshape(x.shape), packed[n : n + d], packed[n + d :]


def scratch(x) -> int:
    """Bytes of one call's temporaries: two arrays of x's size (forward and backward alike)."""
    return 2 * x.size * np.dtype(x.dtype).itemsize


def forward(x, weight, bias, eps: float, out=None) -> np.ndarray:
    centered, rstd = _statistics(x, eps)
    out = np.multiply(centered, rstd, out=out)
    out *= weight
    out += bias
    return out


def backward(x, weight, g, eps: float, out=None) -> np.ndarray:
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


# --- the records ----------------------------------------------------------------------

# --- layer norm (implemented above; the Numba backend has kernels of its own) -------------------
# layer_norm(x, weight, bias) over the last axis; layer_norm_grad(x, weight, g) packs the three
# cotangents into one flat array (its VJP: none; a second-order gradient takes the composed ops,
# `_layer_norm_grads`). Attribute: eps.


def _layer_norm_rule(x, weight, bias, eps):
    d = x.shape[-1] if x.ndim else 0
    if x.ndim < 1 or weight.shape != (d,) or bias.shape != (d,):
        raise ValueError(f"input {x.shape}, weight {weight.shape} and bias {bias.shape}: "
                         "expected (..., D), (D,) and (D,)")  # fmt: skip
    if not x.dtype == weight.dtype == bias.dtype or x.dtype.kind != "f":
        raise ValueError(f"input, weight and bias of one floating dtype, not {x.dtype}, "
                         f"{weight.dtype} and {bias.dtype}")  # fmt: skip
    return x.shape, x.dtype


def _layer_norm_grad_rule(x, weight, g, eps):
    shape, dtype = _layer_norm_rule(x, weight, weight, eps)
    if g.shape != shape:
        raise ValueError(f"cotangent {g.shape} for a result of {shape}")
    return (x.size + 2 * x.shape[-1],), dtype


def _layer_norm_vjp(wanted, g, out, x, weight, bias, eps, create_graph=False):
    if create_graph:
        grads = _layer_norm_grads(g, x, weight, eps)
    else:
        grads = unpack(layer_norm_grad(x, weight, g, eps=eps), x)
    return [d if w else None for w, d in zip(wanted, grads, strict=True)]


def _layer_norm_grads(g, x, weight, eps):
    """layer_norm's cotangents of x, weight and bias in composed, differentiable ops."""
    last, d = (x.ndim - 1,), float(x.shape[-1])
    centered = x - reductions.sum(x, axis=last, keepdims=True) / d
    rstd = 1.0 / sqrt(reductions.sum(centered * centered, axis=last, keepdims=True) / d + eps)
    xhat = centered * rstd
    dxhat = g * weight
    mean_dxhat = reductions.sum(dxhat, axis=last, keepdims=True) / d
    mean_dxhat_xhat = reductions.sum(dxhat * xhat, axis=last, keepdims=True) / d
    dx = (dxhat - mean_dxhat - xhat * mean_dxhat_xhat) * rstd
    return dx, sum_to(g * xhat, weight.shape), sum_to(g, weight.shape)


layer_norm = Primitive(
    "layer_norm", forward, _layer_norm_rule, _layer_norm_vjp, "in",
    accepts_out=True, joint=True, raises=False, rerun=True,
    scratch=lambda ins, a: scratch(ins[0]),
)  # fmt: skip
layer_norm_grad = Primitive(
    "layer_norm_grad", backward, _layer_norm_grad_rule, None,
    accepts_out=True, raises=False, scratch=lambda ins, a: scratch(ins[0]),
)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops import reductions  # noqa: E402
from tracegrad.core.ops.elementwise import sqrt  # noqa: E402
from tracegrad.core.ops.views import sum_to  # noqa: E402

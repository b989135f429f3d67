"""Layer norm's and batch norm's ops in NumPy (their records at the end; the Numba backend
runs kernels of its own, `compiler.kernels.normalization`).

Layer norm, over the last axis of x (..., D), with weight and bias (D,):

- `layer_norm`: (x - mean) / sqrt(var + eps) * weight + bias, the variance biased (PyTorch's);
- `layer_norm_grad(x, weight, g)`: the cotangents of x, weight and bias for the cotangent g of
  the result, packed into one flat array [dx | dweight | dbias] (`unpack`). The statistics are
  computed again from x: backward keeps x, not the normalized values.

Batch norm in training, per channel (axis 1) of x (N, C, ...) over every other axis, with weight
and bias (C,): `batch_norm` and `batch_norm_grad` as the two above (eagerly one op each, where
the composed ops made some twenty passes over the batch; a trace records the parts), and
`batch_stats(x)`, the (2, C) means and biased variances that move the running statistics.
"""

from __future__ import annotations

import numpy as np

from tracegrad.core.vocabulary import Primitive


def unpack(packed, x, d: int | None = None) -> tuple:
    """Views (dx, dweight, dbias) of a flat array (or tensor) laid out as [dx | dw | db], the
    weight's `d` numbers (the last axis's, for layer norm)."""
    n, d = x.size, x.shape[-1] if d is None else d
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


def backward(x, weight, g, eps: float, params: bool = True, out=None) -> np.ndarray:
    """[dx | dweight | dbias], flat; [dx] alone without `params` (a group norm's constant unit
    weight, a layer norm without affine: their sums would be thrown away)."""
    out = np.empty(x.size + 2 * x.shape[-1] * params, x.dtype) if out is None else out
    dx = out[: x.size].reshape(x.shape)
    xhat, rstd = _statistics(x, eps)
    xhat *= rstd
    if params:
        _, dweight, dbias = unpack(out, x)
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


def channels(x) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """A batch norm's axes of x (N, C, ...): every one but the channels', the shape a channel's
    (C,) numbers broadcast as, and the count of values per channel."""
    axes = (0, *range(2, x.ndim))
    return axes, (1, x.shape[1], *(1,) * (x.ndim - 2)), x.size // max(x.shape[1], 1)


def batch_forward(x, weight, bias, eps: float, out=None) -> np.ndarray:
    (mean, var), (_, shape, _) = _moments(x), channels(x)
    scale = weight / np.sqrt(var + eps)
    out = np.multiply(x, scale.reshape(shape), out=out)
    out += (bias - mean * scale).reshape(shape)
    return out


def batch_backward(x, weight, g, eps: float, out=None) -> np.ndarray:
    """dx = weight * rstd * (g - mean(g) - xhat * mean(g * xhat)) per channel (the statistics'
    own gradients folded in), dweight = sum(g * xhat), dbias = sum(g)."""
    axes, shape, count = channels(x)
    out = np.empty(x.size + 2 * x.shape[1], x.dtype) if out is None else out
    dx, dweight, dbias = unpack(out, x, shape[1])
    mean, var = _moments(x)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) * rstd.reshape(shape)
    np.sum(g, axis=axes, out=dbias)
    np.sum(g * xhat, axis=axes, out=dweight)
    xhat *= (dweight / count).reshape(shape)
    np.subtract(g, (dbias / count).reshape(shape), out=dx)
    dx -= xhat
    dx *= (weight * rstd).reshape(shape)
    return out


def batch_statistics(x, out=None) -> np.ndarray:
    out = np.empty((2, x.shape[1]), x.dtype) if out is None else out
    out[0], out[1] = _moments(x)
    return out


def _moments(x) -> tuple[np.ndarray, np.ndarray]:
    """Each channel's mean and biased variance (that of the centred values), shape (C,)."""
    axes, shape, _ = channels(x)
    mean = x.mean(axis=axes)
    centered = x - mean.reshape(shape)
    return mean, np.mean(np.square(centered, out=centered), axis=axes)


# --- the records ----------------------------------------------------------------------

# --- layer norm (implemented above; the Numba backend has kernels of its own) -------------------
# layer_norm(x, weight, bias) over the last axis; layer_norm_grad(x, weight, g) packs the three
# cotangents into one flat array (its VJP: none; a second-order gradient takes the composed ops,
# `_layer_norm_grads`). Attribute: eps.


def _affine_rule(x, weight, bias, ndim: int, d: int, expected: str):
    """x's shape and dtype, for x of `ndim` axes or more and a weight and bias of its `d`
    features (or channels), all three of one floating dtype."""
    if x.ndim < ndim or weight.shape != (d,) or bias.shape != (d,):
        raise ValueError(f"input {x.shape}, weight {weight.shape} and bias {bias.shape}: "
                         f"expected {expected}")  # fmt: skip
    if not x.dtype == weight.dtype == bias.dtype or x.dtype.kind != "f":
        raise ValueError(f"input, weight and bias of one floating dtype, not {x.dtype}, "
                         f"{weight.dtype} and {bias.dtype}")  # fmt: skip
    return x.shape, x.dtype


def _layer_norm_rule(x, weight, bias, eps):
    d = x.shape[-1] if x.ndim else 0
    return _affine_rule(x, weight, bias, 1, d, "(..., D), (D,) and (D,)")


def _layer_norm_grad_rule(x, weight, g, eps, params=True):
    shape, dtype = _layer_norm_rule(x, weight, weight, eps)
    if g.shape != shape:
        raise ValueError(f"cotangent {g.shape} for a result of {shape}")
    return (x.size + 2 * x.shape[-1] * params,), dtype


def _layer_norm_vjp(wanted, g, out, x, weight, bias, eps, create_graph=False):
    if create_graph:
        grads = _layer_norm_grads(g, x, weight, eps)
    elif wanted[1] or wanted[2]:
        grads = unpack(layer_norm_grad(x, weight, g, eps=eps), x)
    else:  # x's alone: the kernel skips the weight's and the bias's sums over the rows
        dx = layer_norm_grad(x, weight, g, eps=eps, params=False)
        grads = (dx.reshape(x.shape), None, None)
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


# --- batch norm in training (implemented above; the Numba backend has kernels of its own) -------
# batch_norm(x, weight, bias) by x's statistics per channel; batch_norm_grad(x, weight, g) packs
# [dx | dweight | dbias]; batch_stats(x) the (2, C) means and variances. Attribute: eps. A trace
# and a second-order gradient take the parts (`decompose`), which cse shares between them; a
# trace differentiates batch_norm by batch_norm_grad's parts (`traced_vjp`).


def _batch_norm_rule(x, weight, bias, eps):
    c = x.shape[1] if x.ndim >= 2 else 0
    found = _affine_rule(x, weight, bias, 2, c, "(N, C, ...), (C,) and (C,)")
    if x.size // c < 2:
        raise ValueError(f"expected more than 1 value per channel, got input {x.shape}")
    return found


def _batch_norm_grad_rule(x, weight, g, eps):
    shape, dtype = _batch_norm_rule(x, weight, weight, eps)
    if g.shape != shape:
        raise ValueError(f"cotangent {g.shape} for a result of {shape}")
    return (x.size + 2 * x.shape[1],), dtype


def _batch_stats_rule(x):
    if x.ndim < 2 or x.dtype.kind != "f" or x.size // max(x.shape[1], 1) < 1:
        raise ValueError(f"input {x.shape} ({x.dtype}); expected floating (N, C, ...)")
    return (2, x.shape[1]), x.dtype


def _batch_norm_vjp(wanted, g, out, x, weight, bias, eps, create_graph=False):
    grads = unpack(batch_norm_grad(x, weight, g, eps=eps), x, x.shape[1])
    return [d if w else None for w, d in zip(wanted, grads, strict=True)]


def _batch_moments_parts(x):
    """Each channel's mean and biased variance in composed ops, broadcastable against x."""
    axes, _, count = channels(x)
    mean = reductions.sum(x, axis=axes, keepdims=True) / float(count)
    centered = x - mean
    return mean, reductions.sum(centered * centered, axis=axes, keepdims=True) / float(count)


def _batch_norm_parts(x, weight, bias, eps):
    mean, var = _batch_moments_parts(x)
    shape = channels(x)[1]
    # one product by a per-channel scale (weight / std, as PyTorch's): dividing by std and then
    # multiplying by the weight made two passes over the batch, and four more in backward
    scale = 1.0 / sqrt(var + eps) * reshape(weight, shape=shape)
    return (x - mean) * scale + reshape(bias, shape=shape)


def _batch_norm_grad_parts(x, weight, g, eps):
    """batch_backward's formula in composed ops, packed as it packs: a trace differentiates
    batch_norm by it (`traced_vjp`), two passes over the batch (its sums, then dx) where the
    parts' own gradient makes three. The statistics are forward's (cse holds them)."""
    axes, shape, count = channels(x)
    mean, var = _batch_moments_parts(x)
    rstd = 1.0 / sqrt(var + eps)
    xhat = (x - mean) * rstd
    dbias = reductions.sum(g, axis=axes, keepdims=False)
    dweight = reductions.sum(g * xhat, axis=axes, keepdims=False)
    mean_g = reshape(dbias, shape=shape) / float(count)
    mean_g_xhat = reshape(dweight, shape=shape) / float(count)
    dx = (g - mean_g - xhat * mean_g_xhat) * (reshape(weight, shape=shape) * rstd)
    return concatenate(reshape(dx, shape=(x.size,)), dweight, dbias, axis=0)


def _batch_stats_parts(x):
    mean, var = _batch_moments_parts(x)
    c = (x.shape[1],)
    return concatenate(reshape(mean, shape=(1, *c)), reshape(var, shape=(1, *c)), axis=0)


batch_norm = Primitive(
    "batch_norm", batch_forward, _batch_norm_rule, _batch_norm_vjp, "in",
    accepts_out=True, joint=True, raises=False, rerun=True, decompose=_batch_norm_parts,
    traced_vjp=True,
)  # fmt: skip
batch_norm_grad = Primitive(
    "batch_norm_grad", batch_backward, _batch_norm_grad_rule, None,
    accepts_out=True, raises=False, decompose=_batch_norm_grad_parts,
)  # fmt: skip
batch_stats = Primitive(
    "batch_stats", batch_statistics, _batch_stats_rule, None,
    accepts_out=True, raises=False, rerun=True, decompose=_batch_stats_parts,
)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops import reductions  # noqa: E402
from tracegrad.core.ops.elementwise import sqrt  # noqa: E402
from tracegrad.core.ops.views import concatenate, reshape, sum_to  # noqa: E402

"""Attention's ops in NumPy (their records are in `primitives`; the Numba backend runs kernels of
its own, `tracegrad.compiler.kernels.attention`). Over queries q (..., L, E), keys k (..., S, E) and
values v (..., S, Ev) with the same leading axes:

- `forward`: softmax(q k^T * scale) v, where with `causal` query i sees keys 0..i only (PyTorch's
  `is_causal`: the mask aligned at the top left), laid out with the heads next to the features
  ((..., L, H, Ev) for (..., H, L, E) queries, `heads_next`): the layer after attention reads
  it that way (`y.transpose(1, 2).reshape(B, L, H * Ev)`), and then needs no copy;
- `backward(q, k, v, out, g)`: the cotangents of q, k and v for the cotangent g of `out` (both
  heads first), packed into one flat array (`unpack` gives the three views). The probabilities
  are rebuilt from q and k, not kept: what backward keeps is q, k, v and the output, never a
  (L x S) array.

Both work through the (batch) pairs in chunks, so their temporaries stay near CHUNK_BYTES.
"""

from __future__ import annotations

import numpy as np

CHUNK_BYTES = 8 << 20


def unpack(packed, q, k, v) -> tuple:
    """Views (dq, dk, dv) of a flat array (or tensor), shaped as q, k and v. Queries, keys and
    values of one shape (..., H, L, E) are laid out (..., L, 3, H, E), as a layer that computes
    them in one product holds them (`qkv.reshape(B, L, 3, H, E)`): the gradient of that product
    is then the packed array itself, not a copy gathered from three; others as [dq | dk | dv]."""
    if stacked(q, k, v):
        *lead, heads, rows, features = q.shape
        grid = packed.reshape(*lead, rows, 3, heads, features)
        return tuple(heads_next(grid[..., i, :, :]) for i in range(3))
    ends = [0, q.size, q.size + k.size, q.size + k.size + v.size]
    return tuple(packed[a:b].reshape(x.shape)
                 for a, b, x in zip(ends[:-1], ends[1:], (q, k, v), strict=True))  # fmt: skip


def stacked(q, k, v) -> bool:
    """Queries, keys and values of one shape with a heads axis: `unpack` interleaves them."""
    return q.ndim >= 3 and q.shape == k.shape == v.shape


def scratch(q, k, v, backward: bool) -> int:
    """Bytes of one call's temporaries: per pair of a chunk, the (L x S) probabilities, and in
    backward their cotangents and an (L x Ev) product."""
    rows, keys = q.shape[-2], k.shape[-2]
    pairs = min(_chunk(q.shape, keys, q.dtype), int(np.prod(q.shape[:-2])))
    per_pair = 2 * rows * keys + rows * v.shape[-1] if backward else rows * keys
    return pairs * per_pair * np.dtype(q.dtype).itemsize


def heads_next_axes(ndim: int) -> tuple[int, ...]:
    """The axes that swap (..., H, L, E) and (..., L, H, E): their own inverse (none below 3)."""
    return (*range(ndim - 3), ndim - 2, ndim - 3, ndim - 1) if ndim >= 3 else tuple(range(ndim))


def heads_next(x):
    """`x` with its heads and rows swapped (`heads_next_axes`): a view of an array, or of a
    tensor (whose transpose swaps two axes, as PyTorch's)."""
    if x.ndim < 3:
        return x
    return (
        np.swapaxes(x, -3, -2) if isinstance(x, np.ndarray) else x.transpose(x.ndim - 3, x.ndim - 2)
    )


def forward(q, k, v, scale: float, causal: bool, out=None) -> np.ndarray:
    o = np.empty((*q.shape[:-1], v.shape[-1]), q.dtype)
    q3, k3, v3, o3 = _flat(q), _flat(k), _flat(v), _flat_out(o)
    for lo, hi in _chunks(q.shape, k.shape[-2], q.dtype):
        p = _probabilities(q3[lo:hi], k3[lo:hi], scale, causal)
        np.matmul(p, v3[lo:hi], out=o3[lo:hi])
    if out is None:  # laid out heads next to features, as the plan's buffer is
        out = np.empty(heads_next(o).shape, o.dtype)
    np.copyto(heads_next(out), o)
    return out


def backward(q, k, v, o, g, scale: float, causal: bool, out=None) -> np.ndarray:
    out = np.empty(q.size + k.size + v.size, q.dtype) if out is None else out
    q3, k3, v3, o3, g3 = (_flat(a) for a in (q, k, v, o, g))
    grads = [np.empty(x.shape, x.dtype) for x in (q, k, v)]
    dq, dk, dv = (_flat_out(a) for a in grads)
    for lo, hi in _chunks(q.shape, k.shape[-2], q.dtype):
        p = _probabilities(q3[lo:hi], k3[lo:hi], scale, causal)
        gb = g3[lo:hi]
        np.matmul(np.swapaxes(p, -1, -2), gb, out=dv[lo:hi])
        dp = np.matmul(gb, np.swapaxes(v3[lo:hi], -1, -2))
        dp -= np.sum(gb * o3[lo:hi], axis=-1, keepdims=True)
        ds = np.multiply(p, dp, out=p)
        ds *= scale
        np.matmul(ds, k3[lo:hi], out=dq[lo:hi])
        np.matmul(np.swapaxes(ds, -1, -2), q3[lo:hi], out=dk[lo:hi])
    for view, grad in zip(unpack(_flat_out(out), q, k, v), grads, strict=True):
        np.copyto(view, grad)
    return out


def causal_mask(rows: int, keys: int) -> np.ndarray:
    """True where query i may see key j (j <= i)."""
    return np.tri(rows, keys, dtype=np.bool_)


def _probabilities(q, k, scale, causal) -> np.ndarray:
    s = np.matmul(q, np.swapaxes(k, -1, -2))
    s *= scale
    if causal:
        s[..., ~causal_mask(*s.shape[-2:])] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, *a.shape[-2:])


def _flat_out(a: np.ndarray) -> np.ndarray:
    """A view of a result buffer (C-contiguous, as the plan gives them) as `_flat` shapes it."""
    if not a.flags.c_contiguous:
        raise ValueError(f"attention writes C-contiguous results, not one of strides {a.strides}")
    return a.reshape(-1, *a.shape[-2:]) if a.ndim > 1 else a


def _chunk(shape, keys: int, dtype) -> int:
    """How many pairs a chunk holds: an (L x S) array each, CHUNK_BYTES in all (at least one)."""
    return max(1, CHUNK_BYTES // max(1, shape[-2] * keys * np.dtype(dtype).itemsize))


def _chunks(shape, keys: int, dtype):
    pairs, step = int(np.prod(shape[:-2])), _chunk(shape, keys, dtype)
    return [(lo, min(lo + step, pairs)) for lo in range(0, pairs, step)]

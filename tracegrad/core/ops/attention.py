"""Attention's ops in NumPy (their records at the end; the Numba backend runs kernels of
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

import math

import numpy as np

from tracegrad.core.vocabulary import Primitive

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


# --- the records ----------------------------------------------------------------------

# --- attention (implemented above; the Numba backend has kernels of its own) --------------------
# attention(q, k, v) is softmax(q k^T * scale [causal]) v with its heads next to its features
# (`heads_next`); attention_grad(q, k, v, out, g) takes out and g heads first, and
# packs the three cotangents into one flat array (its VJP: none; a second-order gradient takes
# the composed ops, `_attention_grads`). Attributes: scale, causal.


def _attention_rule(q, k, v, scale, causal):
    shape, dtype = _heads_first_rule(q, k, v)
    return tuple(shape[a] for a in heads_next_axes(len(shape))), dtype


def _heads_first_rule(q, k, v):
    if q.ndim < 2 or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] \
            or q.shape[-1] != k.shape[-1] or k.shape[-2] == 0:  # fmt: skip
        raise ValueError(f"query {q.shape}, key {k.shape} and value {v.shape}: expected "
                         "(..., L, E), (..., S, E) and (..., S, Ev) with S > 0")  # fmt: skip
    if not q.dtype == k.dtype == v.dtype or q.dtype.kind != "f":
        raise ValueError(f"query, key and value of one floating dtype, not {q.dtype}, "
                         f"{k.dtype} and {v.dtype}")  # fmt: skip
    return (*q.shape[:-1], v.shape[-1]), q.dtype


def _attention_grad_rule(q, k, v, out, g, scale, causal):
    shape, dtype = _heads_first_rule(q, k, v)
    if out.shape != shape or g.shape != shape:
        raise ValueError(f"output {out.shape} and its cotangent {g.shape}: expected {shape}")
    return (q.size + k.size + v.size,), dtype


def _attention_vjp(wanted, g, out, q, k, v, scale, causal, create_graph=False):
    g, out = heads_next(g), heads_next(out)  # heads first again
    if create_graph:  # the gradient is itself recorded: ops with VJPs of their own
        return _attention_grads(g, out, q, k, v, scale, causal)
    packed = attention_grad(q, k, v, out, g, scale=scale, causal=causal)
    grads = unpack(packed, q, k, v)
    return [x if w else None for w, x in zip(wanted, grads, strict=True)]


def _attention_grads(g, out, q, k, v, scale, causal):
    """attention's cotangents of q, k and v in composed, differentiable ops."""
    s = matmul(q, mT(k)) * scale
    if causal:
        s = where(causal_mask(q.shape[-2], k.shape[-2]), s, -math.inf)
    last = (s.ndim - 1,)
    e = exp(s - reductions.max(s, axis=last, keepdims=True))
    p = e / reductions.sum(e, axis=last, keepdims=True)
    ds = p * (matmul(g, mT(v)) - reductions.sum(g * out, axis=last, keepdims=True)) * scale
    return matmul(ds, k), matmul(mT(ds), q), matmul(mT(p), g)


def _attention_flops(ins, outs) -> int:
    """q k^T and p v forward (4 L S E), five such products backward; causal: about half."""
    q, k = ins[0], ins[1]
    return 2 * q.size * k.shape[-2] * (2 if len(ins) == 3 else 5)


attention = Primitive(
    "attention", forward, _attention_rule, _attention_vjp, "in+out",
    accepts_out=True, joint=True, flops=_attention_flops, raises=False, rerun=True,
    scratch=lambda ins, a: scratch(*ins[:3], backward=False),
)  # fmt: skip
attention_grad = Primitive(
    "attention_grad", backward, _attention_grad_rule, None, accepts_out=True,
    flops=_attention_flops, raises=False,
    scratch=lambda ins, a: scratch(*ins[:3], backward=True),
)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops import reductions  # noqa: E402
from tracegrad.core.ops.elementwise import exp, where  # noqa: E402
from tracegrad.core.ops.linalg import matmul  # noqa: E402
from tracegrad.core.ops.views import mT  # noqa: E402

"""Max-pooling's ops in NumPy (their records at the end; the Numba backend runs kernels
of its own, `compiler.kernels.pool`, for large enough ones). Over the windows of the last two
axes:

- `argmax(x)`: the position in each window of its first maximum (row-major; padding counts as
  -inf; a NaN wins, the last NaN of the window, as in PyTorch), as a small integer (int8 for
  windows of up to 128 taps);
- `maxima(x, idx)`: each window's maximum, which is `x` at `idx = argmax(x)`: max-pooling's
  value. It is computed without reading `idx`; its VJP reads only `idx`, so backward keeps
  the indices (a sixteenth of a float32 input for 2x2 windows) instead of `x`;
- `scatter(g, idx, shape)`: each window's value of `g` added at its position `idx` in zeros:
  the VJP of `maxima`;
- `gather(x, idx)`: `x` at `idx` in each window: the VJP of `scatter`, and `scatter` is its
  VJP, so max-pooling has derivatives of every order.

Attributes: kernel (kh, kw), stride (sh, sw), padding (ph, pw), dilation (dh, dw): pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.core.vocabulary import Kind, Primitive


def output_size(shape, kernel, stride, padding, dilation) -> tuple[int, int]:
    """(OH, OW) of pooling over the last two axes of `shape`; ValueError if the geometry is not
    one that max-pooling accepts (PyTorch's rules) or leaves a window without an element."""
    if len(shape) < 2:
        raise ValueError(f"input {tuple(shape)} needs two spatial axes")
    out = []
    for size, k, s, p, d in zip(shape[-2:], kernel, stride, padding, dilation, strict=True):
        if k < 1 or s < 1 or d < 1 or p < 0:
            raise ValueError(f"kernel {kernel}, stride {stride}, dilation {dilation} must be "
                             f"positive and padding {padding} non-negative")  # fmt: skip
        if 2 * p > k:
            raise ValueError(f"padding {padding} must be at most half the kernel {kernel}")
        o = (size + 2 * p - d * (k - 1) - 1) // s + 1
        if o < 1:
            raise ValueError(f"input {tuple(shape)} is smaller than the kernel {kernel}")
        taps = np.arange(o)[:, None] * s - p + np.arange(k) * d
        if not ((taps >= 0) & (taps < size)).any(axis=1).all():  # dilation can skip the input
            raise ValueError(
                f"input {tuple(shape)} with kernel {kernel}, padding {padding} "
                f"and dilation {dilation}: a window lies in the padding only"
            )
        out.append(o)
    return out[0], out[1]


def index_dtype(kernel) -> np.dtype:
    """The dtype of window positions 0 .. kh * kw - 1."""
    return np.dtype(np.int8 if kernel[0] * kernel[1] <= 128 else np.int32)


def _taps(shape, kernel, stride, padding, dilation):
    """Per window position t = i * kw + j: the slice of the padded input it reads for every
    window, and where it falls inside the input (an (OH, OW) mask; None: everywhere)."""
    oh, ow = output_size(shape, kernel, stride, padding, dilation)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    h, w = shape[-2:]
    rows = [np.arange(oh) * sh + i * dh - ph for i in range(kh)]
    cols = [np.arange(ow) * sw + j * dw - pw for j in range(kw)]
    taps = []
    for i in range(kh):
        for j in range(kw):
            index = (Ellipsis, slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
                     slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))  # fmt: skip
            inside = None
            if ph or pw:
                r, c = rows[i], cols[j]
                inside = ((r >= 0) & (r < h))[:, None] & ((c >= 0) & (c < w))[None, :]
                inside = None if inside.all() else inside
            taps.append((index, inside))
    return (oh, ow), taps


def _padded(x: np.ndarray, padding, value) -> np.ndarray:
    (ph, pw) = padding
    if not (ph or pw):
        return x
    return np.pad(x, [(0, 0)] * (x.ndim - 2) + [(ph, ph), (pw, pw)], constant_values=value)


def _low(dtype) -> Any:
    """What padding holds: below every value."""
    return {"f": -np.inf, "b": False}.get(dtype.kind) if dtype.kind in "fb" else np.iinfo(dtype).min


def argmax(x, *, kernel, stride, padding, dilation, out=None):
    """The first maximum of each window: the maxima first, then, from the last tap to the
    first, the taps equal to them. The taps are copied to contiguous arrays once: NumPy
    compares strided views element by element rather than in SIMD lanes, and
    `np.copyto(where=)` is slower still."""
    x = np.asarray(x)
    (oh, ow), taps = _taps(x.shape, kernel, stride, padding, dilation)
    xp = _padded(x, padding, _low(x.dtype))
    values = [np.ascontiguousarray(xp[index]) for index, _ in taps]
    m = values[0].copy()
    for v in values[1:]:
        np.maximum(m, v, out=m)  # NaN propagates
    k = np.empty(m.shape, index_dtype(kernel)) if out is None else out
    k[...] = len(taps) - 1
    hit = np.empty(m.shape, np.bool_)
    for t in reversed(range(len(taps) - 1)):
        np.equal(values[t], m, out=hit)
        if taps[t][1] is not None:
            hit &= taps[t][1]
        k -= (k - k.dtype.type(t)) * hit  # k = t where hit, without np.copyto's slow where=
    if x.dtype.kind == "f":
        nan = np.isnan(m)
        if nan.any():  # NaN wins, the last NaN of the window as in PyTorch
            for t, (_, inside) in enumerate(taps):
                np.putmask(k, nan & np.isnan(values[t]) & (True if inside is None else inside), t)
    return k


def maxima(x, idx, *, kernel, stride, padding, dilation, out=None):
    """The maximum of each window (NaN propagates), `x` at `idx` when `idx` is `argmax(x)`:
    max-pooling's value, from a fold of `np.maximum` over strided views (whole-array passes,
    where a gather at `idx` computes an index per element)."""
    x = np.asarray(x)
    _, taps = _taps(x.shape, kernel, stride, padding, dilation)
    xp = _padded(x, padding, _low(x.dtype))
    out = np.empty(np.shape(idx), x.dtype) if out is None else out
    np.copyto(out, xp[taps[0][0]])
    for index, _ in taps[1:]:
        np.maximum(out, xp[index], out=out)
    return out


def gather(x, idx, *, kernel, stride, padding, dilation, out=None):
    """`x` at `idx` in each window (max-pooling's second derivative reads it)."""
    x, idx = np.asarray(x), np.asarray(idx)
    _, taps = _taps(x.shape, kernel, stride, padding, dilation)
    out = np.empty(idx.shape, x.dtype) if out is None else out
    xp = _padded(x, padding, 0)
    for t, (index, _) in enumerate(taps):
        if t == 0:
            np.copyto(out, xp[index])
        else:
            np.putmask(out, idx == t, np.ascontiguousarray(xp[index]))
    return out


def overlapping(kernel, stride, dilation) -> bool:
    """Whether two windows can share an element: along an axis, two tap offsets that differ
    by a multiple of the stride."""
    return any(di * d % s == 0 for k, s, d in zip(kernel, stride, dilation, strict=True)
               for di in range(1, k))  # fmt: skip


def scatter(g, idx, *, shape, kernel, stride, padding, dilation, out=None):
    """Each window's value of `g` at its position `idx`, in zeros of `shape`; where windows
    overlap, their values add up."""
    g, idx = np.asarray(g), np.asarray(idx)
    _, taps = _taps(shape, kernel, stride, padding, dilation)
    (ph, pw) = padding
    padded = (*shape[:-2], shape[-2] + 2 * ph, shape[-1] + 2 * pw)
    if out is not None and not (ph or pw):
        gp = out
        gp[...] = 0
    else:
        gp = np.zeros(padded, g.dtype)
    add = overlapping(kernel, stride, dilation)
    zero = g.dtype.type(0)
    for t, (index, _) in enumerate(taps):
        part = np.where(idx == t, g, zero)
        if add:
            gp[index] += part
        else:  # each element in one window at most: assignment, no read
            gp[index] = part
    if gp is out:
        return out
    result = gp[..., ph : ph + shape[-2], pw : pw + shape[-1]]
    if out is None:
        return np.ascontiguousarray(result)
    np.copyto(out, result)
    return out


# --- the records ----------------------------------------------------------------------

# --- max-pooling (implemented above; the Numba backend has kernels of its own) -----------------
# max_pool2d(x, idx) is the windows' maxima, idx = max_pool2d_argmax(x) their positions: the
# VJP reads only the small indices. scatter and gather, linear in their first input, are each
# other's VJPs (every order of derivative). Attributes: kernel (kh, kw), stride (sh, sw),
# padding (ph, pw), dilation (dh, dw).


def _pool_windows(shape, kernel, stride, padding, dilation) -> tuple[int, ...]:
    return (*shape[:-2], *output_size(shape, kernel, stride, padding, dilation))


def _pool_indices(idx, windows, kernel) -> None:
    if idx.shape != windows or idx.dtype != index_dtype(kernel):
        expected = index_dtype(kernel)
        raise ValueError(f"indices {idx.shape} {idx.dtype} for windows {windows}: expected "
                         f"{expected}, as max_pool2d_argmax makes them")  # fmt: skip


def _pool_argmax_rule(x, kernel, stride, padding, dilation):
    return _pool_windows(x.shape, kernel, stride, padding, dilation), index_dtype(kernel)


def _pool_rule(x, idx, kernel, stride, padding, dilation):
    windows = _pool_windows(x.shape, kernel, stride, padding, dilation)
    _pool_indices(idx, windows, kernel)
    return windows, x.dtype


def _pool_scatter_rule(g, idx, shape, kernel, stride, padding, dilation):
    windows = _pool_windows(tuple(shape), kernel, stride, padding, dilation)
    if g.shape != windows:
        raise ValueError(f"values {g.shape} for the windows {windows} of {tuple(shape)}")
    _pool_indices(idx, windows, kernel)
    return shape, g.dtype


def _pool_vjp(g, out, x, idx, **geometry):
    return max_pool2d_scatter(g, idx, shape=x.shape, **geometry)


def _pool(name, impl, rule, vjp, **kw):
    # never raise: the positions they read are max_pool2d_argmax's, in range by construction
    return Primitive(name, impl, rule, vjp, "in1:" if vjp else "", accepts_out=True,
                     raises=False, **kw)  # fmt: skip


max_pool2d_argmax = _pool("max_pool2d_argmax", argmax, _pool_argmax_rule, None)
# cheap: rebuilt in backward (the next layer's weight gradient reads it), not kept; from the
# pre-activation when a ReLU came before it (simplify's `pool_before_monotone`)
max_pool2d = _pool("max_pool2d", maxima, _pool_rule, (_pool_vjp, None), kind=Kind.INDEX,
                   cheap=True)  # fmt: skip
max_pool2d_gather = _pool("max_pool2d_gather", gather, _pool_rule, (_pool_vjp, None),
                          kind=Kind.INDEX)  # fmt: skip
max_pool2d_scatter = _pool("max_pool2d_scatter", scatter, _pool_scatter_rule,
                           (lambda c, out, g, idx, shape, **a: max_pool2d_gather(c, idx, **a),
                            None), kind=Kind.INDEX)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]

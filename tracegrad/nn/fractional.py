"""Fractional max-pooling (Graham, 2014), PyTorch's `F.fractional_max_pool2d`/`3d` and their
modules: each plane's windows start at pseudo-random places, from one uniform sample per plane
and axis, so that an output of any size tiles the input; the max of each window, its gradient to
the window's first maximum (as PyTorch's). The windows' starts are tensor arithmetic on the
samples, so a compiled step draws new ones at every call. The modules are in `layers`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.frontend import creation
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import reshape, take_along_dim
from tracegrad.frontend.reductions import argmax
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = ["fractional_max_pool2d", "fractional_max_pool2d_with_indices", "fractional_max_pool3d",
           "fractional_max_pool3d_with_indices"]  # fmt: skip


def _tuple(v: Any, n: int) -> tuple:
    return tuple(v) if isinstance(v, Sequence) else (v,) * n


def _starts(sample: Tensor, size: int, out: int, pool: int) -> Tensor:
    """PyTorch's interval sequence for one axis, per plane: floor((i + u) a) - floor(u a) with
    a = (size - pool) / (out - 1), in the samples' dtype, the last window at the end."""
    last = creation.full((*sample.shape[:-1], 1), size - pool, dtype=np.int64)
    if out == 1:
        return last
    alpha = (size - pool) / (out - 1)
    steps = Tensor._of(np.arange(out - 1, dtype=sample.dtype))
    starts = P.floor((steps + sample) * alpha) - P.floor(sample * alpha)
    return P.concatenate(starts.astype(np.int64), last, axis=starts.ndim - 1)


def _fractional_max_pool(op: str, x: Any, kernel_size: Any, output_size: Any, output_ratio: Any,
                         return_indices: bool, samples: Any, dims: int) -> Any:  # fmt: skip
    x = as_tensor(x)
    if x.ndim == dims + 1:  # one unbatched sample
        samples = None if samples is None else as_tensor(samples)
        out = _fractional_max_pool(op, reshape(x, (1, *x.shape)), kernel_size, output_size,
                                   output_ratio, return_indices, samples, dims)  # fmt: skip
        return (out[0][0], out[1][0]) if return_indices else out[0]
    if x.ndim != dims + 2:
        raise ValueError(f"{op}: expected a {dims + 1}-d or {dims + 2}-d input, got shape "
                         f"{tuple(x.shape)}")  # fmt: skip
    spatial, pools = x.shape[2:], _tuple(kernel_size, dims)
    outs = _output_sizes(op, spatial, output_size, output_ratio, dims)
    for n, o, k in zip(spatial, outs, pools, strict=True):
        if o + k - 1 > n:
            raise RuntimeError(f"{op}: pool size {k} too large relative to input size {n} for "
                               f"output size {o}")  # fmt: skip
    lead = x.shape[:2]
    if samples is None:
        samples = creation.rand(*lead, dims, dtype=x.dtype)
    samples = as_tensor(samples)
    if tuple(samples.shape) != (*lead, dims):
        raise ValueError(f"{op}: _random_samples must be of shape {(*lead, dims)}, got "
                         f"{tuple(samples.shape)}")  # fmt: skip
    flat = _window_positions(samples, spatial, outs, pools)  # (N, C, *outs, window)
    values = reshape(x, (*lead, -1))
    gathered = take_along_dim(values, reshape(flat, (*lead, -1)), -1)
    windows = reshape(gathered, (*lead, *outs, math.prod(pools)))
    with no_grad():
        first = argmax(windows, -1, keepdim=True)  # the first maximum, as PyTorch's
    out = take_along_dim(windows, first, -1)[..., 0]
    if not return_indices:
        return out
    with no_grad():
        return out, take_along_dim(flat, first, -1)[..., 0]


def _output_sizes(op: str, spatial: Sequence[int], output_size: Any, output_ratio: Any,
                  dims: int) -> tuple[int, ...]:  # fmt: skip
    if output_size is not None:
        return tuple(int(o) for o in _tuple(output_size, dims))
    if output_ratio is None:
        raise ValueError(f"{op} requires specifying either an output_size or an output_ratio")
    ratios = _tuple(output_ratio, dims)
    if not all(0 < r < 1 for r in ratios):
        raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")
    return tuple(int(n * r) for n, r in zip(spatial, ratios, strict=True))


def _window_positions(samples: Tensor, spatial: Sequence[int], outs: Sequence[int],
                      pools: Sequence[int]) -> Tensor:  # fmt: skip
    """Each output's window as flat positions in its plane, (N, C, *outs, prod(pools)): the
    start of each axis's window plus the offsets within it, row-major over the axes."""
    dims = len(spatial)
    strides = [math.prod(spatial[a + 1 :]) for a in range(dims)]
    flat = None
    for a in range(dims):
        starts = _starts(samples[..., a : a + 1], spatial[a], outs[a], pools[a])
        offsets = Tensor._of(np.arange(pools[a], dtype=np.int64))
        # axis a's positions, broadcast over the outputs' and the window's other axes
        at = reshape(starts, (*starts.shape[:2], *[o if b == a else 1 for b, o in enumerate(outs)],
                              *[1] * dims))  # fmt: skip
        within = reshape(offsets, [k if b == a else 1 for b, k in enumerate(pools)])
        term = (at + within) * strides[a]
        flat = term if flat is None else flat + term
    return reshape(flat, (*flat.shape[: 2 + dims], math.prod(pools)))


def fractional_max_pool2d(input: Any, kernel_size: Any, output_size: Any = None,
                          output_ratio: Any = None, return_indices: bool = False,
                          _random_samples: Any = None) -> Any:  # fmt: skip
    """The max of (N, C, H, W) `input`'s pseudo-random windows of `kernel_size`, an output of
    `output_size` (or `output_ratio` of the input's); with `return_indices`, each maximum's flat
    position in its plane (for `max_unpool2d`). `_random_samples` (N, C, 2), in [0, 1): the
    width's and the height's samples (drawn when not given)."""
    samples = None if _random_samples is None else as_tensor(_random_samples).flip(-1)
    return _fractional_max_pool("fractional_max_pool2d", input, kernel_size, output_size,
                                output_ratio, return_indices, samples, 2)  # fmt: skip


def fractional_max_pool3d(input: Any, kernel_size: Any, output_size: Any = None,
                          output_ratio: Any = None, return_indices: bool = False,
                          _random_samples: Any = None) -> Any:  # fmt: skip
    """`fractional_max_pool2d` over (N, C, T, H, W); `_random_samples` (N, C, 3): the depth's,
    the height's and the width's."""
    return _fractional_max_pool("fractional_max_pool3d", input, kernel_size, output_size,
                                output_ratio, return_indices, _random_samples, 3)  # fmt: skip


def fractional_max_pool2d_with_indices(*args: Any, **kwargs: Any) -> tuple:
    return fractional_max_pool2d(*args, **{**kwargs, "return_indices": True})


def fractional_max_pool3d_with_indices(*args: Any, **kwargs: Any) -> tuple:
    return fractional_max_pool3d(*args, **{**kwargs, "return_indices": True})

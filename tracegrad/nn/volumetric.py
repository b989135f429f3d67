"""3-d convolution and pooling (video, volumes), as the 2-d ops over depth slices: a 3-d
convolution is the sum over the kernel's depth taps of 2-d convolutions of the input's depth
slices, all output depths at once (the slices stacked into the batch), and a transposed one the
sum of those convolutions' input gradients; a 3-d pool reduces the window's strided views of the
volume. Their gradients and compiled kernels are the 2-d ops' and the elementwise ones'."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.core.primitives import abs
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import (
    concatenate,
    permute,
    reshape,
    same_dtypes,
    stack,
    take_along_dim,
)
from tracegrad.frontend.mutation import scatter, scatter_add, scatter_reduce
from tracegrad.frontend.reductions import argmax, mean
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = [
    "adaptive_avg_pool3d",
    "adaptive_max_pool3d",
    "avg_pool3d",
    "conv3d",
    "conv_transpose3d",
    "lp_pool3d",
    "max_pool3d",
    "max_unpool3d",
]


def takes_unbatched(rank: int) -> Callable[[Callable], Callable]:
    """A pool of (N, C, *spatial) that also takes one unbatched (C, *spatial) input of `rank`
    axes, as PyTorch's: a batch of one, its axis dropped from each result."""

    def wrap(pool: Callable) -> Callable:
        @functools.wraps(pool)
        def pooled(input: Any, *args: Any, **kwargs: Any) -> Any:
            x = as_tensor(input)
            if x.ndim != rank:
                return pool(x, *args, **kwargs)
            out = pool(reshape(x, (1, *x.shape)), *args, **kwargs)
            return tuple(t[0] for t in out) if isinstance(out, tuple) else out[0]

        return pooled

    return wrap


def triple(v: int | Sequence[int], op: str, what: str) -> tuple[int, int, int]:
    t = (int(v),) * 3 if isinstance(v, int | np.integer) else tuple(int(a) for a in v)
    if len(t) != 3:
        raise ValueError(f"{op}: {what} must be an int or three ints, not {v!r}")
    return t


def _volume(x: Tensor, op: str) -> Tensor:
    if x.ndim != 5:
        raise ShapeError(f"{op}: input {x.shape} must be 5-d (N, C, D, H, W)")
    return x


def _depth_taps(x: Tensor, k: int, stride: int, dilation: int) -> tuple[list[Tensor], int]:
    """For each of the k depth taps, the slices it reads for every output depth: (N, C, Do, H, W)
    each (x already padded in depth), and Do."""
    out = (x.shape[2] - dilation * (k - 1) - 1) // stride + 1
    if out < 1:
        raise ShapeError(f"input depth {x.shape[2]} is smaller than the kernel's {k}")
    return [x[:, :, t * dilation : t * dilation + stride * (out - 1) + 1 : stride]
            for t in range(k)], out  # fmt: skip


def _as_images(x: Tensor) -> Tensor:
    """(N, C, D, H, W) as (N * D, C, H, W): each depth slice an image of the batch."""
    n, c, d, h, w = x.shape
    return reshape(permute(x, (0, 2, 1, 3, 4)), (n * d, c, h, w))


def _as_volume(y: Tensor, n: int) -> Tensor:
    """(N * D, C, H, W) back to (N, C, D, H, W)."""
    nd, c, h, w = y.shape
    return permute(reshape(y, (n, nd // n, c, h, w)), (0, 2, 1, 3, 4))


def _padded(x: Tensor, pads: Sequence[tuple[int, int]], value: float) -> Tensor:
    """x with (before, after) `pads` around its three spatial axes."""
    if not any(lo or hi for lo, hi in pads):
        return x
    return P.pad(x, pad_width=((0, 0), (0, 0), *pads), value=value)


def _same(kernel: Sequence[int], dilation: Sequence[int]) -> list[tuple[int, int]]:
    """PyTorch's "same" padding: any odd element after."""
    totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
    return [(t // 2, t - t // 2) for t in totals]


def conv3d(input: Any, weight: Any, bias: Any = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Tensor:  # fmt: skip
    """3-d cross-correlation of (N, C, D, H, W) `input` with (out, C / groups, kd, kh, kw)
    `weight`: for each depth tap, one 2-d convolution of the depth slices it reads, every
    output depth in one batch. One unbatched (C, D, H, W) volume is a batch of one."""
    if as_tensor(input).ndim == 4:
        return unbatched(conv3d, as_tensor(input), weight, bias, stride, padding, dilation, groups)
    x, w = _volume(as_tensor(input), "conv3d"), as_tensor(weight)
    if w.ndim != 5:
        raise ShapeError(f"conv3d: weight {w.shape} must be 5-d (out, in / groups, kd, kh, kw)")
    strides, dilations = triple(stride, "conv3d", "stride"), triple(dilation, "conv3d", "dilation")
    if padding == "same":
        if strides != (1, 1, 1):
            raise ValueError("conv3d: padding='same' needs stride 1")
        pads = _same(w.shape[2:], dilations)
    elif padding == "valid":
        pads = [(0, 0)] * 3
    else:
        pads = [(p, p) for p in triple(padding, "conv3d", "padding")]
    taps, _ = _depth_taps(_padded(x, [pads[0], (0, 0), (0, 0)], 0.0), w.shape[2], strides[0],
                          dilations[0])  # fmt: skip
    total = None
    for t, part in enumerate(taps):
        y = P.conv2d(_as_images(part), w[:, :, t], stride=strides[1:], padding=tuple(pads[1:]),
                     dilation=dilations[1:], groups=int(groups))  # fmt: skip
        total = y if total is None else total + y
    y = _as_volume(total, x.shape[0])
    return y if bias is None else y + reshape(as_tensor(bias), (-1, 1, 1, 1))


def ceil_extra(spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
               padding: Sequence[int],
               dilation: Sequence[int] | None = None) -> tuple[int, ...]:  # fmt: skip
    """The positions `ceil_mode` adds past the far edge of each spatial axis: enough for one
    more window where a partial one remains, but never a window that starts in that padding (the
    output size rule of PyTorch's pooling_output_shape)."""
    extra = []
    dilation = dilation or (1,) * len(kernel)
    for n, k, s, p, d in zip(spatial, kernel, stride, padding, dilation, strict=True):
        span = d * (k - 1) + 1
        out = -(-(n + 2 * p - span) // s) + 1
        if (out - 1) * s >= n + p:
            out -= 1
        extra.append(max((out - 1) * s + span - (n + 2 * p), 0))
    return tuple(extra)


def ceil_kernel(spatial: Sequence[int], kernel: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int] | None = None) -> tuple[int, ...]:  # fmt: skip
    """`ceil_mode`'s kernel: on an axis without dilation, a window wider than the padded input
    is that input (the one window `ceil_mode` leaves there, pooling the same), where padding
    the input out to the whole window made EfficientNet's `AvgPool2d(2560)` over 1 x 1 features
    a (N, C, 2560, 2560) array and 2560 x 2560 slices."""
    dilation = dilation or (1,) * len(kernel)
    axes = zip(spatial, kernel, padding, dilation, strict=True)
    return tuple(min(k, n + 2 * p) if d == 1 else k for n, k, p, d in axes)


class _Geometry(NamedTuple):
    """A 3-d pool's windows: kernel, stride, padding, dilation, and the far positions
    `ceil_mode` adds (each three ints)."""

    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    extra: tuple[int, ...]


def _geometry(x: Tensor, op: str, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool) -> _Geometry:  # fmt: skip
    kernel = triple(kernel_size, op, "kernel_size")
    strides = triple(stride if stride is not None and stride != [] else kernel, op, "stride")
    pads, dilations = triple(padding, op, "padding"), triple(dilation, op, "dilation")
    if min(*strides, *dilations) < 1 or min(pads) < 0:
        raise ValueError(f"{op}: stride {strides} and dilation {dilations} must be positive, "
                         f"padding {pads} non-negative")  # fmt: skip
    if any(2 * p > d * (k - 1) + 1 for p, k, d in zip(pads, kernel, dilations, strict=True)):
        raise ValueError(f"{op}: padding {pads} must be at most half the kernel {kernel}")
    extra = ceil_extra(x.shape[2:], kernel, strides, pads, dilations) if ceil_mode else (0, 0, 0)
    return _Geometry(kernel, strides, pads, dilations, extra)


def _windows(x: Tensor, op: str, g: _Geometry, value: float) -> list[Tensor]:
    """The kd * kh * kw strided views of the padded input whose elementwise max (or sum) is
    the pooling: each is one window element at every output position (row-major in the
    kernel)."""
    xp = _padded(x, [(p, p + e) for p, e in zip(g.padding, g.extra, strict=True)], value)
    outs = [(n - d * (k - 1) - 1) // s + 1
            for n, k, s, d in zip(xp.shape[2:], g.kernel, g.stride, g.dilation,
                                  strict=True)]  # fmt: skip
    if min(outs) < 1:
        raise ShapeError(f"{op}: input {x.shape} is smaller than the kernel {g.kernel}")
    (sd, sh, sw), (dd, dh, dw) = g.stride, g.dilation
    return [
        xp[:, :, i * dd : i * dd + sd * (outs[0] - 1) + 1 : sd,
           j * dh : j * dh + sh * (outs[1] - 1) + 1 : sh,
           k * dw : k * dw + sw * (outs[2] - 1) + 1 : sw]
        for i, j, k in itertools.product(*(range(n) for n in g.kernel))
    ]  # fmt: skip


def _flat_index(tap: Tensor, spatial: Sequence[int], g: _Geometry) -> Tensor:
    """Each window's tap `tap` (row-major in the kernel) as a flat index into the input's
    (D, H, W) volume: the window's origin plus the tap's offset."""
    tap, flat = tap.astype(np.int64), None
    outs = tap.shape[2:]
    for axis in range(3):
        inner = math.prod(g.kernel[axis + 1 :])
        offset = (tap // inner) % g.kernel[axis] if axis else tap // inner
        shape = [1, 1, 1]
        shape[axis] = outs[axis]
        origin = (np.arange(outs[axis]) * g.stride[axis] - g.padding[axis]).reshape(shape)
        position = Tensor._of(origin) + offset * g.dilation[axis]
        flat = position if flat is None else flat * spatial[axis] + position
    return flat


@takes_unbatched(4)
def max_pool3d(input: Any, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Any:  # fmt: skip
    """The max over each (kd, kh, kw) window (padding counts as -inf); ties send the gradient to
    the first maximum, as PyTorch does. `ceil_mode` adds -inf past the far edges for the last
    partial windows; `return_indices` also gives each maximum's flat position in its (D, H, W)
    volume (what `max_unpool3d` takes)."""
    x = _volume(as_tensor(input), "max_pool3d")
    g = _geometry(x, "max_pool3d", kernel_size, stride, padding, dilation, ceil_mode)
    views = _windows(x, "max_pool3d", g, -math.inf)
    out = functools.reduce(P.maximum, views)  # ties go left: the first maximum
    if not return_indices:
        return out
    with no_grad():
        tap = argmax(stack(views, -1), -1)
        return out, _flat_index(tap, x.shape[2:], g)


def _window_count(spatial: Sequence[int], g: _Geometry, include_pad: bool) -> np.ndarray:
    """How many of each window's elements are counted: those inside the input, or with
    `include_pad` inside the padded input (never the positions `ceil_mode` added): a constant."""
    inside = np.pad(np.ones(spatial), [(p, p) for p in g.padding], constant_values=include_pad)
    inside = np.pad(inside, [(0, e) for e in g.extra])
    outs = [(n - k) // s + 1 for n, k, s in zip(inside.shape, g.kernel, g.stride, strict=True)]
    return sum(inside[i : i + g.stride[0] * (outs[0] - 1) + 1 : g.stride[0],
                      j : j + g.stride[1] * (outs[1] - 1) + 1 : g.stride[1],
                      k : k + g.stride[2] * (outs[2] - 1) + 1 : g.stride[2]]
               for i, j, k in itertools.product(*(range(n) for n in g.kernel)))  # fmt: skip


@takes_unbatched(4)
def avg_pool3d(input: Any, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:  # fmt: skip
    """The mean over each (kd, kh, kw) window (padding zeros counted unless
    `count_include_pad=False`); with `ceil_mode` the last partial windows count only what lies
    inside the padded input, as in PyTorch."""
    x = _volume(as_tensor(input), "avg_pool3d")
    g = _geometry(x, "avg_pool3d", kernel_size, stride, padding, 1, ceil_mode)
    total = functools.reduce(P.add, _windows(x, "avg_pool3d", g, 0.0))
    if divisor_override:
        return total / float(divisor_override)
    if not any(g.extra) and (count_include_pad or not any(g.padding)):
        return total / float(math.prod(g.kernel))
    counted = _window_count(x.shape[2:], g, count_include_pad)
    return total / Tensor._of(counted.astype(x.dtype))


@takes_unbatched(4)
def adaptive_avg_pool3d(input: Any, output_size: int | Sequence[int | None]) -> Tensor:
    """The mean over each of PyTorch's adaptive windows: depths floor(i D / od) to
    ceil((i + 1) D / od), and likewise across height and width."""
    x = _volume(as_tensor(input), "adaptive_avg_pool3d")
    size = (output_size,) * 3 if isinstance(output_size, int) else tuple(output_size)
    outs = [n if o is None else int(o) for n, o in zip(x.shape[2:], size, strict=True)]
    if all(n % o == 0 for n, o in zip(x.shape[2:], outs, strict=True)):
        shape = [x.shape[0], x.shape[1]]
        for n, o in zip(x.shape[2:], outs, strict=True):
            shape += [o, n // o]
        return mean(reshape(x, tuple(shape)), (3, 5, 7))
    bounds = [[slice(i * n // o, -(-(i + 1) * n // o)) for i in range(o)]
              for n, o in zip(x.shape[2:], outs, strict=True)]  # fmt: skip
    cells = [mean(x[:, :, a, b, c], (2, 3, 4)) for a, b, c in itertools.product(*bounds)]
    return reshape(stack(cells, -1), (*x.shape[:2], *outs))


def _global_position(local: Tensor, cell: Sequence[tuple[int, int]],
                     spatial: Sequence[int]) -> Tensor:  # fmt: skip
    """A flat index `local` into the window `cell` ((start, stop) on each spatial axis) as a
    flat index into the whole spatial volume."""
    sizes = [b - a for a, b in cell]
    flat = None
    for axis, ((a, _), n) in enumerate(zip(cell, spatial, strict=True)):
        coordinate = (local // math.prod(sizes[axis + 1 :])) % sizes[axis] + a
        flat = coordinate if flat is None else flat * n + coordinate
    return flat


def adaptive_max(x: Tensor, outs: Sequence[int], return_indices: bool) -> Any:
    """The max over each of PyTorch's adaptive windows of (N, C, *spatial), any number of
    spatial axes (floor(i n / o) to ceil((i + 1) n / o) on each), a window at a time: its first
    maximum's value (so the gradient goes there, as in PyTorch) and, with `return_indices`, that
    maximum's flat position in the input's spatial volume."""
    spatial, lead = x.shape[2:], x.shape[:2]
    bounds = [[(i * n // o, -(-(i + 1) * n // o)) for i in range(o)]
              for n, o in zip(spatial, outs, strict=True)]  # fmt: skip
    values, indices = [], []
    for cell in itertools.product(*bounds):
        flat = reshape(x[(slice(None), slice(None), *(slice(a, b) for a, b in cell))], (*lead, -1))
        with no_grad():
            local = argmax(flat, -1)
            if return_indices:
                indices.append(_global_position(local, cell, spatial))
        values.append(take_along_dim(flat, reshape(local, (*lead, 1)), -1))
    out = reshape(concatenate(values, -1), (*lead, *outs))
    return (out, reshape(stack(indices, -1), (*lead, *outs))) if return_indices else out


def _output_size(x: Tensor, output_size: Any, op: str) -> list[int]:
    size = (output_size,) * 3 if isinstance(output_size, int) else tuple(output_size)
    if len(size) != 3:
        raise ValueError(f"{op}: output_size must be an int or three, not {output_size!r}")
    return [n if o is None else int(o) for n, o in zip(x.shape[2:], size, strict=True)]


@takes_unbatched(4)
def adaptive_max_pool3d(input: Any, output_size: int | Sequence[int | None],
                        return_indices: bool = False) -> Any:  # fmt: skip
    """The max over each of PyTorch's adaptive windows (`adaptive_max`): `max_pool3d` where
    they tile the volume; `return_indices` also gives each maximum's flat position in its
    (D, H, W) volume."""
    x = _volume(as_tensor(input), "adaptive_max_pool3d")
    outs = _output_size(x, output_size, "adaptive_max_pool3d")
    if not all(n % o == 0 for n, o in zip(x.shape[2:], outs, strict=True)):
        return adaptive_max(x, outs, return_indices)
    # the windows tile the volume: each window's elements along one last axis, whatever its size
    kernel = [n // o for n, o in zip(x.shape[2:], outs, strict=True)]
    tiles = reshape(
        x, (*x.shape[:2], *(v for pair in zip(outs, kernel, strict=True) for v in pair))
    )
    tiles = reshape(permute(tiles, (0, 1, 2, 4, 6, 3, 5, 7)), (*x.shape[:2], *outs, -1))
    with no_grad():
        tap = argmax(tiles, -1)
    out = reshape(take_along_dim(tiles, reshape(tap, (*tap.shape, 1)), -1), tap.shape)
    if not return_indices:
        return out
    with no_grad():
        g = _Geometry(tuple(kernel), tuple(kernel), (0, 0, 0), (1, 1, 1), (0, 0, 0))
        return out, _flat_index(tap, x.shape[2:], g)


def max_unpool3d(input: Any, indices: Any, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:  # fmt: skip
    """The inverse of `max_pool3d(..., return_indices=True)`: each value placed at its index in
    a zero (D, H, W) volume (the size max pooling came from, or `output_size`)."""
    op = "max_unpool3d"
    x, idx = _volume(as_tensor(input), op), as_tensor(indices)
    if idx.shape != x.shape:
        raise ShapeError(f"{op}: input {x.shape} and indices {idx.shape} must be the same shape")
    kernel = triple(kernel_size, op, "kernel_size")
    strides = triple(stride if stride is not None and stride != [] else kernel, op, "stride")
    pads = triple(padding, op, "padding")
    size = [(n - 1) * s + k - 2 * p
            for n, k, s, p in zip(x.shape[2:], kernel, strides, pads, strict=True)]  # fmt: skip
    if output_size is not None:
        want = [int(n) for n in tuple(output_size)[-3:]]
        if len(tuple(output_size)) not in (3, 5) or any(
            not n - s < w < n + s for w, n, s in zip(want, size, strides, strict=True)
        ):
            raise ValueError(f"{op}: output_size {tuple(output_size)} must be 3 or 5 sizes, each "
                             f"within the stride {strides} of {tuple(size)}")  # fmt: skip
        size = want
    return unpool(x, idx, size, any(s < k for s, k in zip(strides, kernel, strict=True)))


def unpool(x: Tensor, indices: Tensor, size: Sequence[int], overlapping: bool) -> Tensor:
    """(N, C, ...) `x` placed at its flat `indices` in zero (N, C, *size) volumes. Where the
    pool's windows overlap, one maximum can be two windows' (the same index twice): the value
    lands once, exactly (the max of its equal copies, where a scatter would average them) and,
    as in PyTorch, each copy gets the whole gradient at its index (a scatter-add's gradient,
    its value taken away again)."""
    n, c = x.shape[:2]
    zeros = Tensor._of(np.zeros((n, c, math.prod(size)), x.dtype))
    idx, src = reshape(indices, (n, c, -1)), reshape(x, (n, c, -1))
    if not overlapping:
        return reshape(scatter(zeros, 2, idx, src), (n, c, *size))
    added = scatter_add(zeros, 2, idx, src)
    once = scatter_reduce(zeros, 2, idx, src.detach(), "amax", include_self=False)
    flat = once + (added - added.detach())
    return reshape(flat, (n, c, *size))


@takes_unbatched(4)
def lp_pool3d(input: Any, norm_type: float, kernel_size: int | Sequence[int],
              stride: int | Sequence[int] | None = None,
              ceil_mode: bool = False) -> Tensor:  # fmt: skip
    """The p-norm of each window: (sum of x ** p) ** (1 / p), by average pooling, as PyTorch
    computes it (the sum's sign kept through a relu of its magnitude, so a window summing to
    zero has gradient zero); p = inf is the max of |x|."""
    x = as_tensor(input)
    if norm_type == math.inf:
        return max_pool3d(abs(x), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return -max_pool3d(-abs(x), kernel_size, stride, 0, 1, ceil_mode)
    kernel = triple(kernel_size, "lp_pool3d", "kernel_size")
    pooled = avg_pool3d(x**norm_type, kernel, stride, 0, ceil_mode)
    magnitude = P.maximum(0.0, abs(pooled))  # relu: zero first, so its gradient at 0 is 0
    return (P.sign(pooled) * magnitude * float(math.prod(kernel))) ** (1.0 / norm_type)


def _spread(v: Tensor, stride: int, offset: int, length: int) -> Tensor:
    """(N, C, D, H, W) `v` along a depth of `length`: slice i at offset + stride * i, zeros
    between and around."""
    if stride > 1:
        n, c, d, h, w = v.shape
        zeros = Tensor._of(np.zeros((n, c, d, stride - 1, h, w), v.dtype))
        v = reshape(concatenate([reshape(v, (n, c, d, 1, h, w)), zeros], 3),
                    (n, c, d * stride, h, w))[:, :, : stride * (d - 1) + 1]  # fmt: skip
    return _padded(v, [(offset, length - offset - v.shape[2]), (0, 0), (0, 0)], 0.0)


def unbatched(f: Callable, x: Tensor, *args: Any) -> Tensor:
    """`f` of one unbatched sample, as PyTorch's: a batch of one, the batch axis dropped."""
    return f(reshape(x, (1, *x.shape)), *args)[0]


def conv_transpose3d(input: Any, weight: Any, bias: Any = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0,
                     groups: int = 1, dilation: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
    """The transposed convolution of (N, in, D, H, W) `input` with (in, out / groups, kd, kh,
    kw) `weight`, the gradient of `conv3d` with respect to its input: for each depth tap, the
    2-d convolution's input gradient (`conv2d_input_grad`, whose VJPs are the convolution and
    its weight gradient) of every input depth slice at once, spread to the output depths that
    tap writes. `output_padding` adds positions at the far end of each spatial axis."""
    op = "conv_transpose3d"
    x, w = as_tensor(input), as_tensor(weight)
    same_dtypes(op, x, w, None if bias is None else as_tensor(bias))
    if x.ndim == 4:  # one unbatched volume
        return unbatched(conv_transpose3d, x, w, bias, stride, padding, output_padding, groups,
                         dilation)  # fmt: skip
    groups = int(groups)
    if x.ndim != 5 or w.ndim != 5 or groups < 1 or x.shape[1] != w.shape[0] or w.shape[0] % groups:
        raise ShapeError(f"{op}: input {x.shape} and weight {w.shape} with groups={groups}; "
                         "expected (N, in, D, H, W) and (in, out / groups, kd, kh, kw), in "
                         "divisible by groups")  # fmt: skip
    strides, dilations = triple(stride, op, "stride"), triple(dilation, op, "dilation")
    pads, extra = triple(padding, op, "padding"), triple(output_padding, op, "output_padding")
    for s, d, p, e in zip(strides, dilations, pads, extra, strict=True):
        if min(s, d) < 1 or p < 0:
            raise ValueError(f"{op}: stride {strides} and dilation {dilations} must be positive, "
                             f"padding {pads} non-negative")  # fmt: skip
        if not 0 <= e < max(s, d):
            raise ValueError(f"{op}: output_padding {extra} must be smaller than the stride "
                             f"{strides} or the dilation {dilations}")  # fmt: skip
    kernel = w.shape[2:]
    size = [(n - 1) * s - 2 * p + d * (k - 1) + e + 1
            for n, s, p, d, k, e in zip(x.shape[2:], strides, pads, dilations, kernel, extra,
                                        strict=True)]  # fmt: skip
    if min(size) < 1:
        raise ShapeError(f"{op}: input {x.shape}, weight {w.shape} and padding {pads} give an "
                         f"empty output {tuple(size)}")  # fmt: skip
    # the convolution of the output covers the input, plus (for an output_padding of at least
    # the stride) positions past its end: zeros, which add nothing
    covers = [(m + 2 * p - d * (k - 1) - 1) // s + 1
              for m, p, d, k, s in zip(size, pads, dilations, kernel, strides,
                                       strict=True)]  # fmt: skip
    x = _padded(x, [(0, c - n) for c, n in zip(covers, x.shape[2:], strict=True)], 0.0)
    images, full = _as_images(x), size[0] + 2 * pads[0]
    total = None
    for t in range(kernel[0]):
        y = P.conv2d_input_grad(images, w[:, :, t], shape=(images.shape[0], w.shape[1] * groups,
                                                           *size[1:]),
                                stride=strides[1:], padding=tuple((p, p) for p in pads[1:]),
                                dilation=dilations[1:], groups=groups)  # fmt: skip
        part = _spread(_as_volume(y, x.shape[0]), strides[0], t * dilations[0], full)
        total = part if total is None else total + part
    y = total[:, :, pads[0] : pads[0] + size[0]]
    return y if bias is None else y + reshape(as_tensor(bias), (-1, 1, 1, 1))

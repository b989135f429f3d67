"""3-d convolution and pooling (video, volumes), as the 2-d ops over depth slices: a 3-d
convolution is the sum over the kernel's depth taps of 2-d convolutions of the input's depth
slices, all output depths at once (the slices stacked into the batch); a 3-d pool is a 2-d pool
of every slice, then the same reduction across depth windows. Their gradients and compiled
kernels are the 2-d ops'."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend.functions import permute, reshape, stack
from tracegrad.frontend.reductions import mean
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = ["adaptive_avg_pool3d", "avg_pool3d", "conv3d", "max_pool3d"]


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
    output depth in one batch."""
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


def _windows(x: Tensor, op: str, kernel_size: Any, stride: Any, padding: Any,
             value: float) -> tuple[list[Tensor], tuple[int, ...]]:  # fmt: skip
    """The kd * kh * kw strided views of the padded input whose elementwise max (or sum) is
    the pooling: each is one window element at every output position; and the kernel."""
    x = _volume(x, op)
    kernel = triple(kernel_size, op, "kernel_size")
    strides = triple(stride if stride is not None and stride != [] else kernel, op, "stride")
    pads = triple(padding, op, "padding")
    if any(2 * p > k for p, k in zip(pads, kernel, strict=True)):
        raise ValueError(f"{op}: padding {pads} must be at most half the kernel {kernel}")
    xp = _padded(x, [(p, p) for p in pads], value)
    outs = [(n - k) // s + 1 for n, k, s in zip(xp.shape[2:], kernel, strides, strict=True)]
    if min(outs) < 1:
        raise ShapeError(f"{op}: input {x.shape} is smaller than the kernel {kernel}")
    views = [
        xp[:, :, i : i + strides[0] * (outs[0] - 1) + 1 : strides[0],
           j : j + strides[1] * (outs[1] - 1) + 1 : strides[1],
           k : k + strides[2] * (outs[2] - 1) + 1 : strides[2]]
        for i, j, k in itertools.product(*(range(n) for n in kernel))
    ]  # fmt: skip
    return views, kernel


def max_pool3d(input: Any, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:  # fmt: skip
    """The max over each (kd, kh, kw) window (padding counts as -inf)."""
    if triple(dilation, "max_pool3d", "dilation") != (1, 1, 1) or ceil_mode or return_indices:
        raise NotImplementedError("max_pool3d: dilation, ceil_mode and return_indices are not "
                                  "provided by tracegrad")  # fmt: skip
    views, _ = _windows(as_tensor(input), "max_pool3d", kernel_size, stride, padding, -math.inf)
    return functools.reduce(P.maximum, views)


def avg_pool3d(input: Any, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:  # fmt: skip
    """The mean over each (kd, kh, kw) window (padding zeros counted unless
    `count_include_pad=False`)."""
    if ceil_mode:
        raise NotImplementedError("avg_pool3d: ceil_mode is not provided by tracegrad")
    x = as_tensor(input)
    views, kernel = _windows(x, "avg_pool3d", kernel_size, stride, padding, 0.0)
    total = functools.reduce(P.add, views)
    if divisor_override:
        return total / float(divisor_override)
    if count_include_pad or triple(padding, "avg_pool3d", "padding") == (0, 0, 0):
        return total / float(math.prod(kernel))
    ones = Tensor._of(np.ones((1, 1, *x.shape[2:]), x.dtype))
    counted = functools.reduce(
        P.add, _windows(ones, "avg_pool3d", kernel_size, stride, padding, 0.0)[0]
    )
    return total / counted


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

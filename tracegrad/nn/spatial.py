"""Spatial transformers' sampling (`F.affine_grid`, `F.grid_sample`), with PyTorch's
coordinate conventions: a grid holds (x, y) in [-1, 1] per output pixel, -1 and 1 being the
centres of the corner pixels with `align_corners`, their outer edges without. A sample gathers
its four neighbours (one, for "nearest") and weighs them, so the gradient reaches the input
(scattered back through the gathers) and the grid (through the weights)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend.functions import clamp, matmul, permute, reshape
from tracegrad.frontend.rearrange import where
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = ["affine_grid", "grid_sample"]

_PADDING = ("zeros", "border", "reflection")


def affine_grid(theta: Any, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The (N, H, W, 2) sampling grid of the affine maps `theta` (N, 2, 3) over an output of
    `size` (N, C, H, W)."""
    t = as_tensor(theta)
    if len(size) != 4 or t.shape != (size[0], 2, 3):
        raise ShapeError(
            f"affine_grid: theta {t.shape} for size {tuple(size)}; expected theta (N, 2, 3) and "
            "size (N, C, H, W) (3-d grids are not provided)"
        )
    n, _, h, w = size
    xs, ys = _steps(w, bool(align_corners)), _steps(h, bool(align_corners))
    base = np.stack([*np.meshgrid(xs, ys), np.ones((h, w))], axis=-1).reshape(1, h * w, 3)
    grid = matmul(Tensor._of(base.astype(t.dtype)), permute(t, (0, 2, 1)))
    return reshape(grid, (n, h, w, 2))


def _steps(n: int, corners: bool) -> np.ndarray:
    """The normalized coordinates of n pixels' centres."""
    if n <= 1:
        return np.zeros(max(n, 1))
    steps = np.linspace(-1.0, 1.0, n)
    return steps if corners else steps * (n - 1) / n


def grid_sample(input: Any, grid: Any, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:  # fmt: skip
    """`input` (N, C, H, W) sampled at `grid` (N, Ho, Wo, 2): (N, C, Ho, Wo). Modes "bilinear",
    "nearest" and "bicubic" (PyTorch's cubic convolution, A = -0.75, each of the 4 x 4 taps
    folded into the image by the padding mode); outside the image "zeros", "border" (the edge
    pixel) or "reflection"."""
    x, g = as_tensor(input), as_tensor(grid)
    if x.ndim != 4 or g.ndim != 4 or g.shape[-1] != 2 or g.shape[0] != x.shape[0]:
        raise ShapeError(f"grid_sample: input {x.shape} and grid {g.shape}; expected (N, C, H, "
                         "W) and (N, Ho, Wo, 2) (5-d inputs are not provided)")  # fmt: skip
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', not "
                         f"{mode!r}")  # fmt: skip
    if padding_mode not in _PADDING:
        raise ValueError(f"grid_sample: padding_mode must be one of {_PADDING}")
    g = g if g.dtype == x.dtype else g.astype(x.dtype)
    n, c, h, w = x.shape
    corners = bool(align_corners)
    fold = padding_mode if mode != "bicubic" else "zeros"  # bicubic folds each tap instead
    ix = _source(g[..., 0], w, corners, fold)
    iy = _source(g[..., 1], h, corners, fold)
    pixels = permute(x, (0, 2, 3, 1))  # (N, H, W, C): a gather picks whole channel vectors
    batch = Tensor._of(np.arange(n).reshape(n, 1, 1))

    def tap(yi: Tensor, xi: Tensor) -> Tensor:
        """The pixels at (yi, xi), zeros where that is outside the image."""
        inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        yc = clamp(yi, 0, h - 1).astype(np.int64)
        xc = clamp(xi, 0, w - 1).astype(np.int64)
        v = pixels[batch, yc, xc]
        return v if padding_mode != "zeros" else v * inside.astype(x.dtype)[..., None]

    if mode == "bicubic":
        x0, y0 = P.floor(ix), P.floor(iy)
        wx, wy = _cubic_weights(ix - x0), _cubic_weights(iy - y0)

        def folded(yi: Tensor, xi: Tensor) -> Tensor:  # a tap, by the padding mode
            return tap(_fold(yi, h, corners, padding_mode), _fold(xi, w, corners, padding_mode))

        rows = [sum(folded(y0 + (i - 1), x0 + (j - 1)) * wx[j] for j in range(4))
                for i in range(4)]  # fmt: skip
        out = sum(row * wy[i] for i, row in enumerate(rows))
    elif mode == "nearest":
        out = tap(P.rint(iy), P.rint(ix))  # half to even, as PyTorch's nearbyint
        if g.requires_grad:  # PyTorch's grid gets a zero gradient here, not none
            out = out + where(Tensor._of(np.zeros(ix.shape + (1,), bool)), ix[..., None], 0.0)
    else:
        x0, y0 = P.floor(ix), P.floor(iy)
        wx, wy = (ix - x0)[..., None], (iy - y0)[..., None]
        top = tap(y0, x0) * (1 - wx) + tap(y0, x0 + 1) * wx
        bottom = tap(y0 + 1, x0) * (1 - wx) + tap(y0 + 1, x0 + 1) * wx
        out = top * (1 - wy) + bottom * wy
    return permute(out, (0, 3, 1, 2))


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """The 4 taps' weights of cubic convolution (A = -0.75) at fraction t past the second,
    each (..., 1) to weigh channel vectors."""
    a = -0.75

    def near(x: Tensor) -> Tensor:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: Tensor) -> Tensor:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [weight[..., None] for weight in (far(t + 1), near(t), near(1 - t), far(2 - t))]


def _source(coord: Tensor, size: int, corners: bool, padding: str) -> Tensor:
    """Normalized coordinates as pixel positions, folded back into the image for "border" and
    "reflection" as PyTorch does."""
    pos = (coord + 1) / 2 * (size - 1) if corners else ((coord + 1) * size - 1) / 2
    return _fold(pos, size, corners, padding)


def _fold(pos: Tensor, size: int, corners: bool, padding: str) -> Tensor:
    """A pixel position folded into the image by the padding mode (unchanged for "zeros")."""
    if padding == "reflection":
        pos = _reflect(pos, 0.0, size - 1.0) if corners else _reflect(pos, -0.5, size - 0.5)
    if padding != "zeros":
        pos = clamp(pos, 0, size - 1)
    return pos


def _reflect(pos: Tensor, low: float, high: float) -> Tensor:
    """pos reflected at `low` and `high` as often as it takes to land between them."""
    span = high - low
    if span <= 0:
        return pos * 0.0
    distance = P.abs(pos - low)
    extra = P.fmod(distance, span)
    flips = P.floor(distance / span)
    return P.where(P.fmod(flips, 2.0) == 0, low + extra, high - extra)

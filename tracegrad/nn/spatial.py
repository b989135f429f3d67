"""Spatial transformers' sampling (`F.affine_grid`, `F.grid_sample`), with PyTorch's
coordinate conventions: a grid holds (x, y) (and z, for volumes) in [-1, 1] per output pixel,
-1 and 1 being the centres of the corner pixels with `align_corners`, their outer edges
without. A sample gathers its neighbours (the cell's corners, 16 for bicubic, one for
"nearest") and weighs them, so the gradient reaches the input (scattered back through the
gathers) and the grid (through the weights)."""

from __future__ import annotations

import itertools
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
    `size` (N, C, H, W), or the (N, D, H, W, 3) grid of (N, 3, 4) maps over (N, C, D, H, W)."""
    t = as_tensor(theta)
    k = len(size) - 2
    if k not in (2, 3) or t.shape != (size[0], k, k + 1):
        raise ShapeError(
            f"affine_grid: theta {t.shape} for size {tuple(size)}; expected theta (N, 2, 3) and "
            "size (N, C, H, W), or theta (N, 3, 4) and size (N, C, D, H, W)"
        )
    spatial = tuple(size[2:])
    # each point's (x, y(, z), 1): the grid's coordinates list the axes last to first
    axes = [_steps(m, bool(align_corners)) for m in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")[::-1]
    base = np.stack([*mesh, np.ones(spatial)], axis=-1).reshape(1, -1, k + 1)
    grid = matmul(Tensor._of(base.astype(t.dtype)), permute(t, (0, 2, 1)))
    return reshape(grid, (size[0], *spatial, k))


def _steps(n: int, corners: bool) -> np.ndarray:
    """The normalized coordinates of n pixels' centres."""
    if n <= 1:
        return np.zeros(max(n, 1))
    steps = np.linspace(-1.0, 1.0, n)
    return steps if corners else steps * (n - 1) / n


def grid_sample(input: Any, grid: Any, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:  # fmt: skip
    """`input` (N, C, H, W) sampled at `grid` (N, Ho, Wo, 2): (N, C, Ho, Wo); or a volume (N,
    C, D, H, W) at (N, Do, Ho, Wo, 3). The grid's last axis lists x, y (and z). Modes
    "bilinear" (trilinear for volumes), "nearest" and, for images, "bicubic" (PyTorch's cubic
    convolution, A = -0.75, each of the 4 x 4 taps folded into the image by the padding mode);
    outside the image "zeros", "border" (the edge pixel) or "reflection"."""
    x, g = as_tensor(input), as_tensor(grid)
    k = x.ndim - 2  # spatial axes
    if k not in (2, 3) or g.ndim != x.ndim or g.shape[-1] != k or g.shape[0] != x.shape[0]:
        raise ShapeError(f"grid_sample: input {x.shape} and grid {g.shape}; expected (N, C, H, "
                         "W) with (N, Ho, Wo, 2), or (N, C, D, H, W) with (N, Do, Ho, Wo, "
                         "3)")  # fmt: skip
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', not "
                         f"{mode!r}")  # fmt: skip
    if mode == "bicubic" and k == 3:
        raise ValueError("grid_sample: bicubic interpolation only supports 4D input")
    if padding_mode not in _PADDING:
        raise ValueError(f"grid_sample: padding_mode must be one of {_PADDING}")
    g = g if g.dtype == x.dtype else g.astype(x.dtype)
    n, sizes = x.shape[0], x.shape[2:]
    corners = bool(align_corners)
    fold = padding_mode if mode != "bicubic" else "zeros"  # bicubic folds each tap instead
    # each spatial axis's positions (depth, height, width): the grid lists them last to first
    pos = [_source(g[..., k - 1 - a], sizes[a], corners, fold) for a in range(k)]
    pixels = permute(x, (0, *range(2, 2 + k), 1))  # channels last: a gather picks vectors
    batch = Tensor._of(np.arange(n).reshape(n, *(1,) * k))

    def tap(at: list[Tensor]) -> Tensor:
        """The pixels at integer positions `at` (one per axis), zeros outside the image."""
        inside = None
        for i, size in zip(at, sizes, strict=True):
            ok = (i >= 0) & (i <= size - 1)
            inside = ok if inside is None else inside & ok
        picks = (clamp(i, 0, s - 1).astype(np.int64) for i, s in zip(at, sizes, strict=True))
        v = pixels[(batch, *picks)]
        return v if padding_mode != "zeros" else v * inside.astype(x.dtype)[..., None]

    if mode == "bicubic":
        (iy, ix), (h, w) = pos, sizes
        x0, y0 = P.floor(ix), P.floor(iy)
        wx, wy = _cubic_weights(ix - x0), _cubic_weights(iy - y0)

        def folded(yi: Tensor, xi: Tensor) -> Tensor:  # a tap, by the padding mode
            return tap([_fold(yi, h, corners, padding_mode), _fold(xi, w, corners, padding_mode)])

        rows = [sum(folded(y0 + (i - 1), x0 + (j - 1)) * wx[j] for j in range(4))
                for i in range(4)]  # fmt: skip
        out = sum(row * wy[i] for i, row in enumerate(rows))
    elif mode == "nearest":
        out = tap([P.rint(p) for p in pos])  # half to even, as PyTorch's nearbyint
        if g.requires_grad:  # PyTorch's grid gets a zero gradient here, not none
            out = out + where(Tensor._of(np.zeros(pos[0].shape + (1,), bool)), pos[0][..., None],
                              0.0)  # fmt: skip
    else:  # each corner of the cell around the position, weighted by the opposite volume
        low = [P.floor(p) for p in pos]
        frac = [(p - lo)[..., None] for p, lo in zip(pos, low, strict=True)]
        out = None
        for corner in itertools.product((0, 1), repeat=k):
            weight = None
            for f, c in zip(frac, corner, strict=True):
                weight = (f if c else 1 - f) if weight is None else weight * (f if c else 1 - f)
            term = tap([lo + c for lo, c in zip(low, corner, strict=True)]) * weight
            out = term if out is None else out + term
    return permute(out, (0, k + 1, *range(1, k + 1)))


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

"""Layers that resize or pad images, with PyTorch's arguments: pixel (un)shuffle, upsampling,
and the padding layers (widths as in F.pad: (left, right) or (left, right, top, bottom))."""

from __future__ import annotations

from collections.abc import Sequence

from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import functional as F
from tracegrad.nn.modules import Module

__all__ = ["CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "PixelShuffle", "PixelUnshuffle", "ReflectionPad1d",
           "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d",
           "ZeroPad1d", "ZeroPad2d", "ZeroPad3d"]  # fmt: skip


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class Upsample(Module):
    """F.interpolate as a layer."""

    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                 align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None):  # fmt: skip
        super().__init__()
        if isinstance(scale_factor, Sequence):  # PyTorch keeps floats (and reprs them so)
            scale_factor = tuple(float(f) for f in scale_factor)
        elif scale_factor is not None:
            scale_factor = float(scale_factor)
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)  # fmt: skip

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "bilinear", align_corners=True)


class _PadNd(Module):
    dims = 2
    mode = "constant"

    def __init__(self, padding: int | Sequence[int], value: float | None = None):
        super().__init__()
        widths = (padding,) * (2 * self.dims) if isinstance(padding, int) else tuple(padding)
        if len(widths) != 2 * self.dims:
            raise ValueError(f"{type(self).__name__}: padding must be an int or {2 * self.dims} "
                             f"widths, not {padding!r}")  # fmt: skip
        self.padding, self.value = widths, value

    def forward(self, x: Tensor) -> Tensor:
        return F.pad(x, self.padding, self.mode, self.value)

    def extra_repr(self) -> str:
        return f"{self.padding}"  # PyTorch's: the widths alone (and a constant pad's value)


class ConstantPad1d(_PadNd):
    dims = 1

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"

    def __init__(self, padding: int | Sequence[int], value: float):
        super().__init__(padding, value)


class ConstantPad2d(ConstantPad1d):
    dims = 2


class ConstantPad3d(ConstantPad1d):
    dims = 3


class ZeroPad1d(ConstantPad1d):
    def __init__(self, padding: int | Sequence[int]):
        super().__init__(padding, 0.0)

    extra_repr = _PadNd.extra_repr


class ZeroPad2d(ZeroPad1d):
    dims = 2


class ZeroPad3d(ZeroPad1d):
    dims = 3


class ReflectionPad1d(_PadNd):
    dims, mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    mode = "reflect"


class ReplicationPad1d(_PadNd):
    dims, mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    mode = "replicate"


class CircularPad1d(_PadNd):
    dims, mode = 1, "circular"


class CircularPad2d(_PadNd):
    mode = "circular"


class ReflectionPad3d(_PadNd):
    dims, mode = 3, "reflect"


class ReplicationPad3d(_PadNd):
    dims, mode = 3, "replicate"


class CircularPad3d(_PadNd):
    dims, mode = 3, "circular"

"""`torch.fft` with PyTorch's meanings: `fft`, `ifft`, `rfft`, `irfft`, `hfft`, `ihfft`, their 2-D
and n-D forms, `fftfreq`, `rfftfreq`, `fftshift` and `ifftshift`, over the op
table's three transforms (`core/ops/fft.py`), which differentiate as PyTorch's.

As PyTorch's: `n` (or `s`, one length per transformed dimension, -1 keeping the input's) pads
the input with zeros or trims it first; `s` without `dim` transforms the last len(s) dimensions;
`norm` is "backward" (the default: the inverse transforms divide by n), "forward" or "ortho"
(both by sqrt(n)). Real inputs of the complex transforms are made complex, integers the default
float first; float32 gives complex64 and float64 complex128. `irfft` and `hfft` give 2 (m - 1)
points from m bins unless told otherwise; like pocketfft's (and PyTorch's), they ignore the
imaginary parts of the bins that are their own mirror images."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.ops import shapes
from tracegrad.frontend.device import check_device
from tracegrad.frontend.elementwise import view_as_real
from tracegrad.frontend.functions import astype, pytorch_keywords
from tracegrad.frontend.rearrange import roll
from tracegrad.frontend.tensor import Tensor, as_tensor, get_default_dtype

# PyTorch's `norm`: the op's `scale` of a forward transform, and of an inverse one
_NORMS = {None: ("none", "n"), "backward": ("none", "n"), "ortho": ("sqrt", "sqrt"),
          "forward": ("n", "none")}  # fmt: skip


def _scale(norm: str | None, forward: bool) -> str:
    if norm not in _NORMS:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    return _NORMS[norm][0 if forward else 1]


def _floating(x: Tensor) -> Tensor:
    return x if x.dtype.kind in "fc" else astype(x, get_default_dtype())


def _complex(x: Tensor) -> Tensor:
    x = _floating(x)
    return x if x.dtype.kind == "c" else astype(x, shapes.complex_dtype(x.dtype))


def _real(x: Tensor, op: str) -> Tensor:
    if x.dtype.kind == "c":
        raise RuntimeError(f"{op} expects a real input tensor, but got {x.dtype}")
    return _floating(x)


def _dims(x: Tensor, s: Sequence[int] | None, dim: Any, op: str) -> list[int]:
    """The dimensions to transform, PyTorch's way: `dim` (wrapped, distinct), else the last
    len(s) ones, else all of them."""
    if dim is None:
        if s is None:
            return list(range(x.ndim))
        if len(s) > x.ndim:
            raise RuntimeError(f"{op}: got shape with {len(s)} values but input tensor only has "
                               f"{x.ndim} dimensions")  # fmt: skip
        return list(range(x.ndim - len(s), x.ndim))
    dims = [dim] if isinstance(dim, int | np.integer) else list(dim)
    for d in dims:
        if not -x.ndim <= d < max(x.ndim, 1):
            raise IndexError(f"{op}: dimension {d} out of range for a {x.ndim}-d tensor "
                             f"of shape {x.shape}")  # fmt: skip
    dims = [int(d) % max(x.ndim, 1) for d in dims]
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"{op}: FFT dims must be unique, got {dims}")
    if s is not None and len(s) != len(dims):
        raise RuntimeError(f"{op}: when given, dim and shape arguments must have the same "
                           f"length, got s={list(s)} and dim={dims}")  # fmt: skip
    if not dims:
        raise RuntimeError(f"{op}: no dimension to transform")
    return dims


def _lengths(x: Tensor, s: Sequence[int] | None, dims: list[int], op: str) -> list[int]:
    lengths = [x.shape[d] if s is None or s[i] == -1 else int(s[i]) for i, d in enumerate(dims)]
    for n in lengths:
        if n < 1:
            raise RuntimeError(f"{op}: Invalid number of data points ({n}) specified")
    return lengths


def _resized(x: Tensor, dims: list[int], lengths: list[int]) -> Tensor:
    """x trimmed or padded with zeros at the end of each of `dims` to `lengths`."""
    want = list(x.shape)
    for d, n in zip(dims, lengths, strict=True):
        want[d] = n
    if any(w < m for w, m in zip(want, x.shape, strict=True)):
        x = P.getitem(x, template=tuple(slice(0, w) for w in want))
    if any(w > m for w, m in zip(want, x.shape, strict=True)):
        width = tuple((0, max(w - m, 0)) for w, m in zip(want, x.shape, strict=True))
        x = P.pad(x, pad_width=width, value=0.0)
    return x


def _one(n: int | None) -> list[int] | None:
    return None if n is None else [n]


def _c2c(input: Any, s: Any, dim: Any, norm: str | None, forward: bool, op: str) -> Tensor:
    x = _complex(as_tensor(input))
    dims = _dims(x, s, dim, op)
    x = _resized(x, dims, _lengths(x, s, dims, op))
    return P.fft_c2c(x, axes=tuple(dims), scale=_scale(norm, forward), forward=forward)


def _r2c(input: Any, s: Any, dim: Any, norm: str | None, forward: bool, op: str) -> Tensor:
    """The half spectrum; of the inverse direction (ihfft), its conjugate."""
    x = _real(as_tensor(input), op)
    dims = _dims(x, s, dim, op)
    x = _resized(x, dims, _lengths(x, s, dims, op))
    out = P.fft_r2c(x, axes=tuple(dims), scale=_scale(norm, forward))
    return out if forward else P.conj(out)


def _c2r(input: Any, s: Any, dim: Any, norm: str | None, forward: bool, op: str) -> Tensor:
    """Real values from a half spectrum: n = 2 (m - 1) along the last dimension unless `s`
    says; of the forward direction (hfft), from its conjugate."""
    x = _complex(as_tensor(input))
    dims = _dims(x, s, dim, op)
    n = int(s[-1]) if s is not None and s[-1] != -1 else 2 * (x.shape[dims[-1]] - 1)
    if n < 1:
        raise RuntimeError(f"{op}: Invalid number of data points ({n}) specified")
    others = _lengths(x, None if s is None else s[:-1], dims[:-1], op)
    x = _resized(x, dims, [*others, n // 2 + 1])
    x = P.conj(x) if forward else x
    return P.fft_c2r(x, axes=tuple(dims), scale=_scale(norm, forward), n=n)


@pytorch_keywords
def fft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The discrete Fourier transform along `dim`."""
    return _c2c(input, _one(n), dim, norm, True, "fft")


@pytorch_keywords
def ifft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    return _c2c(input, _one(n), dim, norm, False, "ifft")


@pytorch_keywords
def fft2(input: Any, s: Any = None, dim: Any = (-2, -1), norm: str | None = None) -> Tensor:
    return _c2c(input, s, dim, norm, True, "fft2")


@pytorch_keywords
def ifft2(input: Any, s: Any = None, dim: Any = (-2, -1), norm: str | None = None) -> Tensor:
    return _c2c(input, s, dim, norm, False, "ifft2")


@pytorch_keywords
def fftn(input: Any, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:
    return _c2c(input, s, dim, norm, True, "fftn")


@pytorch_keywords
def ifftn(input: Any, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:
    return _c2c(input, s, dim, norm, False, "ifftn")


@pytorch_keywords
def rfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The n // 2 + 1 bins of a real signal's transform that the rest mirror."""
    return _r2c(input, _one(n), dim, norm, True, "rfft")


@pytorch_keywords
def irfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The real signal of n points (2 (m - 1) by default) whose rfft is `input`'s m bins."""
    return _c2r(input, _one(n), dim, norm, False, "irfft")


@pytorch_keywords
def rfft2(input: Any, s: Any = None, dim: Any = (-2, -1), norm: str | None = None) -> Tensor:
    return _r2c(input, s, dim, norm, True, "rfft2")


@pytorch_keywords
def irfft2(input: Any, s: Any = None, dim: Any = (-2, -1), norm: str | None = None) -> Tensor:
    return _c2r(input, s, dim, norm, False, "irfft2")


@pytorch_keywords
def rfftn(input: Any, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:
    return _r2c(input, s, dim, norm, True, "rfftn")


@pytorch_keywords
def irfftn(input: Any, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:
    return _c2r(input, s, dim, norm, False, "irfftn")


@pytorch_keywords
def hfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The real transform of a signal with Hermitian symmetry, given by its first half."""
    return _c2r(input, _one(n), dim, norm, True, "hfft")


@pytorch_keywords
def ihfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """hfft's inverse: the half spectrum of the inverse transform of a real signal."""
    return _r2c(input, _one(n), dim, norm, False, "ihfft")


@pytorch_keywords
def hfft2(input: Any, s: Any = None, dim: Any = (-2, -1), norm: str | None = None) -> Tensor:
    return _c2r(input, s, dim, norm, True, "hfft2")


@pytorch_keywords
def ihfft2(input: Any, s: Any = None, dim: Any = (-2, -1), norm: str | None = None) -> Tensor:
    return _r2c(input, s, dim, norm, False, "ihfft2")


@pytorch_keywords
def hfftn(input: Any, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:
    """hfft over several dimensions: the last one's input is the half spectrum."""
    return _c2r(input, s, dim, norm, True, "hfftn")


@pytorch_keywords
def ihfftn(input: Any, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:
    return _r2c(input, s, dim, norm, False, "ihfftn")


@pytorch_keywords
def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, layout: Any = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:  # fmt: skip
    """The frequencies of fft's bins, [0, 1, ..., -2, -1] / (d n), in the default float dtype
    (or `dtype`), computed in it as PyTorch does."""
    check_device(device, "fftfreq")
    dtype = np.dtype(get_default_dtype() if dtype is None else dtype)
    k = np.concatenate([np.arange((n + 1) // 2), np.arange(-(n // 2), 0)]).astype(dtype)
    return Tensor._of(k * dtype.type(1.0 / (n * d)), requires_grad=requires_grad)


@pytorch_keywords
def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, layout: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
    """The frequencies of rfft's bins, [0, 1, ..., n // 2] / (d n)."""
    check_device(device, "rfftfreq")
    dtype = np.dtype(get_default_dtype() if dtype is None else dtype)
    k = np.arange(n // 2 + 1).astype(dtype)
    return Tensor._of(k * dtype.type(1.0 / (n * d)), requires_grad=requires_grad)


# --- the short-time transform (torch.stft, torch.istft) ---------------------------------------

_PAD_INDEX = {"reflect": lambda i, n: np.abs(i) - 2 * np.maximum(np.abs(i) - (n - 1), 0),
              "replicate": lambda i, n: np.clip(i, 0, n - 1),
              "circular": lambda i, n: i % n}  # fmt: skip


def _window(window: Any, n_fft: int, win_length: int | None, dtype: np.dtype) -> Tensor:
    """The window (rectangular by default) zero-padded to n_fft on both sides, as PyTorch's."""
    win_length = n_fft if win_length is None else win_length
    if not 0 < win_length <= n_fft:
        raise RuntimeError(f"stft: expected 0 < win_length <= n_fft, got {win_length}")
    w = Tensor._of(np.ones(win_length, dtype)) if window is None else as_tensor(window)
    if w.shape != (win_length,):
        raise RuntimeError(f"stft: expected a 1-D window of size win_length={win_length}, got "
                           f"{w.shape}")  # fmt: skip
    left = (n_fft - win_length) // 2
    return P.pad(w, pad_width=((left, n_fft - win_length - left),), value=0.0)


@pytorch_keywords
def stft(input: Any, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
         window: Any = None, center: bool = True, pad_mode: str = "reflect",
         normalized: bool = False, onesided: bool | None = None,
         return_complex: bool | None = None) -> Tensor:  # fmt: skip
    """PyTorch's short-time Fourier transform of (L,) or (B, L) signals: frames of n_fft points
    every hop_length (n_fft // 4), times the window, transformed; (B, bins, frames). `center`
    pads n_fft // 2 on both sides first (`pad_mode` "reflect", "constant", "replicate" or
    "circular"); `normalized` divides by sqrt(n_fft); real signals give the half spectrum
    unless onesided=False. Differentiable, a gather and an rfft."""
    x = _floating(as_tensor(input))
    if return_complex is None and x.dtype.kind != "c":
        raise RuntimeError("stft requires the return_complex parameter be given for real "
                           "inputs (PyTorch's rule)")  # fmt: skip
    if x.ndim not in (1, 2):
        raise RuntimeError(f"stft: expected a 1-D or 2-D signal, got shape {x.shape}")
    hop = n_fft // 4 if hop_length is None else hop_length
    w = _window(window, n_fft, win_length, shapes.real_dtype(x.dtype))
    onesided = x.dtype.kind != "c" and w.dtype.kind != "c" if onesided is None else onesided
    if onesided and (x.dtype.kind == "c" or w.dtype.kind == "c"):
        raise RuntimeError("stft: cannot have onesided output if window or input is complex")
    if center:
        x = _padded(x, n_fft // 2, pad_mode)
    n = x.shape[-1]
    if not 0 < n_fft <= n or hop < 1:
        raise RuntimeError(f"stft: expected 0 < n_fft <= {n} and hop_length > 0, got n_fft="
                           f"{n_fft}, hop_length={hop}")  # fmt: skip
    starts = np.arange(1 + (n - n_fft) // hop) * hop
    frames = x[..., Tensor._of(starts[:, None] + np.arange(n_fft))] * w  # (..., frames, n_fft)
    norm = "ortho" if normalized else None
    out = rfft(frames, norm=norm) if onesided else fft(frames, norm=norm)
    out = out.swapaxes(-1, -2)
    return out if return_complex or return_complex is None else view_as_real(out)


def _padded(x: Tensor, width: int, mode: str) -> Tensor:
    """x with `width` points added at both ends of its last axis."""
    if mode == "constant":
        return P.pad(x, pad_width=((0, 0),) * (x.ndim - 1) + ((width, width),), value=0.0)
    if mode not in _PAD_INDEX:
        raise ValueError(f"stft: pad_mode must be one of 'constant', {list(_PAD_INDEX)}, not "
                         f"{mode!r}")  # fmt: skip
    n = x.shape[-1]
    if mode == "reflect" and width >= n:
        raise RuntimeError(f"stft: reflect padding of {width} needs a signal longer than that, "
                           f"got {n} points")  # fmt: skip
    return x[..., Tensor._of(_PAD_INDEX[mode](np.arange(-width, n + width), n))]


@pytorch_keywords
def istft(input: Any, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
          window: Any = None, center: bool = True, normalized: bool = False,
          onesided: bool | None = None, length: int | None = None,
          return_complex: bool = False) -> Tensor:  # fmt: skip
    """`stft` inverted (PyTorch's): each frame transformed back and windowed, overlapped and
    added, and divided by the sum of the squared windows (which must not vanish)."""
    spec = _complex(as_tensor(input))
    hop = n_fft // 4 if hop_length is None else hop_length
    w = _window(window, n_fft, win_length, shapes.real_dtype(spec.dtype))
    onesided = spec.shape[-2] != n_fft if onesided is None else onesided
    frames = spec.swapaxes(-1, -2)  # (..., frames, bins)
    norm = "ortho" if normalized else None
    if onesided:
        if return_complex:
            raise RuntimeError("istft: cannot have onesided output if return_complex is True")
        frames = irfft(frames, n=n_fft, norm=norm)
    else:
        frames = ifft(frames, norm=norm)
        frames = frames if return_complex else P.real(frames)
    frames = frames * w
    count = frames.shape[-2]
    total = n_fft + hop * (count - 1)
    positions = (np.arange(count)[:, None] * hop + np.arange(n_fft)).ravel()
    flat = frames.reshape(*frames.shape[:-2], count * n_fft)
    zeros = Tensor._of(np.zeros((*frames.shape[:-2], total), frames.dtype))
    signal = zeros.index_add(-1, Tensor._of(positions), flat)
    envelope = np.zeros(total, w.dtype)
    np.add.at(envelope, positions, np.tile(np.abs(w.numpy()) ** 2, count))
    start = n_fft // 2 if center else 0
    end = total - start if length is None else min(start + length, total)
    if (envelope[start:end] < 1e-11).any():
        raise RuntimeError(
            "istft: the window overlap-add envelope vanishes (window overlap "
            "add min below 1e-11): choose a window and hop that overlap"
        )
    out = signal[..., start:end] / Tensor._of(envelope[start:end])
    if length is not None and end - start < length:
        out = P.pad(out, pad_width=((0, 0),) * (out.ndim - 1) + ((0, length - (end - start)),),
                    value=0.0)  # fmt: skip
    return out


def _shifted(input: Any, dim: Any, up: int) -> Tensor:
    x = as_tensor(input)
    dims = range(x.ndim) if dim is None else [dim] if isinstance(dim, int | np.integer) else dim
    dims = [int(d) for d in dims]
    if not dims:
        return x
    return roll(x, [(x.shape[d] + up) // 2 for d in dims], dims)


def fftshift(input: Any, dim: Any = None) -> Tensor:
    """The zero frequency moved to the middle: rolled by n // 2 along `dim` (all by default)."""
    return _shifted(input, dim, 0)


def ifftshift(input: Any, dim: Any = None) -> Tensor:
    """fftshift undone: rolled by (n + 1) // 2."""
    return _shifted(input, dim, 1)


__all__ = ["fft", "fft2", "fftfreq", "fftn", "fftshift", "hfft", "hfft2", "hfftn", "ifft", "ifft2",
           "ifftn", "ifftshift", "ihfft", "ihfft2", "ihfftn", "irfft", "irfft2", "irfftn", "rfft",
           "rfft2", "rfftfreq", "rfftn"]  # fmt: skip

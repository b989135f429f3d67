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

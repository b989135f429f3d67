"""Discrete Fourier transforms, as PyTorch's three ops (ATen's `_fft_c2c`, `_fft_r2c` and
`_fft_c2r`): complex to complex; real to its half spectrum, whose last axis keeps n // 2 + 1 of
n bins (the rest follow by Hermitian symmetry); and a half spectrum back to n real values. Each
transforms over `axes` and multiplies by `scale`: "none", "sqrt" (1 / sqrt(n)) or "n" (1 / n),
n the product of the signal's lengths along the axes (the real side's, for the last two). The
front end (`frontend/fft.py`) maps `torch.fft`'s functions, `norm` and direction onto them and
pads or trims the input to the lengths asked for. NumPy's pocketfft computes them.

Each VJP is the adjoint transform, by PyTorch's rules: the other direction with the same scale
(the DFT's adjoint is the conjugate DFT); the half spectrum's cotangent padded with zeros to the
full spectrum, of which the real part; the inverse real transform's, a half spectrum whose bins
that stand for two (a bin and its mirror image) count twice."""

from __future__ import annotations

import math

import numpy as np

from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Primitive

SCALES = ("none", "sqrt", "n")
# NumPy's `norm` names the direction scaled by 1 / n: per direction, the one that gives `scale`
_NUMPY_NORM = {True: dict(zip(SCALES, ("backward", "ortho", "forward"), strict=True)),
               False: dict(zip(SCALES, ("forward", "ortho", "backward"), strict=True))}  # fmt: skip


def _check(x, axes, scale, kind: str) -> None:
    if scale not in SCALES:
        raise ValueError(f"scale {scale!r} is not one of {SCALES}")
    if not axes or len(set(axes)) != len(axes) or not all(0 <= a < x.ndim for a in axes):
        raise ValueError(f"axes {axes} of a {x.ndim}-d input: distinct, 0 <= axis < ndim")
    if x.dtype.kind != kind:
        raise ValueError(f"a {'complex' if kind == 'c' else 'real'} input, not {x.dtype}")


def _c2c_rule(x, axes, scale, forward):
    _check(x, axes, scale, "c")
    return x.shape, x.dtype


def _c2c(x, axes, scale, forward):
    transform = np.fft.fftn if forward else np.fft.ifftn
    return transform(x, axes=axes, norm=_NUMPY_NORM[forward][scale]).astype(x.dtype, copy=False)


def _r2c_rule(x, axes, scale):
    _check(x, axes, scale, "f")
    shape = list(x.shape)
    shape[axes[-1]] = shape[axes[-1]] // 2 + 1
    return tuple(shape), shapes.complex_dtype(x.dtype)


def _r2c(x, axes, scale):
    out = np.fft.rfftn(x, axes=axes, norm=_NUMPY_NORM[True][scale])
    return out.astype(shapes.complex_dtype(x.dtype), copy=False)


def _c2r_rule(x, axes, scale, n):
    _check(x, axes, scale, "c")
    last = axes[-1]
    if n < 1 or x.shape[last] != n // 2 + 1:
        raise ValueError(f"{n} points from a half spectrum of {x.shape[last]} along axis {last} "
                         f"(expected {max(n, 0) // 2 + 1})")  # fmt: skip
    shape = list(x.shape)
    shape[last] = n
    return tuple(shape), shapes.real_dtype(x.dtype)


def _c2r(x, axes, scale, n):
    lengths = [x.shape[a] for a in axes[:-1]] + [n]
    out = np.fft.irfftn(x, s=lengths, axes=axes, norm=_NUMPY_NORM[False][scale])
    return out.astype(shapes.real_dtype(x.dtype), copy=False)


def _r2c_vjp(g, out, x, axes, scale):
    """real(F^H g), g padded with zeros from the half spectrum to the full one."""
    last = axes[-1]
    missing = x.shape[last] - g.shape[last]
    if missing:
        width = tuple((0, missing if a == last else 0) for a in range(g.ndim))
        g = pad(g, pad_width=width, value=0.0)
    return real(fft_c2c(g, axes=axes, scale=scale, forward=False))


def _c2r_vjp(g, out, x, axes, scale, n):
    """The half spectrum of g, its bins 1 .. n - n // 2 - 1 doubled: each stands for itself and
    its mirror image, which the half spectrum leaves out (the 0th bin and, for even n, the
    n / 2-th are their own mirror images)."""
    half = fft_r2c(g, axes=axes, scale=scale)
    last, m = axes[-1], n // 2 + 1
    if n - m <= 0:
        return half
    weights = np.ones(m, half.dtype)
    weights[1 : n - m + 1] = 2
    return half * weights.reshape((m,) + (1,) * (g.ndim - 1 - last))


def _flops(inputs, outputs) -> int:
    """About 5 N log2 N for N complex points."""
    size = max(v.size for v in (*inputs, *outputs))
    return int(5 * size * math.log2(max(size, 2)))


# pure functions of their inputs that raise nothing their shape rules did not
_FFT = {"raises": False, "rerun": True, "flops": _flops, "complex_grad": True}
fft_c2c = Primitive("fft_c2c", _c2c, _c2c_rule,
                    (lambda g, out, x, axes, scale, forward:
                     fft_c2c(g, axes=axes, scale=scale, forward=not forward),), **_FFT)  # fmt: skip
fft_r2c = Primitive("fft_r2c", _r2c, _r2c_rule, (_r2c_vjp,), **_FFT)
fft_c2r = Primitive("fft_c2r", _c2r, _c2r_rule, (_c2r_vjp,), **_FFT)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import real  # noqa: E402
from tracegrad.core.ops.views import pad  # noqa: E402

"""`torch.signal.windows`: SciPy's window functions as PyTorch gives them, M points each,
symmetric (`sym=True`, for filter design) or periodic (`sym=False`, for spectral analysis: the
symmetric window of M + 1 points without its last)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

import tracegrad as _tg
from tracegrad.frontend.tensor import Tensor

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine",
           "general_hamming", "hamming", "hann", "kaiser", "nuttall"]  # fmt: skip


def _window(name: str, values: Any, dtype: Any, requires_grad: bool) -> Tensor:
    kind = np.dtype(dtype or _tg.get_default_dtype())
    if kind.kind != "f":
        raise ValueError(f"torch.signal.windows.{name}: expected a floating point dtype, got "
                         f"{kind}")  # fmt: skip
    return _tg.tensor(np.asarray(values, np.float64), dtype=kind, requires_grad=requires_grad)


def _points(name: str, M: int, sym: bool) -> tuple[np.ndarray, int]:
    """0..M-1, and the span the window's formula divides by (M - 1 symmetric, M periodic)."""
    if M < 0:
        raise ValueError(f"torch.signal.windows.{name}: requires non-negative window length, "
                         f"got M={M}")  # fmt: skip
    return np.arange(M, dtype=np.float64), (M if not sym and M > 1 else M - 1)


def general_cosine(M: int, *, a: Iterable[float], sym: bool = True, dtype: Any = None,
                   layout: Any = None, device: Any = None, requires_grad: bool = False,
                   ) -> Tensor:  # fmt: skip
    """sum_i (-1)^i a_i cos(2 pi i n / span)."""
    n, span = _points("general_cosine", M, sym)
    if M <= 1:
        return _window("general_cosine", np.ones(M), dtype, requires_grad)
    k = n * (2 * math.pi / span)
    values = sum((-1) ** i * w * np.cos(i * k) for i, w in enumerate(a))
    return _window("general_cosine", values * np.ones(M), dtype, requires_grad)


def general_hamming(M: int, *, alpha: float = 0.54, sym: bool = True, dtype: Any = None,
                    layout: Any = None, device: Any = None, requires_grad: bool = False,
                    ) -> Tensor:  # fmt: skip
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype,
                          requires_grad=requires_grad)  # fmt: skip


def _cosine_sum(a: list[float], doc: str) -> Any:
    def window(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
               device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
        return general_cosine(M, a=a, sym=sym, dtype=dtype, requires_grad=requires_grad)

    window.__doc__ = doc
    return window


hann = _cosine_sum([0.5, 0.5], "The Hann window: a raised cosine.")
hamming = _cosine_sum([0.54, 0.46], "The Hamming window: a raised cosine above 0.")
blackman = _cosine_sum([0.42, 0.5, 0.08], "The Blackman window: three cosine terms.")
nuttall = _cosine_sum([0.3635819, 0.4891775, 0.1365995, 0.0106411],
                      "Nuttall's minimum 4-term Blackman-Harris window.")  # fmt: skip
for _f, _name in ((hann, "hann"), (hamming, "hamming"), (blackman, "blackman"),
                  (nuttall, "nuttall")):  # fmt: skip
    _f.__name__ = _f.__qualname__ = _name


def bartlett(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """The triangular window reaching 0 at both ends."""
    n, span = _points("bartlett", M, sym)
    values = np.ones(M) if M <= 1 else 1 - np.abs(n * (2 / span) - 1)
    return _window("bartlett", values, dtype, requires_grad)


def cosine(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
           device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """Half a sine period over the window."""
    n, _ = _points("cosine", M, sym)
    return _window("cosine", np.sin((n + 0.5) * math.pi / (M + 1 if not sym and M > 1 else M)),
                   dtype, requires_grad)  # fmt: skip


def exponential(M: int, *, center: float | None = None, tau: float = 1.0, sym: bool = True,
                dtype: Any = None, layout: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:  # fmt: skip
    """exp(-|n - center| / tau), centered unless a periodic window says where."""
    n, span = _points("exponential", M, sym)
    if tau <= 0:
        raise ValueError(f"torch.signal.windows.exponential: tau must be positive, got {tau}")
    if sym and center is not None:
        raise ValueError("torch.signal.windows.exponential: Center must be None for symmetric "
                         "windows")  # fmt: skip
    center = span / 2.0 if center is None else center
    return _window("exponential", np.exp(-np.abs(n - center) / tau), dtype, requires_grad)


def gaussian(M: int, *, std: float = 1.0, sym: bool = True, dtype: Any = None,
             layout: Any = None, device: Any = None, requires_grad: bool = False,
             ) -> Tensor:  # fmt: skip
    """exp(-(n - center)^2 / (2 std^2))."""
    n, span = _points("gaussian", M, sym)
    if std <= 0:
        raise ValueError(f"torch.signal.windows.gaussian: std must be positive, got {std}")
    return _window("gaussian", np.exp(-(((n - span / 2.0) / std) ** 2) / 2), dtype, requires_grad)


def kaiser(M: int, *, beta: float = 12.0, sym: bool = True, dtype: Any = None,
           layout: Any = None, device: Any = None, requires_grad: bool = False,
           ) -> Tensor:  # fmt: skip
    """I0(beta sqrt(1 - (2n / span - 1)^2)) / I0(beta): a taper as wide as beta says."""
    n, span = _points("kaiser", M, sym)
    if beta < 0:
        raise ValueError(f"torch.signal.windows.kaiser: beta must be non-negative, got {beta}")
    if M <= 1:
        return _window("kaiser", np.ones(M), dtype, requires_grad)
    k = np.minimum(-beta + n * (2.0 * beta / span), beta)
    return _window("kaiser", np.i0(np.sqrt(np.maximum(beta * beta - k * k, 0))) / np.i0(beta),
                   dtype, requires_grad)  # fmt: skip

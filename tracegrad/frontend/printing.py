"""How a tensor prints: PyTorch's format, not NumPy's, since scripts and tutorials print tensors
and their readers compare what they see (`tensor([0.7071, 1.5000])`, not NumPy's
`[0.70710677, 1.5       ]`).

PyTorch's rules: floats with `precision` decimals (4), every element as wide as the widest;
a float tensor whose finite values are all whole prints them with a trailing point (`2.`); the
scientific form when the nonzero finite magnitudes span more than a factor of 1000, pass 1e8 or
fall below 1e-4 (unless `sci_mode` says); lines of at most `linewidth` (80) characters; more
than `threshold` (1000) elements summarized to `edgeitems` (3) at each end of every axis, the
widths taken from those alone. `torch.set_printoptions` sets these `OPTIONS`."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class PrintOptions:
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: bool | None = None


OPTIONS = PrintOptions()
PROFILES = {
    "default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
    "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
    "full": dict(precision=4, threshold=sys.maxsize, edgeitems=3, linewidth=80),
}


def set_options(precision: int | None = None, threshold: float | None = None,
                edgeitems: int | None = None, linewidth: int | None = None,
                profile: str | None = None, sci_mode: bool | None = None) -> None:  # fmt: skip
    """PyTorch's `set_printoptions`: a `profile` ("default", "short", "full"), then the options
    given; `sci_mode` is set as given, None included (PyTorch's choice by magnitudes)."""
    given = dict(precision=precision, threshold=threshold, edgeitems=edgeitems,
                 linewidth=linewidth)  # fmt: skip
    given = {**PROFILES.get(profile, {}), **{k: v for k, v in given.items() if v is not None}}
    for name, value in given.items():
        setattr(OPTIONS, name, value)
    OPTIONS.sci_mode = sci_mode


class _Formatter:
    """One width and one form (integer, fixed, whole floats, scientific) for all the values."""

    def __init__(self, a: np.ndarray) -> None:
        self.floating, self.whole, self.sci, self.width = a.dtype.kind == "f", True, False, 1
        flat = a.reshape(-1)
        if not self.floating:
            self.width = max([len(str(v)) for v in flat.tolist()], default=1)
            return
        values = flat[np.isfinite(flat) & (flat != 0)]
        if values.size == 0:
            return
        magnitude = np.abs(values.astype(np.float64))
        least, most = magnitude.min(), magnitude.max()
        self.whole = bool(np.all(values == np.ceil(values)))
        self.sci = (most / least > 1000.0 or most > 1.0e8 or least < 1.0e-4
                    if OPTIONS.sci_mode is None else OPTIONS.sci_mode)  # fmt: skip
        extra = 1 if self.whole and not self.sci else 0  # the point after a whole number
        self.width = max(len(self._form(v)) + extra for v in values.tolist())

    def _form(self, value: float) -> str:
        if self.sci:
            return f"{value:.{OPTIONS.precision}e}"
        if self.whole:
            return f"{value:.0f}"
        return f"{value:.{OPTIONS.precision}f}"

    def format(self, value: Any) -> str:
        if not self.floating:
            text = str(value)
        else:
            text = self._form(value)
            if self.whole and not self.sci and math.isfinite(value):
                text += "."
        return text.rjust(self.width)


def _summarized(a: np.ndarray) -> np.ndarray:
    """The values a summarized print shows: `edgeitems` at each end of every axis."""
    k = OPTIONS.edgeitems
    for axis in range(a.ndim):
        if a.shape[axis] > 2 * k:
            a = np.concatenate([a.take(range(k), axis), a.take(range(-k, 0), axis)], axis)
    return a


def _vector(a: np.ndarray, indent: int, summarize: bool, fmt: list[_Formatter]) -> str:
    width = fmt[0].width + 2 + (fmt[1].width + 1 if len(fmt) > 1 else 0)
    per_line = max(1, (OPTIONS.linewidth - indent) // width)
    k = OPTIONS.edgeitems
    if summarize and not k:
        data = ["..."]
    elif summarize and a.shape[0] > 2 * k:
        data = [*_values(a[:k], fmt), " ...", *_values(a[-k:], fmt)]
    else:
        data = _values(a, fmt)
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _values(a: np.ndarray, fmt: list[_Formatter]) -> list[str]:
    if len(fmt) == 1:
        return [fmt[0].format(v) for v in a.tolist()]
    out = []
    for v in a.tolist():
        imag = (fmt[1].format(v.imag) + "j").lstrip()
        out.append(fmt[0].format(v.real) + ("" if imag[0] in "+-" else "+") + imag)
    return out


def _nested(a: np.ndarray, indent: int, summarize: bool, fmt: list[_Formatter]) -> str:
    if a.ndim == 0:
        return _values(a.reshape(1), fmt)[0]
    if a.ndim == 1:
        return _vector(a, indent, summarize, fmt)
    k = OPTIONS.edgeitems
    rows = range(a.shape[0])
    if summarize and a.shape[0] > 2 * k:
        rows = [*range(k), None, *range(a.shape[0] - k, a.shape[0])]
    parts = ["..." if i is None else _nested(a[i], indent + 1, summarize, fmt) for i in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def values_str(a: np.ndarray, indent: int) -> str:
    """The values of `a` as PyTorch prints them, continued lines indented by `indent`."""
    if a.size == 0:
        return "[]"
    summarize = a.size > OPTIONS.threshold
    shown = _summarized(a) if summarize else a
    if a.dtype.kind == "c":
        fmt = [_Formatter(shown.real), _Formatter(shown.imag)]
    else:
        fmt = [_Formatter(shown)]
    return _nested(a, indent, summarize, fmt)


def with_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    """`text` and its `suffixes` (", dtype=torch.float64"), each moved to a line of its own,
    indented, where it would pass the line width; and the closing parenthesis."""
    parts, last = [text], len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > OPTIONS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last += len(suffix) + 2
    return "".join(parts) + ")"

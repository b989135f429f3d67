"""Shape and dtype rules shared by the op families: what every op's record computes, eagerly,
while tracing and in `Graph.verify`, before any NumPy runs."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np


def same(x, *rest, **attrs):
    return x.shape, x.dtype


def floating(x):
    return x.shape, (x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64))


def real_floating(x):
    """`floating`, for functions of real values only (erf, GELU: PyTorch refuses complex ones,
    whose imaginary parts the NumPy forms dropped)."""
    if x.dtype.kind == "c":
        raise TypeError(f"expects a real tensor, got {x.dtype}")
    return floating(x)


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of a complex dtype's parts (complex64: float32); a real dtype itself."""
    return np.empty(0, dtype).real.dtype if dtype.kind == "c" else dtype


def complex_dtype(dtype: np.dtype) -> np.dtype:
    """The complex dtype of a float dtype's precision (float64: complex128; float32 and
    narrower: complex64, NumPy having no complex32)."""
    if dtype.kind == "c":
        return dtype
    return np.dtype(np.complex128 if dtype == np.float64 else np.complex64)


def magnitude(x):
    """abs and angle: a complex number's are real."""
    return x.shape, real_dtype(x.dtype)


def around(axes: Sequence[int], ndim: int) -> tuple[int, int] | None:
    """The kept block [start, end) of axes reduced on both sides of it, leading and trailing
    ones (a channel's statistics over (N, C, H, W): (1, 2)); None for other axes (sorted,
    non-negative)."""
    kept = [a for a in range(ndim) if a not in axes]
    if kept and 0 < kept[0] and kept[-1] < ndim - 1 and kept == [*range(kept[0], kept[-1] + 1)]:
        return kept[0], kept[-1] + 1
    return None


def broadcast(*xs) -> tuple[int, ...]:
    return broadcast_shapes(*(x.shape for x in xs))


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    if shapes.count(shapes[0]) == len(shapes):  # the common case, without NumPy's slow call
        return shapes[0]
    try:
        return _broadcast_shapes(shapes)
    except ValueError:
        raise ValueError(f"shapes {' and '.join(map(str, shapes))} do not broadcast") from None


@functools.lru_cache(maxsize=4096)
def _broadcast_shapes(shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    return np.broadcast_shapes(*shapes)


@functools.lru_cache(maxsize=1024)
def result_type(*dtypes: np.dtype) -> np.dtype:
    """NumPy's promotion of dtypes (not values), remembered: every binary op asks it."""
    return np.result_type(*dtypes)


def broadcast_binary(x, y):
    """Every binary op's rule, so equal shapes skip even `broadcast`'s tuple of shapes."""
    shape, dtype = x.shape, x.dtype
    if shape != y.shape:
        shape = broadcast_shapes(shape, y.shape)
    return shape, dtype if dtype == y.dtype else result_type(dtype, y.dtype)


def true_divide(x, y):
    """NumPy's own choice: integers divide into floats (1 / 4 is 0.25, never 0)."""
    return broadcast(x, y), np.true_divide.resolve_dtypes((x.dtype, y.dtype, None))[-1]


def compare(x, y):
    return broadcast(x, y), np.bool_


def reduced(x, axis, keepdims):
    if keepdims:
        return tuple(1 if i in axis else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axis)


def inverse_permutation(axes: Sequence[int]) -> tuple[int, ...]:
    """The permutation that undoes `axes` (in Python: np.argsort of a tuple costs more, and
    every eager transpose asks)."""
    back = [0] * len(axes)
    for i, a in enumerate(axes):
        back[a] = i
    return tuple(back)


def build_index(template: tuple, arrays: Sequence[Any]) -> tuple:
    it = iter(arrays)
    return tuple(next(it) if item == "@" else item for item in template)


def row_shaped(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    """One number per row of `domain`, its last axis kept as 1 (a log-sum-exp of logits): what
    a fused 2-D kernel computes once a row and may store."""
    return (
        len(shape) == len(domain) > 1 and shape[:-1] == domain[:-1] and shape[-1] == 1 != domain[-1]
    )


def canonical_axes(
    domain: tuple[int, ...], input_shapes: list[tuple[int, ...]], reduced: list[tuple[int, ...]]
) -> list[list[int]]:
    """Domain axes grouped into canonical axes: adjacent axes merge when every input spans both
    or neither and every reduction reduces both or neither. Size-1 axes drop out, unless
    reduced (so each reduction keeps at least one axis)."""
    groups: list[list[int]] = []
    last = None
    for a, d in enumerate(domain):
        reduces = tuple(a in axes for axes in reduced)
        if d == 1 and not any(reduces):
            continue
        signature = (tuple(spans_axis(s, domain, a) for s in input_shapes), reduces)
        if signature == last:
            groups[-1].append(a)
        else:
            groups.append([a])
            last = signature
    return groups


def spans_axis(shape: tuple[int, ...], domain: tuple[int, ...], axis: int) -> bool:
    """Whether `shape`, broadcast against `domain`, spans its `axis` (of length above 1)."""
    offset = len(domain) - len(shape)
    return axis >= offset and domain[axis] != 1 and shape[axis - offset] == domain[axis]


def spans(
    shape: tuple[int, ...], domain: tuple[int, ...], groups: list[list[int]]
) -> tuple[bool, ...]:
    """Per canonical axis (`canonical_axes`), whether `shape` spans it (else it broadcasts)."""
    return tuple(spans_axis(shape, domain, g[0]) for g in groups) or (False,)


def real_floating_pair(x, y):
    """`real_floating` of two broadcast operands (zeta, the incomplete gamma functions)."""
    real_floating(x), real_floating(y)
    shape, dtype = broadcast_binary(x, y)
    return shape, (dtype if dtype.kind == "f" else np.dtype(np.float64))

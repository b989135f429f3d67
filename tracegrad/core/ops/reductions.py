"""Reductions (folding axes with a `combine` template from an `identity`), and the scans and
sorts along one axis."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, Primitive


def _sum_rule(x, axis, keepdims):
    dtype = x.dtype if x.dtype.kind in "fc" else np.dtype(np.int64)
    return shapes.reduced(x, axis, keepdims), dtype


def _extreme_rule(x, axis, keepdims):
    if any(x.shape[a] == 0 for a in axis):
        raise ValueError(f"zero-size axis in {x.shape} has no maximum or minimum")
    return shapes.reduced(x, axis, keepdims), x.dtype


def _cumsum_rule(x, axis):
    return x.shape, (x.dtype if x.dtype.kind in "fc" else np.dtype(np.int64))


def _sum_vjp(g, out, x, axis, keepdims):
    return broadcast_to(reshaped(g, shapes.reduced(x, axis, True)), shape=x.shape)


def _extreme_vjp(extreme):
    """The gradient goes to the elements equal to the extreme, shared among ties. The extreme
    is taken again from the x the rule sees, not from the saved result: in a compiled step x
    may be recomputed in backward (by a kernel whose float32 math differs from NumPy's in the
    last bits), and comparing it with the forward result could then find no element at all."""

    def vjp(g, out, x, axis, keepdims):
        kept = shapes.reduced(x, axis, True)
        hit = (x == extreme(x, axis=axis, keepdims=True)).astype(g.dtype)
        return reshaped(g, kept) * hit / sum(hit, axis=axis, keepdims=True)

    return vjp


def _prod_vjp(g, out, x, axis, keepdims):
    """The product of the others, out / x, but not divided by zero: a zero that is alone in its
    slice gets the product of the rest, a zero with another zero gets 0."""
    kept = shapes.reduced(x, axis, True)
    zero = x == 0.0
    nonzero = where(zero, 1.0, x)
    alone = sum(zero.astype(x.dtype), axis=axis, keepdims=True) == 1.0
    at_zero = where(alone, prod(nonzero, axis=axis, keepdims=True), 0.0)
    return reshaped(g, kept) * conjugated(where(zero, at_zero, reshaped(out, kept) / nonzero))


def reduction(name, impl, shape, vjp, saves="", combine=None, identity=None, helpers=(), **kw):
    return Primitive(name, impl, shape, (vjp,), saves, kind=Kind.REDUCTION, combine=combine,
                     identity=identity, helpers=helpers, **kw)  # fmt: skip


def _sum(x, axis=None, keepdims=False):
    """np.sum; a C-contiguous array summed around kept axes (`around_block`) as a product of
    its rows with ones, then over the leading axes: NumPy's own loop over such axes is several
    times slower than BLAS's matrix-vector product, which rounds about as well
    (docs/benchmarks.md). One summed over a few trailing elements a result (`short_rows`)
    adds their columns, in NumPy's order (`SHORT_MAX`)."""
    if not isinstance(x, np.ndarray) or x.size < AROUND_MIN:  # every small eager sum asks
        return np.add.reduce(x, axis=axis, keepdims=keepdims)
    short = short_rows(x.shape, x.dtype, axis)
    if short is not None:
        return _sum_short_rows(x, short, keepdims)
    block = around_block(x.shape, x.dtype, axis) if _c_contiguous(x) else None
    if block is None:
        return np.add.reduce(x, axis=axis, keepdims=keepdims)
    lead, trail = block
    rows = x.reshape(-1, math.prod(x.shape[trail:]))
    partial = (rows @ np.ones(rows.shape[1], x.dtype)).reshape(x.shape[:trail])
    out = np.add.reduce(partial, axis=tuple(range(lead)))
    return (
        out.reshape((1,) * lead + x.shape[lead:trail] + (1,) * (x.ndim - trail))
        if keepdims
        else out
    )


def _sum_short_rows(x: np.ndarray, axes: int, keepdims: bool) -> np.ndarray:
    """The sum over the last `axes` axes of `x`, one strided column of them at a time."""
    kept = x.shape[: x.ndim - axes]
    first, second, *rest = (x[(..., *at)] for at in np.ndindex(x.shape[len(kept) :]))
    out = np.add(first, second)
    for column in rest:
        np.add(out, column, out=out)
    return out.reshape(kept + (1,) * axes) if keepdims else out


AROUND_MIN = 1 << 16  # elements: below, the product's BLAS call costs more than it saves


def around_block(shape: tuple[int, ...], dtype: np.dtype, axis: Any) -> tuple[int, int] | None:
    """The kept block of a sum over leading and trailing axes (`shapes.around`: batch norm's
    (0, 2, 3)) of a large float array; else None."""
    if not isinstance(axis, tuple) or math.prod(shape) < AROUND_MIN:
        return None
    if dtype not in (np.float32, np.float64):
        return None
    return shapes.around(sorted(a % len(shape) for a in axis), len(shape))


# Sums of at most this many trailing elements a result add columns: NumPy's reduction loops
# once per result over so few (an upsampling's gradient, (N, C, H, W, 2) summed over the last),
# far slower than adding strided columns (docs/benchmarks.md). Below 8, NumPy adds them in
# order, so the columns' sums are its own to the bit.
SHORT_MAX = 7


def short_rows(shape: tuple[int, ...], dtype: np.dtype, axis: Any) -> int | None:
    """How many trailing axes a sum of a large float array reduces, when it reduces only
    trailing ones, of 2 to SHORT_MAX elements a result; else None."""
    if not isinstance(axis, tuple) or not axis or math.prod(shape) < AROUND_MIN:
        return None
    if dtype not in (np.float32, np.float64):
        return None
    axes = sorted({a % len(shape) for a in axis})
    if axes != list(range(len(shape) - len(axes), len(shape))):
        return None
    return len(axes) if 1 < math.prod(shape[a] for a in axes) <= SHORT_MAX else None


def own_sum(shape: tuple[int, ...], dtype: np.dtype, axis: Any) -> bool:
    """Whether `_sum` spells this sum otherwise than `np.add.reduce` (the plan then calls it)."""
    return any(f(shape, dtype, axis) is not None for f in (around_block, short_rows))


def _c_contiguous(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.flags.c_contiguous


# Implementations are NumPy's own functions where their keyword names match the attributes, so
# the generated plan reads as plain NumPy (sum's, where it gains, a matrix-vector product).
sum = reduction("sum", _sum, _sum_rule, _sum_vjp, combine="({0} + {1})", identity=0.0,
                complex_grad=True)  # fmt: skip
max = reduction("max", np.max, _extreme_rule, _extreme_vjp(lambda *a, **k: max(*a, **k)), "in",
                "maximum({0}, {1})",
                -math.inf, ("maximum",))  # fmt: skip
min = reduction("min", np.min, _extreme_rule, _extreme_vjp(lambda *a, **k: min(*a, **k)), "in",
                "minimum({0}, {1})",
                math.inf, ("minimum",))  # fmt: skip
prod = reduction("prod", np.prod, _sum_rule, _prod_vjp, "in+out", "({0} * {1})", 1.0,
                 complex_grad=True)  # fmt: skip
argmax = Primitive(
    "argmax",
    np.argmax,
    lambda x, axis: (shapes.reduced(x, (axis,), False), np.int64),
    raises=False,
)


def _accumulated_wide(scan):
    """`scan` (np.cumsum, np.cumprod) running in float64 over float32 and float16, each result
    rounded once, as PyTorch's CPU kernels: a float32 running sum drifts as it grows (each step
    rounds to the running total's precision), and noise schedules are cumulative products."""

    def run(x, axis):
        if x.dtype in (np.float32, np.float16):
            return scan(x, axis=axis, dtype=np.float64).astype(x.dtype)
        return scan(x, axis=axis)

    return run


cumsum = Primitive("cumsum", _accumulated_wide(np.cumsum), _cumsum_rule,
                   (lambda g, out, x, axis: sum(g, axis=(axis,), keepdims=True)
                    - cumsum(g, axis=axis) + g,), raises=False, complex_grad=True)  # fmt: skip


def _reversed_cumsum(v, axis):
    """sum_{j >= i} v_j along `axis`."""
    return sum(v, axis=(axis,), keepdims=True) - cumsum(v, axis=axis) + v


def _cumprod_vjp(g, out, x, axis):
    """d out_j / d x_i is the product of x_k, k <= j, but x_i. Where x_i != 0 the gradient is
    sum_{j >= i} g_j out_j / x_i; at a zero it is the same sum over the products with that
    zero taken as 1 (for the first and second zero of a slice; at later ones it and its first
    two derivatives are 0). Each is the gradient near x too, not only at it, and composed of
    ops (cumprod among them): second derivatives are right, zeros included."""
    zero = x == 0.0
    seen = cumsum(zero.astype(g.dtype), axis=axis)  # zeros up to and including each position
    out_grad = where(zero, 0.0, _reversed_cumsum(g * out, axis) / where(zero, 1.0, x))
    for k in (1.0, 2.0):
        kth = where(zero, seen == k, False)
        skipped = _reversed_cumsum(g * cumprod(where(kth, 1.0, x), axis=axis), axis)
        out_grad = where(kth, skipped, out_grad)
    return out_grad


cumprod = Primitive("cumprod", _accumulated_wide(np.cumprod), _cumsum_rule, (_cumprod_vjp,),
                    "in+out",
                    raises=False)  # fmt: skip


def _flipped(v, axis):
    return getitem(v, template=(slice(None),) * axis + (slice(None, None, -1),))


def _logcumsumexp_vjp(g, out, x, axis):
    """d/dx_i = exp(x_i) sum_{j >= i} g_j exp(-out_j), summed in log space (a reversed
    logcumsumexp) separately for the positive and the negative g, so nothing overflows."""
    terms = []
    for part in (g, -g):
        positive = part > 0.0
        logs = where(positive, log(where(positive, part, 1.0)), -math.inf) - out
        terms.append(exp(x + _flipped(logcumsumexp(_flipped(logs, axis), axis=axis), axis)))
    return terms[0] - terms[1]


def _logcumsumexp(x, axis):
    x = np.asarray(x)
    return np.logaddexp.accumulate(x if x.dtype.kind == "f" else x.astype(np.float64), axis=axis)


logcumsumexp = Primitive("logcumsumexp", _logcumsumexp,
                         lambda x, axis: shapes.floating(x), (_logcumsumexp_vjp,), "in+out",
                         raises=False)  # fmt: skip


def _argcumulative(running):
    """The index of the running extreme along `axis`: the last element that equals it, or the
    last nan, which is the extreme from the first on (PyTorch's indices, ties and nan)."""

    def impl(x, axis):
        x = np.moveaxis(np.asarray(x), axis, -1)
        hit = (x == running.accumulate(x, axis=-1)) | (x != x)
        idx = np.where(hit, np.arange(x.shape[-1]), 0)
        return np.moveaxis(np.maximum.accumulate(idx, axis=-1), -1, axis)

    return impl


argcummax = Primitive("argcummax", _argcumulative(np.maximum),
                      lambda x, axis: (x.shape, np.int64), raises=False)  # fmt: skip
argcummin = Primitive("argcummin", _argcumulative(np.minimum),
                      lambda x, axis: (x.shape, np.int64), raises=False)  # fmt: skip


def _searchsorted(sorted_sequence, values, side):
    """np.searchsorted, row by row when the sequence has leading dimensions (values' match)."""
    seq, values = np.asarray(sorted_sequence), np.asarray(values)
    if seq.ndim == 1:
        return np.searchsorted(seq, values, side).astype(np.int64)
    out = np.empty(values.shape, np.int64)
    for row in np.ndindex(seq.shape[:-1]):
        out[row] = np.searchsorted(seq[row], values[row], side)
    return out


def _searchsorted_rule(sorted_sequence, values, side):
    if sorted_sequence.ndim > 1 and sorted_sequence.shape[:-1] != values.shape[:-1]:
        raise ValueError(f"the sorted sequence {sorted_sequence.shape} and the values "
                         f"{values.shape} differ in their leading dimensions")  # fmt: skip
    return values.shape, np.int64


searchsorted = Primitive("searchsorted", _searchsorted, _searchsorted_rule, raises=False)


def _histc(x, bins, lo, hi):
    """PyTorch's histc: `bins` equal bins over [lo, hi] (the data's range if both are 0, widened
    by 1 each way if it is one value), the last bin closed; elements outside are not counted."""
    x = np.asarray(x)
    if lo == hi == 0 and x.size:
        lo, hi = float(np.min(x)), float(np.max(x))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    kept = x[(x >= lo) & (x <= hi)]
    counts = np.histogram(kept, bins, (lo, hi))[0] if kept.size else np.zeros(bins, np.int64)
    return counts.astype(x.dtype if x.dtype.kind == "f" else np.float64)


histc = Primitive("histc", _histc, lambda x, bins, lo, hi: ((bins,), shapes.floating(x)[1]),
                  raises=False)  # fmt: skip
argsort = Primitive("argsort", lambda x, axis: np.argsort(x, axis=axis, kind="stable"),
                    lambda x, axis: (x.shape, np.int64), raises=False)  # fmt: skip
argpartition = Primitive("argpartition", np.argpartition,
                         lambda x, kth, axis: (x.shape, np.int64), raises=False)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import conjugated, exp, log, where  # noqa: E402
from tracegrad.core.ops.views import broadcast_to, getitem, reshaped  # noqa: E402

"""Value checks: what eager checks on values (labels in range), run in a plan too."""

from __future__ import annotations

import numpy as np

from tracegrad.core.errors import RangeError
from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, Primitive


def _check_range(x, *, lo, hi, allow, what, where):
    """x, if every value lies in [lo, hi) or is `allow` (an ignored label); else a RangeError
    (a ValueError and an IndexError) naming the first value that does not. The common case
    costs two reductions: every step's cross-entropy checks its labels, and the masks below
    cost more (docs/benchmarks.md)."""
    if x.size and np.minimum.reduce(x, axis=None) >= lo and np.maximum.reduce(x, axis=None) < hi:
        return x
    outside = (x < lo) | (x >= hi)
    bad = x[outside & (x != allow) if allow is not None else outside]
    if bad.size:
        raise RangeError(f"{what} must lie in [{lo}, {hi}), found {bad.flat[0]} (at {where})")
    return x


check_range = Primitive("check_range", _check_range, shapes.same, kind=Kind.CHECK)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]

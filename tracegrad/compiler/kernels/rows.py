"""The head shared by the generated per-dtype kernel modules (attention's, layer norm's): their
imports, the dtype `T`, three decorators and the reductions over a row.

`_inner` keeps IEEE semantics (the fast-math flags of `fastmath.FLAGS`), so loops that exp
stay exact about NaN and inf; `_reduce` also reassociates, so that a row's sum runs in SIMD
lanes. A row's maximum folds with `scalar.maximum` (LLVM's, which propagates NaN and
vectorizes without leave to reassociate). The version of the
scalar math is in the text: Numba's cache checks a module's own file, not the `exp` it
imports, so a new `exp` must make a new module."""

from __future__ import annotations

from tracegrad.compiler.kernels import fastmath
from tracegrad.compiler.kernels.fused import GENERATOR_VERSION

_HEAD = '''"""{title} ({dtype}): {generator} generated it."""

# scalar math {version}

import numpy as np
from numba import njit, prange

from tracegrad.compiler.kernels.scalar import exp, maximum

T = np.{dtype}
_inner = njit(fastmath={flags}, error_model="numpy", cache=True)
_reduce = njit(fastmath={sum_flags}, error_model="numpy", cache=True)
_outer = njit("{signature}", parallel={parallel}, error_model="numpy", cache=True)


@_inner
def row_max(x, n):
    m = x[0]
    for j in range(1, n):
        m = maximum(m, x[j])
    return m


@_reduce
def row_sum(x, n):
    total = T(0)
    for j in range(n):
        total += x[j]
    return total


@_reduce
def row_dot(x, y):
    total = T(0)
    for j in range(x.size):
        total += x[j] * y[j]
    return total
'''


def head(title: str, generator: str, dtype: str, signature: str, parallel: bool = True) -> str:
    """The text a generated module starts with; `signature` is its `kernel`'s, which runs its
    `prange` in parallel if `parallel` (else as a loop)."""
    return _HEAD.format(
        title=title,
        generator=generator,
        dtype=dtype,
        version=GENERATOR_VERSION,
        flags=fastmath.flags_literal(fastmath.FLAGS),
        sum_flags=fastmath.flags_literal(fastmath.FLAGS | {"reassoc"}),
        signature=signature,
        parallel=parallel,
    )

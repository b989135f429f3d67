"""Random numbers a traced step draws afresh at every call, and eager and traced runs alike.

A random state is a tensor (uint64 key and stream number) that each draw reads and then advances,
in place: to a traced step it is state like a parameter, read by the plan and written back, so
every call draws new numbers. The numbers come from Philox, a counter-based generator: a draw
depends only on the state, so with the same seed an eager run and a traced run (either backend)
draw exactly the same numbers, as long as they draw in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.tensor import Tensor

_STEP = np.array([0, 1], np.uint64)


def new_state(seed: int | None = None) -> Tensor:
    """A random state of its own (for a module seeded apart from the rest); None: from the OS."""
    if seed is None:
        seed = np.random.SeedSequence().entropy
    return Tensor(np.array([seed % 2**64, 0], np.uint64))


default_state = new_state()


def manual_seed(seed: int) -> None:
    """Seed the default random state (in place: traced steps keep reading it)."""
    with no_grad():
        default_state._assign(new_state(seed))


def uniform(shape: Sequence[int], dtype: Any = np.float32, state: Tensor | None = None) -> Tensor:
    """Uniform numbers in [0, 1), drawn from `state` (default: the default state) and
    advancing it."""
    state = default_state if state is None else state
    with no_grad():
        out = P.uniform(state, shape=tuple(int(d) for d in shape), dtype=np.dtype(dtype))
        state._assign(state + _STEP)
    return out

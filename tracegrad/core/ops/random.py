"""Random numbers: counter-based, so the state is a tensor a plan reads and advances."""

from __future__ import annotations

import numpy as np

from tracegrad.core.vocabulary import Kind, Primitive


def _uniform(state, *, shape, dtype):
    """Uniform [0, 1) numbers from Philox keyed by state[0], the stream number state[1] in the
    counter's top word (so streams never overlap: draws advance the low words)."""
    bits = np.random.Philox(key=int(state[0]), counter=[0, 0, 0, int(state[1])])
    return np.random.Generator(bits).random(shape, dtype=dtype)


def _uniform_rule(state, *, shape, dtype):
    if state.shape != (2,) or state.dtype != np.uint64:
        raise ValueError(f"the random state must be uint64[2] (key, stream), not {state}")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"uniform numbers are float32 or float64, not {dtype}")
    return shape, dtype


uniform = Primitive("uniform", _uniform, _uniform_rule, kind=Kind.RANDOM)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]

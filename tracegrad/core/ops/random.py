"""Random numbers: counter-based, so the state is a tensor a plan reads and advances."""

from __future__ import annotations

import threading

import numpy as np

from tracegrad.core.ops.reductions import cumsum
from tracegrad.core.vocabulary import Kind, Primitive

_local = threading.local()  # a generator per thread, which each draw sets afresh


def _philox(state) -> np.random.Generator:
    """Philox keyed by state[0], the stream number state[1] in the counter's top word (so
    streams never overlap: draws advance the low words). The thread's one generator, given that
    key and counter (making a generator costs several times a small draw: dropout's)."""
    generator = getattr(_local, "generator", None)
    if generator is None:
        generator = _local.generator = np.random.Generator(np.random.Philox())
    generator.bit_generator.state = {
        "bit_generator": "Philox",
        "state": {"counter": np.array([0, 0, 0, int(state[1])], np.uint64),
                  "key": np.array([int(state[0]), 0], np.uint64)},
        "buffer": np.zeros(4, np.uint64), "buffer_pos": 4, "has_uint32": 0, "uinteger": 0,
    }  # fmt: skip
    return generator


def _uniform(state, *, shape, dtype):
    """Uniform [0, 1) numbers."""
    return _philox(state).random(shape, dtype=dtype)


def _normal(state, *, shape, dtype):
    """Standard normal numbers (NumPy's ziggurat, the same in eager and traced steps)."""
    return _philox(state).standard_normal(shape, dtype=dtype)


def _randint(state, *, shape, low, high, dtype):
    """Integers in [low, high), in `dtype` (which may be a float dtype, as randint_like's)."""
    return _philox(state).integers(low, high, shape).astype(dtype)


def _randperm(state, *, n, dtype):
    """A permutation of 0..n-1."""
    return _philox(state).permutation(n).astype(dtype)


def uniform_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to draw uniform numbers in for a tensor of `dtype` (float32 or float64)."""
    return np.dtype(np.float64 if dtype == np.float64 else np.float32)


def _categorical(state, p, *, num_samples):
    """`num_samples` categories per row of the weights `p` (..., n), drawn with replacement by
    inverting the running sums: a uniform u scaled by the row's total falls in the category
    whose running sum first exceeds it (u * total may round up to the total: the last one). The
    sums as `cumsum` makes them; u in `uniform_dtype`."""
    cdf = cumsum.impl(p, axis=p.ndim - 1)
    u = _philox(state).random((*p.shape[:-1], num_samples), dtype=uniform_dtype(p.dtype))
    u *= cdf[..., -1:]
    index = np.count_nonzero(cdf[..., None, :] <= u[..., :, None], axis=-1)
    return np.minimum(index, p.shape[-1] - 1).astype(np.int64)


def _check_state(state) -> None:
    if state.shape != (2,) or state.dtype != np.uint64:
        raise ValueError(f"the random state must be uint64[2] (key, stream), not {state}")


def _float_rule(state, *, shape, dtype):
    _check_state(state)
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"uniform and normal numbers are float32 or float64, not {dtype}")
    return shape, dtype


def _randint_rule(state, *, shape, low, high, dtype):
    _check_state(state)
    if not low < high:
        raise ValueError(f"randint: the range [{low}, {high}) is empty")
    return shape, dtype


def _randperm_rule(state, *, n, dtype):
    _check_state(state)
    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, not {n}")
    return (n,), dtype


def _categorical_rule(state, p, *, num_samples):
    _check_state(state)
    if p.ndim < 1 or p.dtype.kind != "f":
        raise ValueError(f"categorical draws need float weights (..., n), not {p.dtype}{p.shape}")
    return (*p.shape[:-1], num_samples), np.dtype(np.int64)


uniform = Primitive("uniform", _uniform, _float_rule, kind=Kind.RANDOM)
normal = Primitive("normal", _normal, _float_rule, kind=Kind.RANDOM)
randint = Primitive("randint", _randint, _randint_rule, kind=Kind.RANDOM)
randperm = Primitive("randperm", _randperm, _randperm_rule, kind=Kind.RANDOM)
# multinomial's draws with replacement (a Categorical's `sample`): one op, not the dozen of its
# parts, since a policy samples once per environment step
categorical = Primitive("categorical", _categorical, _categorical_rule, kind=Kind.RANDOM)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]

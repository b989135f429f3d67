"""Random numbers a traced step draws afresh at every call, and eager and traced runs alike.

A random state is a tensor (uint64 key and stream number) that each draw reads and then advances,
in place: to a traced step it is state like a parameter, read by the plan and written back, so
every call draws new numbers. The numbers come from Philox, a counter-based generator: a draw
depends only on the state, so with the same seed an eager run and a traced run (either backend)
draw exactly the same numbers, as long as they draw in the same order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import HALF
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.device import CPU, require_cpu
from tracegrad.frontend.tensor import Listeners, Tensor

_STEP = np.array([0, 1], np.uint64)


def new_state(seed: int | None = None) -> Tensor:
    """A random state of its own (for a module seeded apart from the rest); None: from the OS."""
    if seed is None:
        seed = np.random.SeedSequence().entropy
    return Tensor._of(np.array([seed % 2**64, 0], np.uint64))


default_state = new_state()


def manual_seed(seed: int) -> None:
    """Seed the default random state (in place: traced steps keep reading it)."""
    with no_grad():
        default_state._assign(new_state(seed))


def draw(prim: Any, state: Tensor | None = None, *operands: Any, **attrs: Any) -> Tensor:
    """One draw of the random primitive `prim` (uniform, normal, randint, randperm, of
    `operands`: categorical) from `state` (default: the default state), advancing it."""
    state = default_state if state is None else state
    dtype = attrs.get("dtype")
    if dtype is not None and np.dtype(dtype) in HALF:  # drawn in float32, then rounded
        return draw(prim, state, *operands, **{**attrs, "dtype": np.float32}).astype(dtype)
    with no_grad():
        out = prim(state, *operands, **attrs)
        a = state._value
        if not Listeners.tracers and a.__class__ is np.ndarray and a.flags.writeable:
            np.add(a, _STEP, out=a)  # eagerly in place: a draw is a small op's worth
            state._version[0] += 1
        else:
            state._assign(state + _STEP)
    return out


def uniform(shape: Sequence[int], dtype: Any = np.float32, state: Tensor | None = None) -> Tensor:
    """Uniform numbers in [0, 1), drawn from `state` (default: the default state) and
    advancing it."""
    return draw(P.uniform, state, shape=tuple(int(d) for d in shape), dtype=np.dtype(dtype))


def state_of(generator: Generator | None) -> Tensor:
    """The counter-based state a draw with `generator=` reads: the generator's own, or the
    default state (shared with dropout and sampling, as PyTorch's default generator is)."""
    if generator is None:
        return default_state
    if not isinstance(generator, Generator):
        raise TypeError(f"generator= expects a tracegrad Generator, not {type(generator).__name__}")
    return generator.random_state


class Generator:
    """PyTorch's `torch.Generator`. It holds two streams, both restarted by `manual_seed`:
    `rng`, for what runs on the host, outside any traced step (the order a DataLoader shuffles
    in, `random_split`, the samplers), and `random_state`, the counter-based state that
    `randn(..., generator=g)` and the other tensor draws read and advance (so a traced step
    draws afresh at every call). A new generator starts from PyTorch's default seed, so it is
    repeatable too. `Generator(state=...)` shares a counter-based state (the default generator
    shares the default one).

    The same seed gives the same numbers in every tracegrad run, but not PyTorch's numbers: the
    draws come from NumPy's PCG64 and Philox and their sampling algorithms, not PyTorch's."""

    DEFAULT_SEED = 67280421310721  # torch.Generator().initial_seed()

    def __init__(self, device: Any = "cpu", *, state: Tensor | None = None) -> None:
        require_cpu(device, "Generator")
        self.device = CPU  # PyTorch's device object (diffusers reads `generator.device.type`)
        self.random_state = new_state(self.DEFAULT_SEED) if state is None else state
        self._seed_host(self.DEFAULT_SEED)

    def _seed_host(self, seed: int) -> None:
        self._seed = int(seed) % 2**64
        self.rng = np.random.Generator(np.random.PCG64(self._seed))

    def manual_seed(self, seed: int) -> Generator:
        """Restart from `seed` (taken modulo 2**64, as PyTorch does with negative seeds)."""
        self._seed_host(seed)
        with no_grad():
            self.random_state._assign(new_state(self._seed))  # in place: traced steps read it
        return self

    def seed(self) -> int:
        """Restart from a seed drawn from the operating system, and return it."""
        seed = np.random.SeedSequence().entropy % 2**64
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> Tensor:
        """The state as a uint8 tensor (as PyTorch's), for `set_state` and checkpoints."""
        state = {"seed": self._seed, "bits": self.rng.bit_generator.state,
                 "counter": [int(v) for v in self.random_state.numpy()]}  # fmt: skip
        return Tensor._of(np.frombuffer(json.dumps(state).encode(), np.uint8).copy())

    def set_state(self, state: Any) -> Generator:
        try:
            saved = json.loads(np.asarray(state, np.uint8).tobytes())
        except ValueError:  # JSON's, or bytes that are no text
            raise ValueError(
                f"Generator.set_state: {np.size(state)} bytes that are not a state tracegrad "
                "saved (PyTorch's generators keep another kind of state: a checkpoint's random "
                "state from PyTorch does not carry over)"
            ) from None
        self.manual_seed(saved["seed"])
        self.rng.bit_generator.state = saved["bits"]
        if "counter" in saved:
            with no_grad():
                self.random_state._assign(Tensor._of(np.array(saved["counter"], np.uint64)))
        return self

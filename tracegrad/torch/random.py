"""`torch.random`: seeding. `manual_seed` seeds every generator tracegrad draws from (randn,
parameter initialization, dropout and sampling) and returns the default generator."""

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import tracegrad as _tg
from tracegrad.frontend.random import Generator
from tracegrad.torch._support import not_provided as _not_provided

__all__ = [
    "Generator",
    "default_generator",
    "fork_rng",
    "get_rng_state",
    "initial_seed",
    "manual_seed",
    "seed",
    "set_rng_state",
]

default_generator = _tg.default_generator


def get_rng_state() -> Any:
    """The default generator's state (what `set_rng_state` restores)."""
    return default_generator.get_state()


def set_rng_state(new_state: Any) -> None:
    default_generator.set_state(new_state)


def manual_seed(seed: int) -> Generator:
    return _tg.manual_seed(int(seed))


def initial_seed() -> int:
    return default_generator.initial_seed()


def seed() -> int:
    """Seed every generator from the operating system's entropy, and return the seed."""
    value = int(np.random.SeedSequence().entropy % 2**63)
    _tg.manual_seed(value)
    return value


@contextlib.contextmanager
def fork_rng(
    devices: Any = None,
    enabled: bool = True,
    _caller: str = "fork_rng",
    _devices_kw: str = "devices",
    device_type: str = "cuda",
) -> Iterator[None]:
    """The block draws from the default generator, whose state is restored after it: what it
    draws changes nothing drawn later (reversible layers replay a forward's dropout this way).
    There are no GPUs to fork: `devices` must be empty."""
    if devices:
        raise ValueError(f"{_caller}: tracegrad runs on the CPU only; {_devices_kw} must be empty")
    if not enabled:
        yield
        return
    state = default_generator.get_state()
    try:
        yield
    finally:
        default_generator.set_state(state)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.random`: seeding. `manual_seed` seeds every generator tracegrad draws from (randn,
parameter initialization, dropout and sampling) and returns the default generator."""

from typing import Any

import numpy as np

import tracegrad as _tg
from tracegrad.frontend.random import Generator
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Generator", "default_generator", "initial_seed", "manual_seed", "seed"]

default_generator = _tg.default_generator


def manual_seed(seed: int) -> Generator:
    return _tg.manual_seed(int(seed))


def initial_seed() -> int:
    return default_generator.initial_seed()


def seed() -> int:
    """Seed every generator from the operating system's entropy, and return the seed."""
    value = int(np.random.SeedSequence().entropy % 2**63)
    _tg.manual_seed(value)
    return value


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.distributions.constraint_registry`: biject_to, transform_to and their class."""

from typing import Any

from tracegrad.distributions.constraint_registry import *  # noqa: F403
from tracegrad.distributions.constraint_registry import __all__  # noqa: F401
from tracegrad.torch.distributions._shared import shared


def __getattr__(name: str) -> Any:
    return shared(__name__, name)

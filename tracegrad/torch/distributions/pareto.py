"""`torch.distributions.pareto`: Pareto."""

from typing import Any

from tracegrad.distributions import Pareto  # noqa: F401
from tracegrad.torch.distributions._shared import shared


def __getattr__(name: str) -> Any:
    return shared(__name__, name)

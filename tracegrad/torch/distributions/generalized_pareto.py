"""`torch.distributions.generalized_pareto`: GeneralizedPareto."""

from typing import Any

from tracegrad.distributions import GeneralizedPareto  # noqa: F401
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.distributions.kl`: kl_divergence and register_kl."""

from typing import Any

from tracegrad.distributions import kl_divergence, register_kl  # noqa: F401
from tracegrad.torch.distributions._shared import shared


def __getattr__(name: str) -> Any:
    return shared(__name__, name)

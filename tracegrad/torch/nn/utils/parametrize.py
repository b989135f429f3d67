"""`torch.nn.utils.parametrize`: `tracegrad.nn.parametrize`'s register_parametrization,
is_parametrized, remove_parametrizations, cached."""

from typing import Any

from tracegrad.nn.parametrize import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

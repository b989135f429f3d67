"""`torch.distributions.one_hot_categorical`: the one-hot categoricals."""

from typing import Any

from tracegrad.distributions import OneHotCategorical, OneHotCategoricalStraightThrough  # noqa: F401
from tracegrad.torch.distributions._shared import shared


def __getattr__(name: str) -> Any:
    return shared(__name__, name)

"""`torch.optim.optimizer`: the base class that optimizers written against PyTorch's API
subclass (`from torch.optim.optimizer import Optimizer, required`)."""

from typing import Any

from tracegrad.optim import Optimizer, required
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Optimizer", "ParamsT", "required"]

ParamsT = Any  # PyTorch's type of `params`: tensors, or dicts of param groups


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

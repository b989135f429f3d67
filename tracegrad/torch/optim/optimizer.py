"""`torch.optim.optimizer`: the base class that optimizers written against PyTorch's API
subclass (`from torch.optim.optimizer import Optimizer, required`)."""

from collections.abc import Callable
from typing import Any

from tracegrad.optim import GLOBAL_STEP_HOOKS, Optimizer, register_hook, required
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Optimizer", "ParamsT", "register_optimizer_step_post_hook",
           "register_optimizer_step_pre_hook", "required"]  # fmt: skip


def register_optimizer_step_pre_hook(hook: Callable) -> Any:
    """`hook(optimizer, args, kwargs)` before every optimizer's step."""
    return register_hook(GLOBAL_STEP_HOOKS["pre"], hook)


def register_optimizer_step_post_hook(hook: Callable) -> Any:
    """`hook(optimizer, args, kwargs)` after every optimizer's step."""
    return register_hook(GLOBAL_STEP_HOOKS["post"], hook)


ParamsT = Any  # PyTorch's type of `params`: tensors, or dicts of param groups


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

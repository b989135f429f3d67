"""`torch.utils.checkpoint`: `tracegrad.utils.checkpoint` (the function as written; a traced
step's memory planner decides what to keep)."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils.checkpoint import *  # noqa: F403


def get_device_states(*args: Any) -> tuple[list[int], list[Any]]:
    """The GPU RNG states of the devices `args` are on, which reversible networks save beside
    the CPU's to replay a forward's dropout: on the CPU alone there are none."""
    return [], []


def set_device_states(devices: list[int], states: list[Any], *, device_type: Any = None) -> None:
    """Restore what `get_device_states` saved: nothing, on the CPU alone."""
    if devices or states:
        raise ValueError("set_device_states: tracegrad runs on the CPU only; there are no GPUs")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils`: `data` (datasets, samplers, DataLoader), `checkpoint`, `hooks`,
`tensorboard`."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.utils import (
    checkpoint,
    data,
    dlpack,
    flop_counter,
    hooks,
    model_zoo,
    tensorboard,
)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils`: `data` (datasets, samplers, DataLoader), `checkpoint`, `hooks`,
`tensorboard`, `benchmark` (timing statements), `weak` (weak references by identity)."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.utils import (
    benchmark,
    checkpoint,
    data,
    dlpack,
    flop_counter,
    hooks,
    model_zoo,
    tensorboard,
    weak,
)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils.data.dataloader`: the names PyTorch defines there, from `tracegrad.utils.data`."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils.data import *  # noqa: F403
from tracegrad.utils.data import (  # noqa: F401 (iterators' classes, which code checks for)
    _BaseDataLoaderIter,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils.data.dataloader`: the names PyTorch defines there, from `tracegrad.utils.data`."""

from collections.abc import Callable
from typing import Any, TypeVar

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils.data import *  # noqa: F403
from tracegrad.utils.data import (  # noqa: F401 (iterators' classes, which code checks for)
    _BaseDataLoaderIter,
    _DatasetKind,
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

# the type aliases PyTorch's annotations use (opacus imports them)
_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)
_worker_init_fn_t = Callable[[int], None]
_collate_fn_t = Callable[[list[_T]], Any]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

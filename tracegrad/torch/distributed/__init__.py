"""`torch.distributed`: not provided; tracegrad's data parallelism is `tracegrad.distributed`
(MPI, see docs/distributed.md). `is_available()` is False; the process-group functions exist
(scripts import them at the top) and raise when called, as does building `optim`'s
`ZeroRedundancyOptimizer`."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import needs_process_group
from tracegrad.torch._support import not_provided as _not_provided


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


init_process_group = needs_process_group(__name__, "init_process_group")
destroy_process_group = needs_process_group(__name__, "destroy_process_group")
get_rank = needs_process_group(__name__, "get_rank")
get_world_size = needs_process_group(__name__, "get_world_size")
barrier = needs_process_group(__name__, "barrier")
all_reduce = needs_process_group(__name__, "all_reduce")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

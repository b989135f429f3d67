"""`torch.distributed`: not provided; tracegrad's data parallelism is `tracegrad.distributed`
(MPI, see docs/distributed.md). `is_available()` is False; the process-group functions exist
(scripts import them at the top) and raise when called, as does building `optim`'s
`ZeroRedundancyOptimizer`."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def _refuse(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"torch.distributed.{name} is not provided by tracegrad; its data parallelism is "
            "tracegrad.distributed, over MPI (docs/distributed.md)"
        )

    call.__name__ = name
    return call


init_process_group = _refuse("init_process_group")
destroy_process_group = _refuse("destroy_process_group")
get_rank = _refuse("get_rank")
get_world_size = _refuse("get_world_size")
barrier = _refuse("barrier")
all_reduce = _refuse("all_reduce")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

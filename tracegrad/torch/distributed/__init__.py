"""`torch.distributed`: not provided; tracegrad's data parallelism is `tracegrad.distributed`
(MPI, see docs/distributed.md). `is_available()` is False; the process-group functions exist
(scripts import them at the top) and raise when called, as does building `optim`'s
`ZeroRedundancyOptimizer`; the constants scripts name in default arguments (`ReduceOp.SUM`,
`Backend.NCCL`, `group.WORLD`) exist."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import file_module, needs_process_group
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


class ReduceOp:
    """The reductions' names (`def all_reduce(t, op=dist.ReduceOp.SUM)` runs at import)."""

    SUM, PRODUCT, MIN, MAX = "sum", "product", "min", "max"
    BAND, BOR, BXOR, AVG, PREMUL_SUM = "band", "bor", "bxor", "avg", "premul_sum"


class Backend(str):
    """The backends' names, as strings (`Backend("gloo")`, `Backend.NCCL`)."""

    UNDEFINED, GLOO, NCCL, UCC, MPI = "undefined", "gloo", "nccl", "ucc", "mpi"


class group:  # noqa: N801 (PyTorch's name)
    """`group.WORLD`: the default group, which here is never made."""

    WORLD = None


GroupMember = group


class ProcessGroup:
    """A group of processes (annotations name it): never made here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torch.distributed.ProcessGroup: tracegrad has no process groups (its data "
            "parallelism is tracegrad.distributed)"
        )


class DeviceMesh(ProcessGroup):
    """PyTorch's mesh of devices over process groups: never made here."""


class DTensor(ProcessGroup):
    """A tensor spread over a device mesh (transformers tests for one): never made here."""


tensor = file_module(f"{__name__}.tensor", "`torch.distributed.tensor`", {
    "DTensor": DTensor, "DeviceMesh": DeviceMesh,
    "distribute_tensor": needs_process_group(f"{__name__}.tensor", "distribute_tensor"),
})  # fmt: skip
rpc = file_module(f"{__name__}.rpc", "`torch.distributed.rpc`: remote calls need a process group, "
                  "which tracegrad does not have", {"is_available": lambda: False})  # fmt: skip
device_mesh = file_module(f"{__name__}.device_mesh", "`torch.distributed.device_mesh`", {
    "DeviceMesh": DeviceMesh,
    "init_device_mesh": needs_process_group(f"{__name__}.device_mesh", "init_device_mesh"),
})  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

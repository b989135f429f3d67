"""`torch.distributed`: a process group over TCP sockets playing gloo's part
(`distributed_c10d.py`, over `_sockets.py`), `DistributedDataParallel` (`torch.nn.parallel`),
torchrun (`run.py`), differentiable collectives (`nn.py`), and the parts of PyTorch's package
tracegrad does not provide as importable placeholders (`_placeholders.py`: FSDP, DTensor,
distributed checkpoints, ...). Subgroups other than the world and stores are not provided;
tracegrad's own data parallelism over MPI is `tracegrad.distributed`."""

from __future__ import annotations

import importlib
from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.distributed._placeholders import PLACEHOLDERS, install
from tracegrad.torch.distributed.distributed_c10d import *  # noqa: F403
from tracegrad.torch.distributed.distributed_c10d import DEFAULT_TIMEOUT, broadcast


def _sync_module_states(module: Any, process_group: Any, broadcast_bucket_size: int, src: int,
                        params_and_buffers_to_ignore: Any = (),
                        broadcast_buffers: bool = True) -> None:  # fmt: skip
    """`torch.distributed.utils._sync_module_states`: `src`'s parameters (and buffers) to every
    rank (Lightning's, for a module it does not wrap in DistributedDataParallel)."""
    ignore = set(params_and_buffers_to_ignore or ())
    named = [*module.named_parameters(), *(module.named_buffers() if broadcast_buffers else ())]
    for name, t in named:
        if name not in ignore:
            broadcast(t.detach(), src, process_group)


class ChildFailedError(Exception):
    """A rank failed (what `torch.distributed.run.run(args)` raises, as PyTorch's elastic agent
    does; accelerate's launcher catches it)."""

    def __init__(self, name: str, failures: dict) -> None:
        super().__init__(f"{name} FAILED: {failures}")
        self.name, self.failures = name, failures


def _record(fn: Any = None, *args: Any, **kwargs: Any) -> Any:
    """`@record`: errors reach the launcher as they are (it prints the failing rank's)."""
    return fn


rpc = file_module(f"{__name__}.rpc", "`torch.distributed.rpc`: remote calls are not provided",
                  {"is_available": lambda: False})  # fmt: skip
utils = file_module(f"{__name__}.utils", "`torch.distributed.utils`",
                    {"_sync_module_states": _sync_module_states})  # fmt: skip
constants = file_module(f"{__name__}.constants", "`torch.distributed.constants`", {
    "default_pg_timeout": DEFAULT_TIMEOUT, "default_pg_nccl_timeout": DEFAULT_TIMEOUT,
})  # fmt: skip
install(
    {"elastic.multiprocessing.errors": {"record": _record, "ChildFailedError": ChildFailedError}}
)


def __getattr__(name: str) -> Any:
    if name in PLACEHOLDERS:  # (`torch.distributed.fsdp.X` without importing it first)
        return importlib.import_module(f"{__name__}.{name}")
    raise _not_provided(__name__, name)

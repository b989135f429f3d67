"""`torch.nn.parallel`: the data-parallel wrappers. tracegrad has no GPUs, so `DataParallel`
without device ids runs its module as it is (as PyTorch's does without CUDA) and any request for
GPUs raises; `DistributedDataParallel` needs `torch.distributed`'s process group, which
tracegrad does not provide (its data parallelism is `tracegrad.distributed`, over MPI)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracegrad.frontend.device import require_cpu
from tracegrad.nn import Module
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided


def _no_gpus(device_ids: Sequence[Any] | None, where: str) -> None:
    for d in device_ids or ():
        require_cpu(d, where)


class DataParallel(Module):
    """Runs `module` as it is: there are no GPUs to split the batch over. `module.module` is
    the wrapped module, as in PyTorch (its state_dict keys start with "module.")."""

    def __init__(self, module: Module, device_ids: Sequence[Any] | None = None,
                 output_device: Any = None, dim: int = 0) -> None:  # fmt: skip
        super().__init__()
        _no_gpus(device_ids, "DataParallel")
        if output_device is not None:
            require_cpu(output_device, "DataParallel")
        self.module, self.dim = module, dim

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


def data_parallel(module: Module, inputs: Any, device_ids: Sequence[Any] | None = None,
                  output_device: Any = None, dim: int = 0,
                  module_kwargs: Any = None) -> Any:  # fmt: skip
    """module(inputs), after checking that no GPU is asked for."""
    _no_gpus(device_ids, "data_parallel")
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return module(*inputs, **(module_kwargs or {}))


class DistributedDataParallel(Module):
    """Refused: it needs torch.distributed.init_process_group, which tracegrad does not provide.
    tracegrad's data parallelism is tracegrad.distributed (MPI; see docs/distributed.md)."""

    def __init__(self, module: Module, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "torch.nn.parallel.DistributedDataParallel is not provided by tracegrad (it needs "
            "torch.distributed's process group); tracegrad's data parallelism is "
            "tracegrad.distributed, over MPI (docs/distributed.md)"
        )


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)


distributed = file_module(f"{__name__}.distributed", "`torch.nn.parallel.distributed`",
                          {"DistributedDataParallel": DistributedDataParallel})  # fmt: skip

"""`torch.distributed.nn`: the differentiable collectives over `torch.distributed`'s process
group, which tracegrad does not provide; the name imports (vector-quantize-pytorch imports it
at the top, calling it only when `torch.distributed` is initialized, which it never is here)
and each collective raises when called."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided


def _refuse(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"torch.distributed.nn.{name} is not provided by tracegrad; its data parallelism is "
            "tracegrad.distributed, over MPI (docs/distributed.md)"
        )

    call.__name__ = name
    return call


all_reduce = _refuse("all_reduce")
all_gather = _refuse("all_gather")
broadcast = _refuse("broadcast")
reduce = _refuse("reduce")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

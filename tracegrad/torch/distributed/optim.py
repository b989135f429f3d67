"""`torch.distributed.optim`: `ZeroRedundancyOptimizer` shards optimizer state over
`torch.distributed`'s process group, which tracegrad does not provide; the name imports
(llm.c's `train_gpt2.py` imports it at the top) and building one raises."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided


class ZeroRedundancyOptimizer:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "torch.distributed.optim.ZeroRedundancyOptimizer is not provided by tracegrad (it "
            "shards state over torch.distributed's process group); use the optimizer itself, "
            "or tracegrad.distributed for data parallelism over MPI (docs/distributed.md)"
        )


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

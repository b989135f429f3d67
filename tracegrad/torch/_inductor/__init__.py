"""`torch._inductor`: PyTorch's compiler backend, which tracegrad's `torch.compile` does not
use; scripts set its `config` before compiling (llm.c's `coordinate_descent_tuning`)."""

from typing import Any

from tracegrad.torch._inductor import config
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["config"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

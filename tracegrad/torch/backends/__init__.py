"""`torch.backends`: the settings of PyTorch's kernel libraries. tracegrad has none of them:
each says it is not available, and settings such as `cudnn.benchmark = True` are accepted and
change nothing."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.backends import cpu, cuda, cudnn, mkldnn, mps


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

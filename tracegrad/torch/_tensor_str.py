"""`torch._tensor_str`: how tensors print (`frontend.printing`, PyTorch's format).
`PRINT_OPTS` holds the options `torch.set_printoptions` sets; `_tensor_str` is the data part of
a tensor's repr (PyG's file writers call it)."""

from __future__ import annotations

from typing import Any

from tracegrad.core.bfloat16 import readable
from tracegrad.frontend import printing
from tracegrad.frontend.printing import OPTIONS as PRINT_OPTS
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._environment import get_printoptions, printoptions, set_printoptions
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["PRINT_OPTS", "get_printoptions", "printoptions", "set_printoptions"]


def _tensor_str(self: Tensor, indent: int) -> str:
    """The values as the repr shows them, continued lines indented by `indent`."""
    return printing.values_str(readable(self._concrete("_tensor_str")), indent)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch._tensor_str`: how tensors print. Here NumPy prints them (`torch.set_printoptions`
sets NumPy's options), and `PRINT_OPTS` reads those options under PyTorch's names; `_tensor_str`
is the data part of a tensor's repr (PyG's file writers call it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.core.bfloat16 import readable
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["PRINT_OPTS"]


class _PrintOptions:
    """PyTorch's print options, read from NumPy's (which print tensors here)."""

    _NUMPY = {"precision": "precision", "threshold": "threshold", "edgeitems": "edgeitems",
              "linewidth": "linewidth"}  # fmt: skip

    def __getattr__(self, name: str) -> Any:
        if name in self._NUMPY:
            return np.get_printoptions()[self._NUMPY[name]]
        if name == "sci_mode":
            return None if not np.get_printoptions()["suppress"] else False
        raise AttributeError(name)


PRINT_OPTS = _PrintOptions()


def _tensor_str(self: Tensor, indent: int) -> str:
    """The values as the repr shows them, continued lines indented by `indent`."""
    return np.array2string(readable(self._concrete("_tensor_str")), separator=", ",
                           prefix=" " * indent)  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

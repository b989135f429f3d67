"""`torch.autograd`: `grad(outputs, inputs, ...)`, the grad modes and `Function` (a custom
op's forward and backward), over tracegrad's tape; `gradcheck` and `gradgradcheck`.
`Variable(t)` is the tensor itself (PyTorch's Variable is a Tensor since 0.4)."""

import types
from typing import Any

from tracegrad.frontend.autodiff import queue_callback
from tracegrad.frontend.autograd import *  # noqa: F403
from tracegrad.frontend.gradcheck import GradcheckError, gradcheck, gradgradcheck
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.autograd import forward_ad, function, functional, graph, profiler


def Variable(data: Any, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802
    """The tensor itself (requiring grad if asked), as PyTorch's deprecated Variable."""
    t = data if isinstance(data, Tensor) else Tensor._of(data)
    return t.requires_grad_() if requires_grad else t


# what hooks use to run code when the current backward ends (data parallelism's wait)
Variable._execution_engine = types.SimpleNamespace(queue_callback=queue_callback)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

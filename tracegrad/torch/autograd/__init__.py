"""`torch.autograd`: `grad(outputs, inputs, ...)`, the grad modes and `Function` (a custom
op's forward and backward), over tracegrad's tape; `gradcheck` and `gradgradcheck`.
`Variable(t)` is the tensor itself (PyTorch's Variable is a Tensor since 0.4). Also under the
files PyTorch keeps them in (`grad_mode`, `variable`, `anomaly_mode`), which code imports from."""

import contextlib
import threading
import types
from typing import Any

from tracegrad.frontend.autodiff import is_grad_enabled, queue_callback, set_grad_enabled
from tracegrad.frontend.autograd import *  # noqa: F403
from tracegrad.frontend.gradcheck import GradcheckError, gradcheck, gradgradcheck
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.autograd import forward_ad, function, functional, graph, profiler


class _VariableMeta(type):
    def __instancecheck__(cls, other: Any) -> bool:
        return isinstance(other, Tensor)  # PyTorch's: every tensor is a Variable (torchviz asks)


class Variable(metaclass=_VariableMeta):
    """PyTorch's deprecated Variable: calling it gives the tensor itself (requiring grad if
    asked)."""

    # what hooks use to run code when the current backward ends (data parallelism's wait)
    _execution_engine = types.SimpleNamespace(queue_callback=queue_callback)

    def __new__(cls, data: Any = None, requires_grad: bool = False, volatile: bool = False) -> Any:
        t = data if isinstance(data, Tensor) else Tensor._of(data)
        return t.requires_grad_() if requires_grad else t


_inference = threading.local()  # per thread, as grad mode is


def is_inference_mode_enabled() -> bool:
    return getattr(_inference, "enabled", False)


class inference_mode(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    """PyTorch's inference mode is no_grad here (it only saves PyTorch's bookkeeping), and
    `inference_mode(False)` turns grad mode on, as PyTorch's: `with inference_mode():`,
    `@inference_mode()`, `@inference_mode`."""

    def __new__(cls, mode: Any = True) -> Any:
        self = super().__new__(cls)
        if not callable(mode):
            return self
        self.__init__()
        return self(mode)  # used bare, as a decorator

    def __init__(self, mode: Any = True) -> None:
        self.mode = bool(mode) if not callable(mode) else True
        self._saved: list[tuple[bool, bool]] = []  # a stack: a decorator may be re-entered

    def __enter__(self) -> None:
        self._saved.append((is_inference_mode_enabled(), is_grad_enabled()))
        _inference.enabled = self.mode
        set_grad_enabled(not self.mode)

    def __exit__(self, *exc: Any) -> None:
        _inference.enabled, grad = self._saved.pop()
        set_grad_enabled(grad)


class set_multithreading_enabled(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    """Accepted: backward here runs on the calling thread either way."""

    def __init__(self, mode: bool) -> None:
        pass

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        pass


grad_mode = file_module(f"{__name__}.grad_mode", "`torch.autograd.grad_mode`", {
    "no_grad": no_grad, "enable_grad": enable_grad, "set_grad_enabled": set_grad_enabled,  # noqa: F405
    "inference_mode": inference_mode, "set_multithreading_enabled": set_multithreading_enabled,
})  # fmt: skip
variable = file_module(f"{__name__}.variable", "`torch.autograd.variable`",
                       {"Variable": Variable})  # fmt: skip
anomaly_mode = file_module(f"{__name__}.anomaly_mode", "`torch.autograd.anomaly_mode`", {
    "detect_anomaly": detect_anomaly, "set_detect_anomaly": set_detect_anomaly,  # noqa: F405
})  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

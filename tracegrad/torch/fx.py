"""`torch.fx`: PyTorch's tracer of modules into graphs of Python calls is not provided (the
compiler's tracer is `torch.compile`'s). `wrap`, which libraries (timm) apply at import to keep
a function whole in FX graphs, gives the function back; `Proxy` exists for isinstance checks
(nothing here is one)."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["GraphModule", "Proxy", "wrap"]


def wrap(fn_or_name: Any) -> Any:
    return fn_or_name


class Proxy:
    """FX's symbolic value: never made here."""


class GraphModule:
    """FX's module of a traced graph, for isinstance checks (lightning's): never made here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torch.fx.GraphModule is not provided by tracegrad (torch.fx symbolic tracing is "
            "not; torch.compile traces steps)"
        )


experimental = file_module(f"{__name__}.experimental", "`torch.fx.experimental`", {})
experimental.proxy_tensor = file_module(
    f"{__name__}.experimental.proxy_tensor",
    "`torch.fx.experimental.proxy_tensor`",
    {"get_proxy_mode": lambda: None},  # no FX tracing is ever under way
)


def __getattr__(name: str) -> Any:  # symbolic_trace, GraphModule, Tracer, ...
    raise _not_provided(__name__, name)

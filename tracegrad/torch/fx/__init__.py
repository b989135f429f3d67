"""`torch.fx`: PyTorch's tracer of modules and functions into graphs of Python calls, and the
graphs themselves: `symbolic_trace`, `Tracer` (leaf modules, `call_module`), `Proxy`, `Graph`
and `Node` (build, edit, `lint`, `eliminate_dead_code`, `print_tabular`), `GraphModule` (the
graph's generated `forward`, `recompile`, `code`), `Interpreter` and `Transformer`, `wrap`.
tracegrad's own compiler traces differently (`torch.compile`, `@tracegrad.trace`); FX graphs are
what user code inspects and rewrites, and a GraphModule is a module like any (it compiles too).
`passes.shape_prop.ShapeProp` records each node's tensor metadata, and
`subgraph_rewriter.replace_pattern` rewrites a pattern's occurrences. Not provided: the other
passes, and `experimental`'s tools beyond `proxy_tensor.get_proxy_mode`."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.fx import passes, subgraph_rewriter
from tracegrad.torch.fx.graph import Graph, PythonCode
from tracegrad.torch.fx.graph_module import GraphModule
from tracegrad.torch.fx.interpreter import Interpreter, Transformer
from tracegrad.torch.fx.node import Node, map_arg
from tracegrad.torch.fx.proxy import (
    Attribute,
    GraphAppendingTracer,
    Proxy,
    TraceError,
    Tracer,
    symbolic_trace,
    wrap,
)

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "Proxy", "Tracer", "Transformer",
           "symbolic_trace", "wrap"]  # fmt: skip

_symbolic_trace = file_module(f"{__name__}._symbolic_trace", "`torch.fx._symbolic_trace`", {
    "Tracer": Tracer, "symbolic_trace": symbolic_trace, "wrap": wrap,
})  # fmt: skip
replace_pattern = subgraph_rewriter.replace_pattern
experimental = file_module(f"{__name__}.experimental", "`torch.fx.experimental`", {})
experimental.proxy_tensor = file_module(
    f"{__name__}.experimental.proxy_tensor",
    "`torch.fx.experimental.proxy_tensor`",
    {"get_proxy_mode": lambda: None},  # no proxy-tensor tracing is ever under way
)
experimental.symbolic_shapes = file_module(
    f"{__name__}.experimental.symbolic_shapes",
    "`torch.fx.experimental.symbolic_shapes`: sizes here are always ints, so every guard is "
    "Python's truth of a concrete value, and nothing has free symbols",
    {"guard_size_oblivious": bool, "statically_known_true": bool, "definitely_true": bool,
     "guard_or_true": bool, "guard_or_false": bool, "expect_true": bool,
     "definitely_false": lambda x: not x, "is_concrete_int": lambda x: isinstance(x, int),
     "is_concrete_bool": lambda x: isinstance(x, bool), "has_free_symbols": lambda x: False,
     "free_symbols": lambda x: set(), "free_unbacked_symbols": lambda x: set()},
)  # fmt: skip
_ = (PythonCode, map_arg, passes, subgraph_rewriter)  # (importable from here, as PyTorch's are)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

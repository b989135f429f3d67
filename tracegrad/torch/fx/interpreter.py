"""`torch.fx.interpreter`: run a graph node by node (`Interpreter`, whose methods per kind of
node a subclass overrides: a profiler, a shape propagator), or rewrite it as it runs
(`Transformer`: each node's method returns proxies, which build a new graph)."""

from __future__ import annotations

from typing import Any

from tracegrad.nn import Module
from tracegrad.torch.fx.graph import Graph
from tracegrad.torch.fx.graph_module import GraphModule
from tracegrad.torch.fx.node import Node, map_aggregate, map_arg
from tracegrad.torch.fx.proxy import GraphAppendingTracer, Proxy


class Interpreter:
    def __init__(self, module: Module, garbage_collect_values: bool = True,
                 graph: Graph | None = None) -> None:  # fmt: skip
        self.module = module
        self.submodules = dict(module.named_modules())
        self.graph = graph if graph is not None else module.graph
        self.env: dict[Node, Any] = {}
        self.garbage_collect_values = garbage_collect_values

    def run(self, *args: Any, initial_env: dict | None = None,
            enable_io_processing: bool = True) -> Any:  # fmt: skip
        self.env = dict(initial_env or {})
        self.args_iter = iter(args)
        last_use = {i: n for n in self.graph.nodes for i in n.all_input_nodes}
        for node in self.graph.nodes:
            if node not in self.env:
                self.env[node] = self.run_node(node)
            if self.garbage_collect_values:
                for i in node.all_input_nodes:
                    if last_use.get(i) is node:
                        self.env.pop(i, None)
            if node.op == "output":
                return self.env[node]
        return None

    def run_node(self, n: Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        if target.startswith("*"):
            return list(self.args_iter)
        try:
            return next(self.args_iter)
        except StopIteration as e:
            if args:
                return args[0]
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one "
                               "was not passed in!") from e  # fmt: skip

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.fetch_attr(target)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        return target(*args, **kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Any:
        obj, *rest = args
        return getattr(obj, target)(*rest, **kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target: str, args: tuple, kwargs: dict) -> Any:
        return args[0]

    def fetch_attr(self, target: str) -> Any:
        value = self.module
        for i, part in enumerate(target.split(".")):
            if not hasattr(value, part):
                raise RuntimeError(f"Node referenced nonexistent target "
                                   f"{'.'.join(target.split('.')[:i + 1])}")  # fmt: skip
            value = getattr(value, part)
        return value

    def fetch_args_kwargs_from_env(self, n: Node) -> tuple[tuple, dict]:
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args: Any, n: Node) -> Any:
        def value(x: Node) -> Any:
            if x not in self.env:
                raise RuntimeError(f"Node {n} referenced nonexistent value {x}! Run Graph.lint() "
                                   "to diagnose such issues")  # fmt: skip
            return self.env[x]

        return map_arg(args, value)


class Transformer(Interpreter):
    """Runs the graph on proxies: what each method returns builds `transform()`'s new
    GraphModule (override `call_function` and the others to rewrite)."""

    def __init__(self, module: Module) -> None:
        super().__init__(module)
        self.new_graph = Graph()
        self.tracer = GraphAppendingTracer(self.new_graph)
        self.tracer.root = module

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        default = args[0] if args else None
        node = (self.new_graph.placeholder(target, default_value=default) if args else
                self.new_graph.placeholder(target))  # fmt: skip
        return Proxy(node, self.tracer)

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("get_attr", target, args, kwargs)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.tracer.create_proxy("call_method", target, args, kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.tracer.create_proxy("call_module", target, args, kwargs)

    def transform(self) -> GraphModule:
        result = super().run()
        self.new_graph.output(map_aggregate(result, lambda x: x.node if isinstance(x, Proxy)
                                            else x))  # fmt: skip
        return GraphModule(self.module, self.new_graph)

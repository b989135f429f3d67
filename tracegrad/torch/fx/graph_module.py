"""`torch.fx.graph_module`: a module whose `forward` is a graph's generated Python, holding the
submodules, parameters and buffers the graph names (the root's own objects)."""

from __future__ import annotations

from typing import Any

from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import Module, Parameter
from tracegrad.torch.fx.graph import Graph
from tracegrad.torch.fx.node import Node, map_arg


class GraphModule(Module):
    """`GraphModule(root, graph)`: `root` (a module, or a dict of path -> object) gives what the
    graph's `get_attr` and `call_module` nodes name; `recompile()` makes `forward` from the graph
    again after edits (setting `.graph` does too). Each instance has a class of its own, so that
    its `forward` is its graph's."""

    def __new__(cls, *args: Any, **kwargs: Any) -> GraphModule:
        own = type(cls.__name__, (cls,), {"__module__": cls.__module__})
        return super().__new__(own)

    def __init__(self, root: Module | dict, graph: Graph, class_name: str = "GraphModule",
                 constants: dict | None = None) -> None:  # fmt: skip
        super().__init__()
        type(self).__name__ = type(self).__qualname__ = class_name
        named = [n.target for n in graph.nodes if n.op in ("get_attr", "call_module")]
        for path in dict.fromkeys(named):
            if constants and path in constants:
                _install(self, path, constants[path])
            elif isinstance(root, dict):
                _install(self, path, root[path])
            else:
                _copy_attr(root, self, path)
        self.graph = graph

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Called on proxies outside a trace (a graph being built by hand), its graph is copied
        into theirs, and the result is a proxy of what it returns."""
        if not args or kwargs or not all(_is_proxy(a) for a in args):
            return super().__call__(*args, **kwargs)
        placeholders = [n for n in self._graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(args):
            raise TypeError(f"{type(self).__name__}: {len(placeholders)} inputs, {len(args)} "
                            "proxies given")  # fmt: skip
        tracer = args[0].tracer
        values = dict(zip(placeholders, (a.node for a in args), strict=True))
        out = tracer.graph.graph_copy(_without(self._graph, placeholders), values)
        return map_arg(out, tracer.proxy)

    @property
    def graph(self) -> Graph:
        return self._graph

    @graph.setter
    def graph(self, g: Graph) -> None:
        self._graph = g
        g.owning_module = self
        self.recompile()

    def recompile(self) -> Any:
        """`forward` made from the graph as it is now (after edits)."""
        python = self._graph.python_code("self")
        namespace = dict(python.globals)
        exec(compile(python.src, f"<fx {type(self).__name__}>", "exec"), namespace)
        type(self).forward = namespace["forward"]
        self._code = python.src
        return python

    @property
    def code(self) -> str:
        return self._code

    def print_readable(self, print_output: bool = True, **kwargs: Any) -> str:
        body = self._code.replace("\n", "\n    ")
        text = f"class {type(self).__name__}(torch.nn.Module):{body}"
        if print_output:
            print(text)
        return text

    def add_submodule(self, target: str, m: Module) -> bool:
        _install(self, target, m, False)
        return True

    def delete_submodule(self, target: str) -> bool:
        *parents, last = target.split(".")
        owner = _fetch(self, ".".join(parents)) if parents else self
        if last not in owner._modules:
            return False
        delattr(owner, last)
        return True

    def delete_all_unused_submodules(self) -> None:
        used = {n.target for n in self._graph.nodes if n.op == "call_module"}
        for name, _ in list(self.named_children()):
            if not any(u == name or u.startswith(f"{name}.") for u in used):
                delattr(self, name)

    def __str__(self) -> str:
        return f"{super().__str__()}\n\n{self._code}"


def _is_proxy(a: Any) -> bool:
    return isinstance(getattr(a, "node", None), Node) and hasattr(a, "tracer")


def _without(graph: Graph, placeholders: list) -> Graph:
    """A view of `graph` without its placeholders (their values are given)."""
    view = Graph()
    view._nodes = [n for n in graph.nodes if n not in placeholders]
    return view


def _fetch(root: Any, path: str) -> Any:
    value = root
    for part in path.split("."):
        if not hasattr(value, part):
            raise AttributeError(f"GraphModule: the root has no {path!r} (at {part!r})")
        value = getattr(value, part)
    return value


def _copy_attr(from_module: Module, to_module: Module, target: str) -> None:
    """Put `from_module`'s object at `target` at the same path below `to_module` (a buffer as a
    buffer), making plain modules for the parents it lacks (PyTorch's helper: torchvision's
    feature extractor calls it)."""
    *parents, last = target.split(".")
    for part in parents:
        source, made = getattr(from_module, part), getattr(to_module, part, None)
        if source is made:
            return
        if made is None:
            made = Module()
            setattr(to_module, part, made)
        from_module, to_module = source, made
    value = _fetch(from_module, last)
    if isinstance(value, Tensor) and not isinstance(value, Parameter) and isinstance(
        from_module, Module) and last in from_module._buffers:  # fmt: skip
        to_module.register_buffer(last, value)
    else:
        setattr(to_module, last, value)


def _install(into: Module, path: str, value: Any) -> None:
    """Put `value` (a constant of the trace, or a dict root's entry) at `path` below `into`."""
    *parents, last = path.split(".")
    owner = into
    for part in parents:
        if not hasattr(owner, part):
            setattr(owner, part, Module())
        owner = getattr(owner, part)
    setattr(owner, last, value)


class _CodeOnlyModule(Module):
    """A module that is only its attributes (`body`): what a GraphModule's copy starts from."""

    def __init__(self, body: dict) -> None:
        super().__init__()
        self.__dict__ = body


_USER_PRESERVED_ATTRIBUTES_KEY = "_user_preserved_attributes"

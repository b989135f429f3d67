"""`torch.fx.proxy` and symbolic tracing: a `Proxy` stands for a value while a function runs on
it, and each operation on it (an operator, a method, a torch function, a leaf module's call)
adds a node to the tracer's graph instead of computing.

Python routes operators and method calls to the proxy by itself; functions (`torch.relu(x)`,
`F.linear(x, w)`, `math.sqrt(n)`) are replaced, while a trace runs or a hand-built graph's
tracer lives, by ones that add a node when a proxy is among their arguments (PyTorch's
`__torch_function__` does it there), in `torch`, `torch.nn.functional`, `math` and the globals
`wrap` names; a tensor's operators step aside for a proxy (`w @ x`); and, in a trace,
`Module.__call__` asks the tracer whether the module is a leaf (`call_module`) or is traced
through. A tensor the code
reads (a parameter, a buffer) becomes a `get_attr` of its path in the root module, or a
constant kept on the GraphModule."""

from __future__ import annotations

import builtins
import dis
import functools
import inspect
import math
import operator
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

from tracegrad.frontend.products import einsum
from tracegrad.frontend.tensor import Tensor
from tracegrad.frontend.torch_function import unwrapped
from tracegrad.nn import Module, Sequential
from tracegrad.torch.fx.graph import Graph
from tracegrad.torch.fx.graph_module import GraphModule
from tracegrad.torch.fx.node import Node, map_aggregate

_TRACERS: list[Tracer] = []  # the traces running, innermost last
_WRAPPED: list[tuple[dict, str]] = []  # (globals, name) that `wrap` named


class TraceError(ValueError):
    """An operation a symbolic trace cannot record (control flow on a traced value)."""


class Proxy:
    """A value inside a symbolic trace: its `node` in the tracer's graph."""

    def __init__(self, node: Node, tracer: Tracer | None = None) -> None:
        self.node = node
        self.tracer = tracer if tracer is not None else GraphAppendingTracer(node.graph)

    def __repr__(self) -> str:
        return f"Proxy({self.node.name})"

    def __getattr__(self, name: str) -> Attribute:
        if name.startswith("_"):  # Python's and tracegrad's own probes, not a tensor's API
            raise AttributeError(name)
        return Attribute(self, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Proxy:
        return self.tracer.create_proxy("call_method", "__call__", (self, *args), kwargs)

    def __getitem__(self, key: Any) -> Proxy:
        return self.tracer.create_proxy("call_function", operator.getitem, (self, key), {})

    def __iter__(self) -> Any:
        """Unpacking (`a, b = proxy`) gives one item per name; other iteration cannot be
        traced (the length is not known)."""
        frame = inspect.currentframe().f_back
        at = frame.f_lasti  # the instruction asking: UNPACK_SEQUENCE when unpacking
        for instruction in dis.get_instructions(frame.f_code):
            if instruction.offset >= at and instruction.opname != "CACHE":
                if instruction.opname == "UNPACK_SEQUENCE":
                    return iter([self[i] for i in range(instruction.argval)])
                break
        raise TraceError(
            "Proxy object cannot be iterated. This can be attempted when the Proxy is used in a "
            "loop or as a *args or **kwargs function argument."
        )

    def __bool__(self) -> bool:
        raise TraceError("symbolically traced variables cannot be used as inputs to control "
                         f"flow (the value of {self.node.name})")  # fmt: skip

    def __len__(self) -> int:
        raise RuntimeError("'len' is not supported in symbolic tracing by default. If you want "
                           "this call to be recorded, please call torch.fx.wrap('len') at module "
                           "scope")  # fmt: skip

    def keys(self) -> Any:
        raise TraceError("a Proxy cannot be unpacked with ** (its keys are not known)")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TraceError(
            f"a Proxy ({self.node.name}) reached a tensor function outside symbolic tracing: "
            "tracegrad records torch functions on proxies only inside torch.fx.symbolic_trace "
            "(and a GraphModule called on proxies inlines its graph); to build a graph by "
            "hand, add the node with graph.call_function(fn, args)"
        )

    def __index__(self) -> int:
        raise TraceError(f"a traced value ({self.node.name}) cannot be used as a Python int")


def _binary(fn: Callable) -> tuple[Callable, Callable]:
    def forward(self: Proxy, other: Any) -> Proxy:
        return self.tracer.create_proxy("call_function", fn, (self, other), {})

    def reflected(self: Proxy, other: Any) -> Proxy:
        return self.tracer.create_proxy("call_function", fn, (other, self), {})

    return forward, reflected


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
              "xor", "lshift", "rshift"):  # fmt: skip
    _fn = getattr(operator, _name if _name not in ("and", "or") else f"{_name}_")
    _f, _r = _binary(_fn)
    setattr(Proxy, f"__{_name}__", _f)
    setattr(Proxy, f"__r{_name}__", _r)
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Proxy, f"__{_name}__", _binary(getattr(operator, _name))[0])
for _name, _fn in (("neg", operator.neg), ("pos", operator.pos), ("invert", operator.invert),
                   ("abs", builtins.abs)):  # fmt: skip
    setattr(Proxy, f"__{_name}__",
            functools.partialmethod(lambda self, fn: self.tracer.create_proxy(
                "call_function", fn, (self,), {}), _fn))  # fmt: skip
Proxy.__hash__ = object.__hash__


class Attribute(Proxy):
    """`proxy.name`: a method when called (`call_method`), else the attribute (`getattr`,
    made only when it is used as a value)."""

    def __init__(self, root: Proxy, attr: str) -> None:
        self.root, self.attr, self.tracer = root, attr, root.tracer
        self._node: Node | None = None

    @property
    def node(self) -> Node:  # type: ignore[override]
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", builtins.getattr,
                                                  (self.root, self.attr), {}).node  # fmt: skip
        return self._node

    def __call__(self, *args: Any, **kwargs: Any) -> Proxy:
        return self.tracer.create_proxy("call_method", self.attr, (self.root, *args), kwargs)


def proxies_in(a: Any) -> list[Proxy]:
    found: list[Proxy] = []
    map_aggregate(a, lambda x: found.append(x) if isinstance(x, Proxy) else None)
    return found


class Tracer:
    """Symbolic tracing (`trace(root)` gives the Graph); subclasses decide which modules are
    leaves (`is_leaf_module`) and what a module call records (`call_module`)."""

    def __init__(self, autowrap_modules: tuple = (math,), autowrap_functions: tuple = (),
                 param_shapes_constant: bool = False) -> None:  # fmt: skip
        self.autowrap_modules, self.autowrap_functions = autowrap_modules, autowrap_functions
        self.root: Module | None = None
        self.graph = Graph(tracer_cls=type(self))
        self.tensor_attrs: dict[int, str] = {}
        self.constants: dict[str, Tensor] = {}
        self._paths: dict[int, str] = {}

    # ----- nodes and proxies

    def create_node(self, kind: str, target: Any, args: tuple, kwargs: dict,
                    name: str | None = None, type_expr: Any = None) -> Node:  # fmt: skip
        return self.graph.create_node(kind, target, args, kwargs, name, type_expr)

    def proxy(self, node: Node) -> Proxy:
        return Proxy(node, self)

    def create_proxy(self, kind: str, target: Any, args: tuple, kwargs: dict,
                     name: str | None = None, type_expr: Any = None,
                     proxy_factory_fn: Callable | None = None) -> Proxy:  # fmt: skip
        node = self.create_node(kind, target, self.create_arg(tuple(args)),
                                self.create_arg(dict(kwargs)), name, type_expr)  # fmt: skip
        return proxy_factory_fn(node) if proxy_factory_fn is not None else self.proxy(node)

    def create_arg(self, a: Any) -> Any:
        """`a` as a node's argument: proxies as their nodes, the root's tensors as `get_attr`s
        of their paths, other tensors as constants the GraphModule keeps."""
        if isinstance(a, Proxy):
            return a.node
        if isinstance(a, Tensor):
            return self._tensor_node(a)
        if isinstance(a, Module):
            raise TraceError(f"a module ({type(a).__name__}) as an argument cannot be traced; "
                             "call it instead")  # fmt: skip
        if isinstance(a, tuple | list | dict | slice):
            return map_aggregate(a, lambda x: self.create_arg(x) if not isinstance(
                x, tuple | list | dict | slice) else x)  # fmt: skip
        return a

    def _tensor_node(self, t: Tensor) -> Node:
        if not self.tensor_attrs and self.root is not None:
            for kind in (self.root.named_parameters(), self.root.named_buffers()):
                for name, value in kind:
                    self.tensor_attrs.setdefault(id(value), name)
        path = self.tensor_attrs.get(id(t))
        if path is None:
            path = f"_tensor_constant{len(self.constants)}"
            self.constants[path] = t
            self.tensor_attrs[id(t)] = path
        return self.create_node("get_attr", path, (), {})

    # ----- modules

    def is_leaf_module(self, m: Module, module_qualified_name: str) -> bool:
        """PyTorch's rule: its own layers are leaves (recorded as `call_module`), Sequential
        and the user's modules are traced through."""
        home = type(m).__module__ or ""
        return home.startswith(("tracegrad.nn", "tracegrad.torch.nn", "torch.nn")) and not (
            isinstance(m, Sequential)
        )

    def path_of_module(self, mod: Module) -> str:
        if not self._paths and self.root is not None:
            self._paths = {id(m): name for name, m in self.root.named_modules()}
        if id(mod) not in self._paths:
            raise NameError("module is not installed as a submodule")
        return self._paths[id(mod)]

    def call_module(self, m: Module, forward: Callable, args: tuple, kwargs: dict) -> Any:
        path = self.path_of_module(m)
        if not self.is_leaf_module(m, path):
            return forward(*args, **kwargs)
        return self.create_proxy("call_module", path, args, kwargs)

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict) -> Any:
        return attr_val

    # ----- the trace

    def trace(self, root: Module | Callable, concrete_args: dict | None = None) -> Graph:
        if isinstance(root, Module):
            self.root, fn = root, type(root).forward
            args_of: list[Any] = [root]
        else:
            self.root, fn, args_of = Module(), root, []
        self.graph = Graph(tracer_cls=type(self))
        self.tensor_attrs, self.constants, self._paths = {}, {}, {}
        concrete = dict(concrete_args or {})
        code = inspect.signature(fn)
        params = list(code.parameters.values())[len(args_of) :]
        args, kwargs = list(args_of), {}
        for p in params:
            if p.name in concrete:
                value = concrete[p.name]
            elif p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                stars = "*" if p.kind is p.VAR_POSITIONAL else "**"
                self.create_proxy("placeholder", f"{stars}{p.name}", (), {}, p.name)
                continue
            else:
                default = () if p.default is p.empty else (p.default,)
                value = self.create_proxy("placeholder", p.name, default, {}, p.name)
            if p.kind is p.KEYWORD_ONLY:
                kwargs[p.name] = value
            else:
                args.append(value)
        with _patched(self, fn):
            result = fn(*args, **kwargs)
        self.create_node("output", "output", (self.create_arg(result),), {})
        return self.graph


class GraphAppendingTracer(Tracer):
    """A tracer that adds to an existing graph: proxies made from its nodes record what torch
    functions do to them for as long as it lives (a graph built by hand, `Transformer`)."""

    def __init__(self, graph: Graph) -> None:
        super().__init__()
        self.graph = graph
        _FunctionPatch.acquire()
        weakref.finalize(self, _FunctionPatch.release)


class _FunctionPatch:
    """The namespaces' functions made to record a node when a proxy is among their arguments,
    and tensors' operators made to step aside for a proxy: installed while a trace runs or a
    `GraphAppendingTracer` lives (counted), removed after the last. (Meanwhile every such call
    looks through its arguments for proxies.)"""

    SPACES = ("tracegrad", "tracegrad.torch", "tracegrad.nn.functional",
              "tracegrad.torch.nn.functional", "math")  # fmt: skip
    users = 0
    undo: list[Callable[[], None]] = []

    @classmethod
    def acquire(cls) -> None:
        if cls.users == 0:
            for space in cls.SPACES:
                module = sys.modules.get(space)
                for name, value in list(vars(module).items()) if module else ():
                    if _is_function(value):
                        cls.undo.append(_replace(module, name, _recording(value)))
            for name in _TENSOR_OPERATORS:
                cls.undo.append(_replace(Tensor, name, _stepping_aside(getattr(Tensor, name))))
        cls.users += 1

    @classmethod
    def release(cls) -> None:
        cls.users -= 1
        if cls.users == 0:
            for undo in reversed(cls.undo):
                undo()
            cls.undo.clear()


def _replace(owner: Any, name: str, value: Any) -> Callable[[], None]:
    """Set `owner.name` (a module's or a class's own attribute); what puts the old one back."""
    before = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
    setattr(owner, name, value)
    return lambda: setattr(owner, name, before)


class _patched:
    """While a trace runs: the functions' patch, the functions `wrap` named (and the tracer's
    `autowrap_functions`) recording too, and module calls through the tracer."""

    def __init__(self, tracer: Tracer, fn: Callable) -> None:
        self.tracer, self.fn, self.undo = tracer, fn, []

    def __enter__(self) -> None:
        _TRACERS.append(self.tracer)
        _FunctionPatch.acquire()
        for holder, name in _WRAPPED + [(getattr(self.fn, "__globals__", {}), f.__name__)
                                        for f in self.tracer.autowrap_functions]:  # fmt: skip
            if name in holder and callable(holder[name]):
                before = holder[name]
                holder[name] = _recording(before)
                self.undo.append(lambda h=holder, n=name, b=before: h.__setitem__(n, b))
        self.undo.append(_replace(Module, "__call__", _module_call(Module.__call__)))

    def __exit__(self, *exc: Any) -> None:
        for undo in reversed(self.undo):
            undo()
        _FunctionPatch.release()
        _TRACERS.pop()


_TENSOR_OPERATORS = [f"__{p}{n}__" for n in ("add", "sub", "mul", "truediv", "floordiv", "mod",
                                             "pow", "matmul", "and", "or", "xor")
                     for p in ("", "r")] + ["__eq__", "__ne__", "__lt__", "__le__", "__gt__",
                                            "__ge__"]  # fmt: skip


def _is_function(value: Any) -> bool:
    value = unwrapped(value)
    return isinstance(value, types.FunctionType | types.BuiltinFunctionType) or (
        callable(value) and type(value).__name__ == "Primitive"
    )


def _recording(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        found = proxies_in((args, kwargs)) if _FunctionPatch.users else ()
        if found:  # recorded by the proxy's tracer (a trace's, or a hand-built graph's)
            if unwrapped(fn) is einsum and len(args) == 2 and isinstance(args[1], list | tuple):
                args = (args[0], *args[1])  # PyTorch's einsum records its operands spread
            return found[0].tracer.create_proxy("call_function", fn, args, kwargs)
        return fn(*args, **kwargs)

    call.__fx_original__ = fn
    return call


def _stepping_aside(op: Callable) -> Callable:
    def call(self: Any, other: Any) -> Any:
        return NotImplemented if isinstance(other, Proxy) else op(self, other)

    return call


def _module_call(call: Callable) -> Callable:
    def traced_call(self: Module, *args: Any, **kwargs: Any) -> Any:
        if not _TRACERS:
            return call(self, *args, **kwargs)
        return _TRACERS[-1].call_module(self, self.forward, args, kwargs)

    return traced_call


def wrap(fn_or_name: str | Callable) -> str | Callable:
    """Record calls of this module-level function as one `call_function` node (its body not
    traced through); call at module scope. Gives its argument back."""
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    caller = inspect.currentframe().f_back
    _WRAPPED.append((caller.f_globals, name))
    return fn_or_name


def symbolic_trace(root: Module | Callable, concrete_args: dict | None = None) -> Any:
    """`root` (a module or a function) traced into a GraphModule."""
    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    name = type(root).__name__ if isinstance(root, Module) else root.__name__
    return GraphModule(tracer.root, graph, name, constants=tracer.constants)

"""`torch.fx.graph`: an FX graph, the nodes of a function in order, what builds and edits it,
and the Python source it stands for (`python_code`, which `GraphModule` runs)."""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import keyword
import math
import operator
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tracegrad.frontend.torch_function import unwrapped
from tracegrad.torch.fx.node import Node, map_arg

# operator functions written as Python's operators in the generated code
BINARY = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
          operator.floordiv: "//", operator.mod: "%", operator.pow: "**",
          operator.matmul: "@", operator.and_: "&", operator.or_: "|", operator.xor: "^",
          operator.lshift: "<<", operator.rshift: ">>", operator.eq: "==", operator.ne: "!=",
          operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">="}  # fmt: skip
UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}
# names the generated code uses for itself: a node may not take them
RESERVED = {"self", "torch", "operator", "math", "inf", "nan", "getattr", "None", "True",
            "False", "slice"} | set(keyword.kwlist)  # fmt: skip


@dataclass
class PythonCode:
    """A graph as Python: `src` (a `forward` definition) and the `globals` it needs."""

    src: str
    globals: dict[str, Any]


class Graph:
    """The nodes of one function, in execution order (see `Node`)."""

    def __init__(self, owning_module: Any = None, tracer_cls: Any = None,
                 tracer_extras: Any = None) -> None:  # fmt: skip
        self._nodes: list[Node] = []
        self._taken: dict[str, int] = {}
        self._insert: Callable[[Node], None] = self._nodes.append
        self.owning_module, self._tracer_cls = owning_module, tracer_cls

    # ----- order

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes in order, as they are now (erasing or inserting while iterating is safe)."""
        return tuple(self._nodes)

    def index(self, n: Node) -> int:
        return self._nodes.index(n)

    def node_after(self, n: Node) -> Node | None:
        i = self.index(n) + 1
        return self._nodes[i] if i < len(self._nodes) else None

    def node_before(self, n: Node) -> Node | None:
        i = self.index(n)
        return self._nodes[i - 1] if i > 0 else None

    def move_before(self, x: Node, anchor: Node) -> None:
        self._nodes.remove(x)
        self._nodes.insert(self.index(anchor), x)

    def move_after(self, x: Node, anchor: Node) -> None:
        self._nodes.remove(x)
        self._nodes.insert(self.index(anchor) + 1, x)

    @contextlib.contextmanager
    def inserting_before(self, n: Node | None = None) -> Iterator[None]:
        """New nodes go before `n` (None: at the start), in the order they are made."""

        def insert(new: Node) -> None:
            self._nodes.insert(self.index(n) if n is not None else 0, new)

        yield from self._inserting(insert)

    @contextlib.contextmanager
    def inserting_after(self, n: Node | None = None) -> Iterator[None]:
        """New nodes go after `n` (None: at the end), each after the one made before it."""
        last = [n]

        def insert(new: Node) -> None:
            if last[0] is None:
                self._nodes.append(new)
            else:
                self._nodes.insert(self.index(last[0]) + 1, new)
            last[0] = new

        yield from self._inserting(insert)

    def _inserting(self, insert: Callable[[Node], None]) -> Iterator[None]:
        before, self._insert = self._insert, insert
        try:
            yield
        finally:
            self._insert = before

    # ----- making nodes

    def create_node(self, op: str, target: Any, args: tuple | None = None,
                    kwargs: dict | None = None, name: str | None = None,
                    type_expr: Any = None) -> Node:  # fmt: skip
        node = Node(self, self._unique(name or _candidate(op, target)), op, target,
                    tuple(args or ()), dict(kwargs or {}), type_expr)  # fmt: skip
        self._insert(node)
        return node

    def placeholder(self, name: str, type_expr: Any = None,
                    default_value: Any = inspect.Signature.empty) -> Node:  # fmt: skip
        args = () if default_value is inspect.Signature.empty else (default_value,)
        return self.create_node("placeholder", name, args, {}, name.lstrip("*"), type_expr)

    def get_attr(self, qualified_name: str, type_expr: Any = None) -> Node:
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_function(self, the_function: Callable, args: tuple | None = None,
                      kwargs: dict | None = None, type_expr: Any = None) -> Node:  # fmt: skip
        return self.create_node("call_function", the_function, args, kwargs, type_expr=type_expr)

    def call_method(self, method_name: str, args: tuple | None = None,
                    kwargs: dict | None = None, type_expr: Any = None) -> Node:  # fmt: skip
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_module(self, module_name: str, args: tuple | None = None,
                    kwargs: dict | None = None, type_expr: Any = None) -> Node:  # fmt: skip
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr)

    def output(self, result: Any, type_expr: Any = None) -> Node:
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda x: x) -> Node:
        """A copy of `node` (from any graph) here, its inputs mapped by `arg_transform`."""
        args, kwargs = map_arg(node.args, arg_transform), map_arg(node.kwargs, arg_transform)
        made = self.create_node(node.op, node.target, args, kwargs, node.name, node.type)
        made.meta = dict(node.meta)
        return made

    def graph_copy(self, g: Graph, val_map: dict, return_output_node: bool = False) -> Any:
        """Copy `g`'s nodes here (`val_map`: its nodes to this graph's, filled as it goes); the
        value its output returns."""
        for node in g.nodes:
            if node.op == "output":
                out = map_arg(node.args[0], val_map.__getitem__)
                return (out, node) if return_output_node else out
            val_map[node] = self.node_copy(node, val_map.__getitem__)
        return None

    def erase_node(self, to_erase: Node) -> None:
        if to_erase.users:
            raise RuntimeError(
                f"Tried to erase Node {to_erase} but it still had {len(to_erase.users)} users "
                f"in the graph: {to_erase.users}!"
            )
        self._nodes.remove(to_erase)
        to_erase._update((), {})

    def find_nodes(self, *, op: str, target: Any = None) -> list[Node]:
        return [n for n in self._nodes if n.op == op and (target is None or n.target == target)]

    def _unique(self, candidate: str) -> str:
        """`candidate` as a Python name no other node (nor the generated code) uses: add, then
        add_1, add_2, ..."""
        base = re.sub(r"\W", "_", candidate) or "_"
        base = f"_{base}" if base[0].isdigit() else base
        k = self._taken.get(base, 0)
        while True:
            name = base if k == 0 else f"{base}_{k}"
            k += 1
            if name not in self._taken and name not in RESERVED and not hasattr(builtins, name):
                self._taken[base] = k
                self._taken.setdefault(name, 1)
                return name

    # ----- checks and clean-up

    def lint(self) -> None:
        """Every node's inputs are earlier nodes of this graph; names are unique."""
        seen: set[Node] = set()
        names: set[str] = set()
        for n in self._nodes:
            for i in n.all_input_nodes:
                if i not in seen:
                    raise RuntimeError(f"Argument '{i}' of Node '{n}' was used before it has been "
                                       "defined, or is not in this graph")  # fmt: skip
            if n.name in names:
                raise RuntimeError(f"Node redefined name {n.name}!")
            if n.graph is not self:
                raise RuntimeError(f"Node '{n}' does not belong to this Graph!")
            seen.add(n)
            names.add(n.name)

    def eliminate_dead_code(self) -> bool:
        """Remove the nodes whose results nothing uses (not inputs, not the output); whether any
        went."""
        removed = False
        for n in reversed(self._nodes):
            if n.op not in ("placeholder", "output") and not n.users:
                self.erase_node(n)
                removed = True
        return removed

    # ----- as text and as Python

    def __str__(self) -> str:
        placeholders = ", ".join(n.target for n in self._nodes if n.op == "placeholder")
        lines = [f"graph({placeholders}):"] + [f"    {n.format_node()}" for n in self._nodes]
        return "\n".join(lines)

    def print_tabular(self) -> None:
        rows = [("opcode", "name", "target", "args", "kwargs")] + [
            (n.op, n.name, n.target if isinstance(n.target, str) else
             getattr(n.target, "__name__", repr(n.target)), str(n.args), str(n.kwargs))
            for n in self._nodes
        ]  # fmt: skip
        widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
        for k, row in enumerate(rows):
            print("  ".join(f"{str(c):<{w}}" for c, w in zip(row, widths, strict=True)).rstrip())
            if k == 0:
                print("  ".join("-" * w for w in widths))

    def python_code(self, root_module: str = "self") -> PythonCode:
        return _Codegen(self, root_module).code()


def _candidate(op: str, target: Any) -> str:
    if op in ("placeholder", "get_attr", "call_module", "call_method"):
        return str(target).replace(".", "_").lstrip("*")
    if op == "output":
        return "output"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", function_name(target)).lower()


def function_name(fn: Any) -> str:
    """A function's name (an op of tracegrad's table gives its `name`)."""
    name = getattr(fn, "__name__", None) or getattr(fn, "name", None)
    return name if isinstance(name, str) else type(fn).__name__


@functools.cache
def _public_names() -> dict[int, str]:
    """The functions of `torch` and `torch.nn.functional` by identity, as generated code names
    them (`torch.relu`, `torch.nn.functional.linear`)."""
    torch = sys.modules["tracegrad.torch"]  # (loaded: fx is its submodule)
    found: dict[int, tuple[str, bool]] = {}
    for prefix, space in (("torch", torch), ("torch.nn.functional", torch.nn.functional)):
        for name, value in vars(space).items():
            if callable(value) and not isinstance(value, type) and not name.startswith("_"):
                fn = unwrapped(getattr(value, "__fx_original__", value))
                own = function_name(fn) == name  # `torch.cat`, not its alias `concatenate`
                if id(fn) not in found or own and not found[id(fn)][1]:
                    found[id(fn)] = (f"{prefix}.{name}", own)
    return {key: name for key, (name, _) in found.items()}


class _Codegen:
    """A graph as the body of `forward`: a statement per node, each name freed after its last
    use, as PyTorch's generated code reads."""

    def __init__(self, graph: Graph, root: str) -> None:
        torch = sys.modules["tracegrad.torch"]  # what `torch.` in the code names
        self.graph, self.root, self.torch = graph, root, torch
        self.globals: dict[str, Any] = {"torch": torch, "operator": operator, "math": math,
                                        "inf": math.inf, "nan": math.nan}  # fmt: skip

    def code(self) -> PythonCode:
        nodes = self.graph.nodes
        last_use: dict[Node, Node] = {}
        for n in nodes:
            for i in n.all_input_nodes:
                last_use[i] = n
        dies: dict[Node, list[str]] = {}
        for value, user in last_use.items():
            dies.setdefault(user, []).append(value.name)
        params, body = [], []
        for n in nodes:
            if n.op == "placeholder":
                params.append(self._param(n))
                continue
            line = self._statement(n)
            if n.op != "output" and dies.get(n):
                line += f";  {' = '.join(dies[n])} = None"
            body.append(f"    {line}")
        src = f"\n\ndef forward({', '.join([self.root, *params])}):\n" + "\n".join(
            body or ["    return None"]) + "\n"  # fmt: skip
        return PythonCode(src, self.globals)

    def _param(self, n: Node) -> str:
        if n.target.startswith("*"):
            return n.target
        return n.name if not n.args else f"{n.name} = {self._arg(n.args[0])}"

    def _statement(self, n: Node) -> str:
        args, kwargs = n.args, n.kwargs
        if n.op == "output":
            return f"return {self._arg(args[0])}"
        if n.op == "get_attr":
            return f"{n.name} = {self._path(n.target)}"
        if n.op == "call_module":
            return f"{n.name} = {self._path(n.target)}({self._call_args(args, kwargs)})"
        if n.op == "call_method":
            return (f"{n.name} = {self._arg(args[0])}.{n.target}("
                    f"{self._call_args(args[1:], kwargs)})")  # fmt: skip
        fn = n.target
        if fn in BINARY and len(args) == 2 and not kwargs:
            return f"{n.name} = {self._arg(args[0])} {BINARY[fn]} {self._arg(args[1])}"
        if fn in UNARY and len(args) == 1 and not kwargs:
            return f"{n.name} = {UNARY[fn]}{self._arg(args[0])}"
        if fn is operator.getitem and len(args) == 2:
            return f"{n.name} = {self._arg(args[0])}[{self._arg(args[1])}]"
        if fn is builtins.getattr and len(args) == 2 and str(args[1]).isidentifier():
            return f"{n.name} = {self._arg(args[0])}.{args[1]}"
        return f"{n.name} = {self._function(fn)}({self._call_args(args, kwargs)})"

    def _path(self, target: str) -> str:
        out = self.root
        for part in target.split("."):
            out = f"{out}.{part}" if part.isidentifier() else f'getattr({out}, "{part}")'
        return out

    def _call_args(self, args: tuple, kwargs: dict) -> str:
        return ", ".join([self._arg(a) for a in args] +
                         [f"{k} = {self._arg(v)}" for k, v in kwargs.items()])  # fmt: skip

    def _function(self, fn: Any) -> str:
        public = _public_names().get(id(unwrapped(fn)))
        if public is not None:
            return public
        name = function_name(fn)
        if getattr(builtins, name, None) is fn:
            return name
        if getattr(operator, name, None) is fn:
            return f"operator.{name}"
        return self._global(fn, name)

    def _global(self, value: Any, hint: str) -> str:
        for key, known in self.globals.items():
            if known is value:
                return key
        base = re.sub(r"\W", "_", hint)
        base = f"_{base}" if base[:1].isdigit() else base
        key, k = base, 0
        while key in self.globals or key in RESERVED or key in self.graph._taken:
            k += 1
            key = f"{base}_{k}"
        self.globals[key] = value
        return key

    def _arg(self, a: Any) -> str:
        if isinstance(a, Node):
            return a.name
        if isinstance(a, tuple):
            return "(" + ", ".join(map(self._arg, a)) + ("," if len(a) == 1 else "") + ")"
        if isinstance(a, list):
            return "[" + ", ".join(map(self._arg, a)) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self._arg(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self._arg(a.start)}, {self._arg(a.stop)}, {self._arg(a.step)})"
        if isinstance(a, float) and not math.isfinite(a):
            return "inf" if a > 0 else ("-inf" if a < 0 else "nan")
        if a is None or isinstance(a, bool | int | float | str | complex) or a is Ellipsis:
            return repr(a)
        if isinstance(a, self.torch.dtype):
            return f"torch.{str(a).removeprefix('torch.')}"
        return self._global(a, type(a).__name__.lower())

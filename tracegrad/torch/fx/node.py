"""`torch.fx.node`: a node of an FX graph, one Python call (or an input, an attribute read, the
output), and the helpers that map over a node's arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Target = str | Callable[..., Any]  # a node's target (annotations name these)
Argument = Any

OPS = ("placeholder", "get_attr", "call_function", "call_method", "call_module", "output")


def map_aggregate(a: Any, fn: Callable[[Any], Any]) -> Any:
    """`fn` applied to every leaf of nested tuples, lists, dicts and slices."""
    if isinstance(a, tuple):
        mapped = tuple(map_aggregate(x, fn) for x in a)
        return type(a)(*mapped) if hasattr(a, "_fields") else mapped  # a named tuple
    if isinstance(a, list):
        return [map_aggregate(x, fn) for x in a]
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn),
                     map_aggregate(a.step, fn))  # fmt: skip
    return fn(a)


def map_arg(a: Any, fn: Callable[[Node], Any]) -> Any:
    """`fn` applied to every Node inside `a` (nested tuples, lists, dicts, slices)."""
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


class Node:
    """One operation: `op` (placeholder, get_attr, call_function, call_method, call_module,
    output), its `target` (a function, a method's or attribute's name, a module's path), `args`
    and `kwargs` (other nodes among them), the nodes that use it (`users`) and `meta`."""

    def __init__(self, graph: Any, name: str, op: str, target: Any, args: tuple, kwargs: dict,
                 return_type: Any = None) -> None:  # fmt: skip
        if op not in OPS:
            raise ValueError(f"Node: op {op!r} is not one of {OPS}")
        self.graph, self.name, self.op, self.target = graph, name, op, target
        self.type, self.meta = return_type, {}
        self.users: dict[Node, None] = {}
        self._inputs: dict[Node, None] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._update(tuple(args), dict(kwargs))

    def _update(self, args: tuple, kwargs: dict) -> None:
        for n in self._inputs:
            n.users.pop(self, None)
        self._args, self._kwargs, self._inputs = args, kwargs, {}
        map_arg((args, kwargs), lambda n: self._inputs.setdefault(n))
        for n in self._inputs:
            n.users.setdefault(self)

    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, value: tuple) -> None:
        self._update(tuple(value), self._kwargs)

    @property
    def kwargs(self) -> dict:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value: dict) -> None:
        self._update(self._args, dict(value))

    @property
    def all_input_nodes(self) -> list[Node]:
        return list(self._inputs)

    @property
    def next(self) -> Node | None:
        return self.graph.node_after(self)

    @property
    def prev(self) -> Node | None:
        return self.graph.node_before(self)

    def update_arg(self, idx: int, arg: Any) -> None:
        args = list(self._args)
        args[idx] = arg
        self.args = tuple(args)

    def update_kwarg(self, key: str, arg: Any) -> None:
        self.kwargs = {**self._kwargs, key: arg}

    def replace_input_with(self, old: Node, new: Any) -> None:
        swap = lambda n: new if n is old else n  # noqa: E731
        self._update(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    def replace_all_uses_with(self, replace_with: Any,
                              delete_user_cb: Callable[[Node], bool] = lambda user: True, *,
                              propagate_meta: bool = False) -> list[Node]:  # fmt: skip
        """Every user of this node uses `replace_with` instead (those `delete_user_cb` keeps)."""
        if propagate_meta and isinstance(replace_with, Node):
            replace_with.meta.update(self.meta)
        changed = [u for u in list(self.users) if delete_user_cb(u)]
        for user in changed:
            user.replace_input_with(self, replace_with)
        return changed

    def prepend(self, x: Node) -> None:
        """Move `x` to just before this node."""
        self.graph.move_before(x, self)

    def append(self, x: Node) -> None:
        """Move `x` to just after this node."""
        self.graph.move_after(x, self)

    def format_node(self) -> str:
        users = f"[num_users={len(self.users)}]"
        if self.op == "placeholder":
            return f"%{self.name} : {users} = placeholder[target={self.target}]"
        if self.op == "output":
            return f"return {_show(self.args[0])}"
        target = self.target if isinstance(self.target, str) else _name_of(self.target)
        return (f"%{self.name} : {users} = {self.op}[target={target}](args = "
                f"{_show(self.args)}, kwargs = {_show(self.kwargs)})")  # fmt: skip

    def __repr__(self) -> str:
        return self.name

    def __lt__(self, other: Node) -> bool:  # (sorting nodes: by place in the graph)
        return self.graph.index(self) < self.graph.index(other)


def _name_of(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _show(a: Any) -> str:
    if isinstance(a, Node):
        return f"%{a.name}"
    if isinstance(a, tuple):
        return "(" + ", ".join(map(_show, a)) + ("," if len(a) == 1 else "") + ")"
    if isinstance(a, list):
        return "[" + ", ".join(map(_show, a)) + "]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in a.items()) + "}"
    return repr(a)

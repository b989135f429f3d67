"""Where in the user's model a traced node was made: the path of the module being called, as
`named_modules()` names it (`blocks.2.attn`), so that pictures, reports and profiles can group
the graph the way the model was written (TensorBoard's name scopes, torch.fx's module stack).

While a step is traced, `Module.__call__` enters `module_scope(module)`; the tracer stamps each
node with the current `Scope`, the tape keeps it on each recorded op so that the op's backward
nodes get it too, and `module_names` turns the stamps into paths when the trace ends. A step that
calls several root modules (a GAN's generator and discriminator) names each by the variable or
attribute that holds it where the step calls it (`G`, `self.disc`), or else by its class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tracegrad.core import ir
from tracegrad.core.errors import user_frame
from tracegrad.core.vocabulary import Phase
from tracegrad.frontend.tensor import Listeners


@dataclass(frozen=True, eq=False)
class Scope:
    """A module being called: its root (the outermost module called, and how the step names
    it), its path under that root ("" the root itself) and the scope it was called from."""

    module: Any
    root: Any
    root_name: str
    path: str
    outer: Scope | None


@contextlib.contextmanager
def module_scope(module: Any) -> Iterator[None]:
    """Stamp the ops run inside with `module`'s scope (only while tracing: `Module.__call__`
    asks)."""
    outer = Listeners.module
    Listeners.module = enter(outer, module)
    try:
        yield
    finally:
        Listeners.module = outer


def enter(outer: Scope | None, module: Any) -> Scope:
    """The scope of `module` called inside `outer`: a submodule of a module being called gets
    its path under that module's root; any other module is a root of its own."""
    s = outer
    while s is not None:
        rel = next((name for name, m in s.module.named_modules() if m is module), None)
        if rel is not None:
            path = ".".join(p for p in (s.path, rel) if p)
            return Scope(module, s.root, s.root_name, path, outer)
        s = s.outer
    return Scope(module, module, _held_by(module), "", outer)


def _held_by(module: Any) -> str:
    """The name the user's code holds `module` by where it calls it: a local or global
    variable, or an attribute of a local object (`self.generator`); else its class name."""
    frame = user_frame()
    if frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in scope.items():
                if value is module and not name.startswith("__"):
                    return name
        for value in frame.f_locals.values():
            attrs = getattr(value, "__dict__", None)
            for name, a in attrs.items() if isinstance(attrs, dict) else ():
                if a is module:
                    return name
    return type(module).__name__


def module_names(nodes: Sequence[ir.Node]) -> None:
    """Replace each node's `Scope` stamp by its path. With one root module the paths are
    `named_modules()`'s; with several, each is prefixed by its root's name (`G.0`, `D.3`).
    An update node, made outside every module, gets the module of the parameter it updates:
    that of what it reads (the gradient), else that of the update nodes that read it."""
    roots: dict[int, str] = {}  # id(root module) -> name
    for n in nodes:
        s = n.module
        if s is not None and id(s.root) not in roots:
            name, k = s.root_name, 1
            while name in roots.values():  # two roots by one name (a loop variable, a class)
                k += 1
                name = f"{s.root_name}_{k}"
            roots[id(s.root)] = name
    several = len(roots) > 1
    for n in nodes:
        s = n.module
        if s is not None:
            n.module = ".".join(p for p in (roots[id(s.root)], s.path) if p) if several else s.path
    _update_modules(nodes)


def _update_modules(nodes: Sequence[ir.Node]) -> None:
    """Give update nodes outside every module the module of their parameter (see
    `module_names`): a graph input takes the module of its first forward reader."""
    produced = {v for n in nodes for v in n.outputs}
    of: dict[ir.Value, str] = {}
    for n in nodes:
        if n.module is not None:
            of.update((v, n.module) for v in n.outputs)
            if n.phase is Phase.FORWARD:
                for v in n.inputs:
                    if v not in produced:
                        of.setdefault(v, n.module)
    updates = [n for n in nodes if n.phase is Phase.UPDATE and n.module is None]
    for n in updates:  # from what they read: the gradient, the parameter
        n.module = next((of[v] for v in n.inputs if v in of), None)
        if n.module is not None:
            of.update((v, n.module) for v in n.outputs)
    readers: dict[ir.Value, list[ir.Node]] = {}
    for n in nodes:
        for v in n.inputs:
            readers.setdefault(v, []).append(n)
    for n in reversed(updates):  # from the update nodes that read them (a momentum buffer's)
        if n.module is None:
            found = {u.module for v in n.outputs for u in readers.get(v, ())}
            if len(found) == 1:
                n.module = found.pop()

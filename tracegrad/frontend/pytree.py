"""Nested tuples, lists and dicts: flatten to leaves and a hashable structure, and back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Treedef = Any


def flatten(obj: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], Treedef]:
    """Leaves in order and a hashable description of the containers around them."""
    leaves: list[Any] = []
    return leaves, _walk(obj, is_leaf, leaves)


def _walk(x: Any, is_leaf: Callable[[Any], bool], leaves: list[Any]) -> Treedef:
    """Not a closure calling itself (a reference cycle keeping the leaves until the garbage
    collector runs): `_build`'s reason."""
    if is_leaf(x):
        leaves.append(x)
        return "*"
    if isinstance(x, tuple | list):
        return (type(x).__name__, tuple(_walk(v, is_leaf, leaves) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _walk(v, is_leaf, leaves)) for k, v in x.items()))
    return ("static", x)


def unflatten(treedef: Treedef, leaves: list[Any]) -> Any:
    return _build(treedef, iter(leaves))


def _build(d: Treedef, it: Iterator[Any]) -> Any:
    """A function of the module's, not a closure calling itself: that would be a reference
    cycle holding the leaves (a plan's results, a compiled module's residuals) until the
    garbage collector runs."""
    if d == "*":
        return next(it)
    kind, body = d
    if kind == "static":
        return body
    if kind == "dict":
        return {k: _build(v, it) for k, v in body}
    items = [_build(v, it) for v in body]
    return tuple(items) if kind == "tuple" else items

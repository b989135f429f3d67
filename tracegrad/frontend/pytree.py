"""Nested tuples, lists and dicts: flatten to leaves and a hashable structure, and back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Treedef = Any


def flatten(obj: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], Treedef]:
    """Leaves in order and a hashable description of the containers around them."""
    leaves: list[Any] = []

    def walk(x: Any) -> Treedef:
        if is_leaf(x):
            leaves.append(x)
            return "*"
        if isinstance(x, tuple | list):
            return (type(x).__name__, tuple(walk(v) for v in x))
        if isinstance(x, dict):
            return ("dict", tuple((k, walk(v)) for k, v in x.items()))
        return ("static", x)

    return leaves, walk(obj)


def unflatten(treedef: Treedef, leaves: list[Any]) -> Any:
    it = iter(leaves)

    def build(d: Treedef) -> Any:
        if d == "*":
            return next(it)
        kind, body = d
        if kind == "static":
            return body
        if kind == "dict":
            return {k: build(v) for k, v in body}
        items = [build(v) for v in body]
        return tuple(items) if kind == "tuple" else items

    return build(treedef)

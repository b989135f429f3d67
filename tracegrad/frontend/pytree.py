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
    if isinstance(x, tuple | list):  # the class too: a namedtuple's fields, a return type's
        return (type(x), tuple(_walk(v, is_leaf, leaves) for v in x))
    if isinstance(x, dict):  # an OrderedDict, an attribute dict (`batch.premise`)
        return (type(x), tuple((k, _walk(v, is_leaf, leaves)) for k, v in x.items()))
    if type(x).__hash__ is None and hasattr(x, "__dict__"):
        return ("static", ByAttributes(x))
    return ("static", x)


class ByAttributes:
    """An object that cannot be hashed (argparse's `Namespace`, a dataclass) where a structure
    must be: equal to another of its class with the same attributes, as they are now (a plan
    may have baked them in). Tensors and arrays among them count by identity (their values
    are read at each call); the object itself is what `unflatten` gives back."""

    __slots__ = ("obj", "key")

    def __init__(self, obj: Any):
        self.obj = obj
        self.key = (type(obj), tuple((k, _attribute_key(v)) for k, v in vars(obj).items()))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByAttributes) and self.key == other.key


def _attribute_key(v: Any) -> Any:
    if hasattr(v, "__array__") or hasattr(v, "_value"):  # a tensor's == is elementwise
        return ("identity", id(v))
    if isinstance(v, list | tuple):
        return (type(v), tuple(map(_attribute_key, v)))
    if isinstance(v, dict):
        return (type(v), tuple((k, _attribute_key(x)) for k, x in v.items()))
    if type(v).__hash__ is None and hasattr(v, "__dict__"):
        return ByAttributes(v)
    return v


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
        return body.obj if type(body) is ByAttributes else body
    if issubclass(kind, dict):
        items = {k: _build(v, it) for k, v in body}
        return items if kind is dict else _remake(kind, items)
    items = [_build(v, it) for v in body]
    if kind is tuple or kind is list:
        return kind(items)
    return kind(*items) if hasattr(kind, "_fields") else _remake(kind, items)


def _remake(kind: type, items: Any) -> Any:
    """A container of a subclass of tuple, list or dict, as it was; its base class where the
    subclass cannot be built from its items."""
    try:
        return kind(items)
    except Exception:  # noqa: BLE001 - a constructor of other arguments
        return (tuple if issubclass(kind, tuple) else list if issubclass(kind, list)
                else dict)(items)  # fmt: skip

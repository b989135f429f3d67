"""`torch.utils._pytree`: PyTorch's nested containers (tuples, lists, dicts, namedtuples,
`OrderedDict`, `defaultdict`, `deque`, and types registered with `register_pytree_node`)
flattened to leaves and a `TreeSpec`, and back. Private in PyTorch, but libraries import it
(x-transformers' `tree_map`). Everything else is a leaf, `None` included, as in PyTorch."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tracegrad.torch._support import not_provided as _not_provided

Flatten = Callable[[Any], tuple[list[Any], Any]]
Unflatten = Callable[[Iterable[Any], Any], Any]


def _namedtuple_unflatten(values: Iterable[Any], cls: type) -> Any:
    return cls(*values)


def _dict_flatten(d: dict) -> tuple[list[Any], Any]:
    return list(d.values()), list(d)


def _dict_flatten_with_keys(d: dict) -> tuple[list[tuple[Any, Any]], Any]:
    """`_dict_flatten` with each value beside its key (what `flatten_with_keys_fn` returns)."""
    return list(d.items()), list(d)


def _defaultdict_flatten(d: defaultdict) -> tuple[list[Any], Any]:
    return list(d.values()), (d.default_factory, list(d))


def _defaultdict_unflatten(values: Iterable[Any], context: Any) -> Any:
    factory, keys = context
    return defaultdict(factory, zip(keys, values, strict=True))


NODES: dict[type, tuple[Flatten, Unflatten]] = {
    tuple: (lambda t: (list(t), None), lambda v, _: tuple(v)),
    list: (lambda t: (list(t), None), lambda v, _: list(v)),
    dict: (_dict_flatten, lambda v, k: dict(zip(k, v, strict=True))),
    OrderedDict: (_dict_flatten, lambda v, k: OrderedDict(zip(k, v, strict=True))),
    defaultdict: (_defaultdict_flatten, _defaultdict_unflatten),
    deque: (lambda d: (list(d), d.maxlen), lambda v, maxlen: deque(v, maxlen=maxlen)),
}


PyTree = Any


class NodeDef(NamedTuple):
    """A container type's entry in PyTorch's registry (`SUPPORTED_NODES[type]`)."""

    type: Any
    flatten_fn: Flatten
    unflatten_fn: Unflatten


_NAMEDTUPLE = NodeDef(namedtuple, lambda t: (list(t), type(t)), _namedtuple_unflatten)


class _SupportedNodes(Mapping):
    """PyTorch's registry of container types, read from `NODES` as it is now; namedtuples are
    one entry under `namedtuple`, as in PyTorch (`_get_node_type`)."""

    def __getitem__(self, kind: Any) -> NodeDef:
        return _NAMEDTUPLE if kind is namedtuple else NodeDef(kind, *NODES[kind])

    def __iter__(self) -> Iterator[Any]:
        return iter([*NODES, namedtuple])

    def __len__(self) -> int:
        return len(NODES) + 1


SUPPORTED_NODES = _SupportedNodes()


def _get_node_type(tree: Any) -> Any:
    """The registry's key for `tree`: its type, or `namedtuple` for a namedtuple's."""
    kind = type(tree)
    named = kind not in NODES and issubclass(kind, tuple) and hasattr(kind, "_fields")
    return namedtuple if named else kind


def register_pytree_node(cls: type, flatten_fn: Flatten, unflatten_fn: Unflatten, **_: Any) -> None:
    """Makes `cls` a container: `flatten_fn(x)` gives `(children, context)` and
    `unflatten_fn(children, context)` builds it back (PyTorch's serialization keywords are
    accepted and unused)."""
    if cls in NODES:
        raise ValueError(f"{cls} is already registered as a pytree node")
    NODES[cls] = (flatten_fn, unflatten_fn)


def _node(x: Any) -> tuple[Flatten, Unflatten] | None:
    kind = type(x)
    if kind in NODES:
        return NODES[kind]
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):  # a namedtuple (PyTorch's too)
        return (lambda t: (list(t), type(t)), _namedtuple_unflatten)
    return None


@dataclass
class TreeSpec:
    """The containers around the leaves: `type` None is a leaf."""

    type: Any
    context: Any = None
    children_specs: list[TreeSpec] = field(default_factory=list)

    @property
    def num_leaves(self) -> int:
        return 1 if self.is_leaf() else sum(c.num_leaves for c in self.children_specs)

    @property
    def num_children(self) -> int:
        return len(self.children_specs)

    def is_leaf(self) -> bool:
        return self.type is None

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        return tree_unflatten(leaves, self)

    def __repr__(self) -> str:
        if self.is_leaf():
            return "*"
        name = getattr(self.type, "__name__", repr(self.type))
        return f"TreeSpec({name}, {self.context!r}, {self.children_specs!r})"


def LeafSpec() -> TreeSpec:  # noqa: N802 (PyTorch's name)
    return TreeSpec(None)


def tree_is_leaf(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    return (is_leaf is not None and is_leaf(tree)) or _node(tree) is None


def tree_flatten(
    tree: Any, is_leaf: Callable[[Any], bool] | None = None
) -> tuple[list[Any], TreeSpec]:
    """The leaves in order (a dict's in insertion order) and the spec that rebuilds the tree."""
    leaves: list[Any] = []
    return leaves, _flatten(tree, is_leaf, leaves)


def _flatten(x: Any, is_leaf: Callable[[Any], bool] | None, leaves: list[Any]) -> TreeSpec:
    if tree_is_leaf(x, is_leaf):
        leaves.append(x)
        return TreeSpec(None)
    flatten, _ = _node(x)  # type: ignore[misc]
    children, context = flatten(x)
    return TreeSpec(type(x), context, [_flatten(c, is_leaf, leaves) for c in children])


def tree_unflatten(leaves: Iterable[Any], treespec: TreeSpec) -> Any:
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError(
            f"tree_unflatten: {len(leaves)} leaves for a TreeSpec of {treespec.num_leaves}"
        )
    return _build(treespec, iter(leaves))


def _build(spec: TreeSpec, it: Iterator[Any]) -> Any:
    if spec.is_leaf():
        return next(it)
    children = [_build(c, it) for c in spec.children_specs]
    if spec.type in NODES:
        return NODES[spec.type][1](children, spec.context)
    return _namedtuple_unflatten(children, spec.context)


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    return tree_flatten(tree, is_leaf)[0]


def tree_iter(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> Iterator[Any]:
    return iter(tree_leaves(tree, is_leaf))


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeSpec:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(
    func: Callable[..., Any], tree: Any, *rests: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """`func` of each leaf (and the leaves at the same places of `rests`, which have the tree's
    structure), in a tree of the same structure."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [_leaves_as(spec, r) for r in rests]
    return tree_unflatten([func(*xs) for xs in zip(leaves, *others, strict=True)], spec)


def _leaves_as(spec: TreeSpec, tree: Any) -> list[Any]:
    """`tree`'s values at the places of `spec`'s leaves (a leaf of `spec` may stand over a
    subtree of `tree`, which comes whole, as in PyTorch)."""
    if spec.is_leaf():
        return [tree]
    if type(tree) is not spec.type:
        raise ValueError(f"tree_map: a {type(tree).__name__} where the tree has a {spec.type}")
    children, context = _node(tree)[0](tree)  # type: ignore[index]
    if len(children) != spec.num_children or (isinstance(tree, dict) and context != spec.context):
        raise ValueError(f"tree_map: the trees' {type(tree).__name__}s differ in their items")
    return [x for c, s in zip(children, spec.children_specs, strict=True) for x in _leaves_as(s, c)]


def tree_map_(
    func: Callable[..., Any], tree: Any, *rests: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """`func` of each leaf for its effect (in-place updates); the tree itself back."""
    tree_map(func, tree, *rests, is_leaf=is_leaf)
    return tree


def _only(types: type | tuple[type, ...], func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda x: func(x) if isinstance(x, types) else x


def tree_map_only(
    types: type | tuple[type, ...],
    func: Callable[[Any], Any],
    tree: Any,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """`func` of the leaves that are instances of `types`; the other leaves as they are."""
    return tree_map(_only(types, func), tree, is_leaf=is_leaf)


def tree_map_only_(
    types: type | tuple[type, ...],
    func: Callable[[Any], Any],
    tree: Any,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    return tree_map_(_only(types, func), tree, is_leaf=is_leaf)


def tree_all(pred: Callable[[Any], bool], tree: Any, is_leaf: Any = None) -> bool:
    return all(map(pred, tree_leaves(tree, is_leaf)))


def tree_any(pred: Callable[[Any], bool], tree: Any, is_leaf: Any = None) -> bool:
    return any(map(pred, tree_leaves(tree, is_leaf)))


def tree_all_only(types: Any, pred: Callable[[Any], bool], tree: Any, is_leaf: Any = None) -> bool:
    return all(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, types))


def tree_any_only(types: Any, pred: Callable[[Any], bool], tree: Any, is_leaf: Any = None) -> bool:
    return any(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, types))


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils._pytree`, which libraries import (x-transformers' `tree_map`): PyTorch's
containers flattened in order and built back, everything else (None too) a leaf."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque, namedtuple

import pytest

import tracegrad.torch as torch
from tracegrad.torch.utils import _pytree as pytree

Pair = namedtuple("Pair", "a b")


def test_flatten_and_unflatten_round_trip():
    tree = {"b": [1, (2, None)], "a": Pair(3, OrderedDict(x=4)), "c": deque([5], maxlen=3)}
    tree["d"] = defaultdict(list, y=6)
    leaves, spec = pytree.tree_flatten(tree)
    assert leaves == [1, 2, None, 3, 4, 5, 6]  # insertion order, None a leaf
    assert spec.num_leaves == 7
    back = pytree.tree_unflatten([x * 10 if x else x for x in leaves], spec)
    assert back == {"b": [10, (20, None)], "a": Pair(30, OrderedDict(x=40)),
                    "c": deque([50]), "d": {"y": 60}}  # fmt: skip
    assert type(back["a"]) is Pair and back["c"].maxlen == 3
    assert back["d"].default_factory is list
    with pytest.raises(ValueError, match="2 leaves for a TreeSpec of 7"):
        pytree.tree_unflatten([1, 2], spec)


def test_a_dict_subclass_is_a_leaf_unless_registered():
    class Bag(dict):
        pass

    assert pytree.tree_leaves([Bag(a=1)]) == [Bag(a=1)]

    class Box:
        def __init__(self, x):
            self.x = x

    pytree.register_pytree_node(Box, lambda b: ([b.x], None), lambda xs, _: Box(*xs))
    out = pytree.tree_map(lambda v: v + 1, [Box(1)])
    assert isinstance(out[0], Box) and out[0].x == 2


def test_tree_map_and_its_variants():
    t = torch.ones(2)
    tree = {"t": t, "n": 3, "s": [torch.zeros(1), "x"]}
    doubled = pytree.tree_map_only(torch.Tensor, lambda x: x * 2, tree)
    assert doubled["n"] == 3 and doubled["s"][1] == "x"
    assert doubled["t"].tolist() == [2.0, 2.0]
    assert pytree.tree_map(lambda a, b: a + b, [1, (2,)], [10, (20,)]) == [11, (22,)]
    with pytest.raises(ValueError, match="tree_map"):
        pytree.tree_map(lambda a, b: a, [1, 2], [1])
    assert pytree.tree_any(lambda x: x == "x", tree)
    assert pytree.tree_all_only(int, lambda x: x > 2, tree)
    seen = []
    assert pytree.tree_map_(seen.append, tree) is tree and len(seen) == 4
    assert pytree.tree_structure(tree).num_leaves == 4

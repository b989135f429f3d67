"""Pytrees (frontend/pytree.py): the containers around a traced function's arguments and
results come back as the classes they were (fast_neural_style's Vgg16 returns a namedtuple and
reads `features.relu2_2`; torchtext-style batches are attribute dicts)."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

import tracegrad as tg
import tracegrad.torch as torch
from tracegrad.frontend import pytree

Features = namedtuple("Features", ["low", "high"])


class AttrDict(dict):
    def __getattr__(self, name):
        return self[name]


class Pair(tuple):
    """A tuple subclass built from an iterable, as tuple is."""


def test_containers_keep_their_classes():
    tree = [Features(1, {"a": 2}), OrderedDict(b=3), AttrDict(c=(4, Pair([5]))), (6,)]
    leaves, treedef = pytree.flatten(tree, lambda x: isinstance(x, int))
    assert leaves == [1, 2, 3, 4, 5, 6]
    back = pytree.unflatten(treedef, [10 * v for v in leaves])
    assert back == [Features(10, {"a": 20}), OrderedDict(b=30), {"c": (40, (50,))}, (60,)]
    assert type(back[0]) is Features and back[0].high == {"a": 20}
    assert type(back[1]) is OrderedDict and type(back[2]) is AttrDict and back[2].c[0] == 40
    assert type(back[2]["c"][1]) is Pair


def test_traced_and_compiled_calls_return_the_callers_classes():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, batch):
            low = torch.relu(self.lin(batch.x))
            return Features(low, OrderedDict(top=torch.max(low, dim=1)))

    net = Net()
    batch = AttrDict(x=torch.tensor(np.random.default_rng(0).standard_normal((2, 3))).float())
    want = net(batch)
    for run in (torch.compile(net), tg.trace(lambda b: net(b))):
        got = run(batch)
        assert type(got) is Features and type(got.high) is OrderedDict
        np.testing.assert_allclose(got.low.detach().numpy(), want.low.detach().numpy())
        np.testing.assert_array_equal(got.high["top"].indices.numpy(),
                                      want.high["top"].indices.numpy())  # fmt: skip

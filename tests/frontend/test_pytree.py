"""Pytrees (frontend/pytree.py): the containers around a traced function's arguments and
results come back as the classes they were (fast_neural_style's Vgg16 returns a namedtuple and
reads `features.relu2_2`; torchtext-style batches are attribute dicts); an argument that cannot
be hashed (argparse's `Namespace`, a dataclass) counts by its attributes."""

from __future__ import annotations

import argparse
import dataclasses
import warnings
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


@dataclasses.dataclass
class Config:
    scale: float
    names: list


def test_an_object_that_cannot_be_hashed_counts_by_its_class_and_attributes():
    def key(obj):
        tree = pytree.flatten(obj, lambda x: False)[1]
        hash(tree)  # raises if it cannot be hashed
        return tree

    t = torch.ones(2)
    a = argparse.Namespace(lr=0.1, sizes=[1, 2], w=t)
    b = argparse.Namespace(lr=0.1, sizes=[1, 2], w=t)
    assert key(a) == key(b) and key(a) != key(argparse.Namespace(lr=0.2, sizes=[1, 2], w=t))
    assert key(a) != key(argparse.Namespace(lr=0.1, sizes=[1, 3], w=t))
    assert key(a) != key(argparse.Namespace(lr=0.1, sizes=[1, 2], w=torch.ones(2)))  # identity
    assert key(Config(1.0, ["x"])) == key(Config(1.0, ["x"])) != key(Config(2.0, ["x"]))
    leaves, tree = pytree.flatten([a], lambda x: False)
    assert pytree.unflatten(tree, leaves)[0] is a  # the object itself, not a copy


def test_a_traced_step_takes_an_argparse_namespace_and_traces_again_when_it_changes():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3))
    w, w_eager = torch.tensor(x[:3], requires_grad=True), torch.tensor(x[:3], requires_grad=True)

    def step(w, x, args):
        loss = (x @ w).square().mean() * args.scale
        loss.backward()
        with torch.no_grad():
            w -= args.lr * w.grad
        w.grad = None
        return loss

    traced = tg.trace(step, backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for lr in (0.1, 0.1, 0.2):
            args = argparse.Namespace(lr=lr, scale=2.0)
            got, want = traced(w, torch.tensor(x), args), step(w_eager, torch.tensor(x), args)
            np.testing.assert_allclose(float(got), float(want), rtol=1e-13)
            np.testing.assert_allclose(w.detach().numpy(), w_eager.detach().numpy(), rtol=1e-13)
    assert len(traced.plans) == 2  # lr 0.1 and lr 0.2

"""The containers' list and dict methods, as PyTorch 2.13's (the expected names and orders are
what it gives): ModuleList renumbers after a delete or an insert, ParameterDict is a dict
(a plain dict given is taken in the order of its sorted keys, as PyTorch takes it)."""

from __future__ import annotations

from collections import OrderedDict

import pytest

import tracegrad as tg
from tracegrad import nn


def _names(modules):
    return [type(m).__name__ for m in modules]


def test_module_list_insert_pop_delete_renumber():
    ml = nn.ModuleList([nn.Linear(1, 1), nn.ReLU(), nn.Tanh()])
    ml.insert(1, nn.Sigmoid())
    assert _names(ml) == ["Linear", "Sigmoid", "ReLU", "Tanh"] and list(ml._modules) == list("0123")
    assert type(ml.pop(0)) is nn.Linear and list(ml._modules) == ["0", "1", "2"]
    del ml[-1]
    assert _names(ml) == ["Sigmoid", "ReLU"]
    del ml[0:1]
    assert _names(ml) == ["ReLU"] and list(ml._modules) == ["0"]
    with pytest.raises(IndexError):
        del ml[3]


def test_a_none_keeps_its_place_as_in_pytorch():
    """x-transformers keeps optional layers as `ModuleList([norm, None, None])`: each None is
    counted and numbered, so the layers after it keep PyTorch's `state_dict` names."""
    ml = nn.ModuleList([None, nn.Linear(2, 2), None])
    assert len(ml) == 3 and ml[0] is None and ml[2] is None
    assert list(ml.state_dict()) == ["1.weight", "1.bias"] and _names(ml.children()) == ["Linear"]
    ml.insert(0, None)
    del ml[1]
    assert list(ml._modules) == ["0", "1", "2"] and ml[0] is None and ml[2] is None
    ml[2] = nn.ReLU()
    ml[2] = None  # a submodule's place assigned None stays a place
    assert len(ml) == 3 and [name for name, _ in ml.named_modules()] == ["", "1"]
    outer = nn.Module()
    outer.add_module("skip", None)
    assert outer.skip is None and "skip" in outer._modules and list(outer.children()) == []


def test_module_list_add_and_iadd():
    ml = nn.ModuleList([nn.Linear(2, 2)])
    both = ml + [nn.ELU()]
    assert type(both) is nn.ModuleList and _names(both) == ["Linear", "ELU"] and both[0] is ml[0]
    same = ml
    ml += [nn.GELU()]
    assert ml is same and list(ml.state_dict()) == ["0.weight", "0.bias"] and len(ml) == 2
    pl = nn.ParameterList([nn.Parameter(tg.zeros(1))])
    pl += [tg.zeros(2)]
    assert list(pl.state_dict()) == ["0", "1"] and isinstance(pl[1], nn.Parameter)


def test_module_dict_pop_delete_clear():
    md = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Linear(2, 2)})
    assert type(md.pop("a")) is nn.ReLU and list(md) == ["b"]
    assert list(md.state_dict()) == ["b.weight", "b.bias"]
    del md["b"]
    assert len(md) == 0 and not hasattr(md, "b")
    md["c"] = nn.ReLU()
    md.clear()
    assert len(md) == 0 and not hasattr(md, "c")
    with pytest.raises(KeyError):
        md.pop("zz")


def test_parameter_dict_is_a_dict():
    w, b = nn.Parameter(tg.zeros(2)), nn.Parameter(tg.zeros(3))
    pd = nn.ParameterDict({"w": w, "b": b})
    assert list(pd) == ["b", "w"]  # a plain dict's keys sorted, as PyTorch's
    assert pd.get("w") is w and pd.get("x", 5) == 5 and list(reversed(pd)) == ["w", "b"]
    assert pd.popitem() == ("w", w) and list(pd) == ["b"]
    z = pd.setdefault("z", tg.zeros(1))
    assert isinstance(z, nn.Parameter) and pd.setdefault("z", tg.zeros(4)) is z
    copy = pd.copy()
    assert type(copy) is nn.ParameterDict and list(copy) == ["b", "z"] and copy["b"] is b
    keys = pd.fromkeys(["p", "q"], nn.Parameter(tg.zeros(1)))
    assert list(keys) == ["p", "q"] and keys["p"] is keys["q"]
    same = pd
    pd |= {"n": tg.zeros(1)}
    assert pd is same and list(pd.state_dict()) == ["b", "z", "n"]
    assert list(pd | OrderedDict(m=tg.zeros(1))) == ["b", "z", "n", "m"]
    merged = {"m": tg.zeros(1)} | pd
    assert type(merged) is dict and list(merged) == ["m", "b", "z", "n"]
    del pd["b"]
    assert list(pd) == ["z", "n"] and pd.pop("z") is z and list(pd.parameters()) == [pd["n"]]
    pd.clear()
    assert len(pd) == 0
    with pytest.raises(KeyError, match="empty"):
        pd.popitem()
    assert list(nn.ParameterDict([("y", tg.zeros(1)), ("x", tg.zeros(1))])) == ["y", "x"]


def test_sequential_add_mul():
    a, b = nn.Sequential(nn.Linear(1, 1)), nn.Sequential(nn.ReLU())
    assert _names(a + b) == ["Linear", "ReLU"] and (a + b)[0] is a[0]
    times = a * 2
    assert times[0] is times[1] and list(times._modules) == ["0", "1"] and (2 * a)[1] is a[0]
    empty = nn.Sequential()
    empty += b
    assert _names(empty) == ["ReLU"]
    a *= 3
    assert len(a) == 3 and a[2] is a[0]
    with pytest.raises(ValueError, match="supports only objects of Sequential class"):
        a + nn.ModuleList()
    with pytest.raises(ValueError, match="Non-positive multiplication factor 0"):
        a * 0
    with pytest.raises(TypeError, match="unsupported operand"):
        a * "x"

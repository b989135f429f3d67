"""Nodes know the module they were made in (frontend/scopes.py): paths as named_modules() names
them, backward ops in the module of the forward op they differentiate, update ops in their
parameter's, several root modules named by the variables that hold them; passes keep it."""

from __future__ import annotations

import numpy as np
import pytest

import passes
import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.core import ir
from tracegrad.core import primitives as P
from tracegrad.core.vocabulary import Phase
from tracegrad.frontend.tensor import Listeners
from tracegrad.frontend.tracer import capture
from tracegrad.nn import functional as F


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def data(n: int = 6):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)


def traced_net():
    nn.manual_seed(0)
    model = Net()
    gm = tg.GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    return model, capture(step, data(), {})


def test_forward_nodes_know_their_module_path():
    model, cap = traced_net()
    names = {name for name, _ in model.named_modules()}
    forward = [n for n in cap.graph.nodes if n.phase is Phase.FORWARD]
    assert {n.module for n in forward} - {None} <= names
    matmuls = [n.module for n in forward if n.op == "matmul"]
    assert matmuls == ["inp", "blocks.0.mlp.0", "blocks.0.mlp.2", "blocks.1.mlp.0",
                       "blocks.1.mlp.2", "head"]  # fmt: skip
    assert [n.module for n in forward if n.op == "layer_norm"] == ["blocks.0.ln", "blocks.1.ln"]
    assert {n.module for n in forward if n.op == "tanh" or n.op == "erf"} <= {
        "blocks.0.mlp.1", "blocks.1.mlp.1"}  # fmt: skip
    residual = [n for n in forward if n.module in ("blocks.0", "blocks.1") and n.op == "add"]
    assert len(residual) == 2  # the block's own `x + ...`
    loss = [n for n in forward if n.module is None]
    assert loss and all(n.source == loss[0].source for n in loss)  # the cross-entropy line


def test_backward_and_update_nodes_take_the_module_of_what_they_serve():
    model, cap = traced_net()
    graph = cap.graph
    backward = [n for n in graph.nodes if n.phase is Phase.BACKWARD and n.op == "matmul"]
    by_module = {}
    for n in backward:
        by_module[n.module] = by_module.get(n.module, 0) + 1
    # a linear layer's input and weight gradients; the first layer's input needs none
    assert by_module == {"inp": 1, "blocks.0.mlp.0": 2, "blocks.0.mlp.2": 2,
                         "blocks.1.mlp.0": 2, "blocks.1.mlp.2": 2, "head": 2}  # fmt: skip
    assert {n.module for n in graph.nodes if n.op == "layer_norm_grad"} == {
        "blocks.0.ln", "blocks.1.ln"}  # fmt: skip
    producers = graph.producers()
    owner = {id(p): name.rsplit(".", 1)[0] for name, p in model.named_parameters()}
    writes = graph.outputs[cap.n_results : cap.n_results + len(cap.value_writes)]
    checked = 0
    for ref, v in zip(cap.value_writes, writes, strict=True):
        if id(ref.tensor) in owner:  # a parameter's new value, made by its update
            n = producers[v]
            assert n.phase is Phase.UPDATE and n.module == owner[id(ref.tensor)]
            checked += 1
    assert checked == len(list(model.parameters()))
    updates = [n for n in graph.nodes if n.phase is Phase.UPDATE]
    assert all(n.module is not None for n in updates if n.outputs[0].shape)


def test_several_roots_are_named_by_the_variables_that_hold_them():
    nn.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))  # noqa: N806
    D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))  # noqa: N806

    def step(z):
        return D(G(z)).mean()

    cap = capture(step, (np.ones((3, 4), np.float32),), {})
    found = {n.module for n in cap.graph.nodes}
    assert {"G.0", "G.1", "G.2", "D.0", "D.1", "D.2"} <= found
    assert found - {None} <= {"G.0", "G.1", "G.2", "D.0", "D.1", "D.2"}


def test_roots_held_by_an_attribute_or_by_nothing():
    class Trainer:
        def __init__(self) -> None:
            self.gen = nn.Linear(4, 4)

    trainer = Trainer()
    pair = [nn.Linear(4, 4), nn.Linear(4, 4)]

    def step(x):
        return trainer.gen(x) + pair[0](x) + pair[1](x)

    cap = capture(step, (np.ones((2, 4), np.float32),), {})
    assert {n.module for n in cap.graph.nodes if n.op == "matmul"} == {
        "gen", "Linear", "Linear_2"}  # fmt: skip


def test_one_root_keeps_named_modules_paths_and_its_own_ops_are_its_root():
    model = Net()
    cap = capture(lambda x: model(x).sum(), (data()[0],), {})
    assert not any(n.module and n.module.startswith("model") for n in cap.graph.nodes)
    assert [n.module for n in cap.graph.nodes][-1] is None  # .sum() outside the model


def test_eager_calls_enter_no_scope():
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(Listeners.module)
            return x * 2

    Probe()(tg.ones(3))
    assert seen == [None]
    capture(lambda x: Probe()(x), (np.ones(3, np.float32),), {})
    assert seen[1].path == "" and seen[1].root_name == "Probe"
    assert Listeners.module is None


def test_printed_graph_and_compiled_plan_keep_the_module():
    model = Net()
    step = tg.trace(lambda x: model(x).sum(), backend="numpy")
    step(data()[0])
    text = str(step.graph)
    assert "# blocks.1.mlp.2: test_scopes.py:" in text and "# head: test_scopes.py:" in text


def _exp_node(x: ir.Value, module: str) -> ir.Node:
    return ir.Node(P.exp, [x], [ir.Value(x.shape, x.dtype)], {}, "f.py:1", Phase.FORWARD, module)


def test_a_merged_node_belongs_to_both_modules_a_kernel_to_most_of_its_ops():
    x = ir.Value((4,), np.float32)
    a, b = _exp_node(x, "blocks.0.attn"), _exp_node(x, "blocks.0.mlp")
    graph = ir.Graph([x], [a, b], [a.outputs[0], b.outputs[0]])
    merged, _ = passes.cse(graph)
    assert [n.module for n in merged.nodes] == ["blocks.0"]
    c = ir.Node(P.tanh, a.outputs, [ir.Value((4,), np.float32)], {}, "f.py:2", Phase.FORWARD,
                "blocks.1")  # fmt: skip
    d = ir.Node(P.tanh, c.outputs, [ir.Value((4,), np.float32)], {}, "f.py:2", Phase.FORWARD,
                "blocks.1")  # fmt: skip
    fused, _ = passes.fuse(ir.Graph([x], [a, c, d], d.outputs))
    assert [n.op for n in fused.nodes] == ["fused"] and fused.nodes[0].module == "blocks.1"
    assert ir.common_module(["a.b", None]) is None and ir.common_module(["a.b.c", "a.b"]) == "a.b"


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_module_paths_survive_the_pipeline(backend):
    model = Net()
    step = tg.trace(lambda x: model(x).sum(), backend=backend)
    step(data()[0])
    names = {name for name, _ in model.named_modules()}
    members = [m for n in step.graph.nodes
               for m in (n.attrs["body"].nodes if n.op == "fused" else [n])]  # fmt: skip
    assert {m.module for m in members} - {None} <= names
    assert sum(m.op == "matmul" and m.module == "head" for m in members) >= 1

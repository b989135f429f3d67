"""torch.fx on tracegrad: symbolic tracing into graphs of Python calls, editing them, the
GraphModule's generated code, custom tracers, interpreters and transformers (the idioms of
pytorch/examples' fx scripts), each checked by running the result against the original."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest

import tracegrad.torch as torch
import tracegrad.torch.nn.functional as F
from tracegrad.torch import fx


def _scaled(x, k):  # a module-level function kept whole by `wrap`
    return x * k + 1.0


fx.wrap("_scaled")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 6)
        self.block = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(6, 6))
        self.scale = torch.nn.Parameter(torch.ones(6) * 0.5)
        self.register_buffer("shift", torch.arange(6.0) / 10)

    def forward(self, x, bias=0.0):
        h = self.block(self.lin(x))
        a, b = h.chunk(2, dim=-1)
        h = torch.cat([b, a], dim=-1) * self.scale + self.shift
        h = F.gelu(h) / math.sqrt(h.size(-1))
        return _scaled(h.sum(dim=-1, keepdim=True), 2.0) + bias, h[:, :2]


def test_symbolic_trace_records_the_forward_and_runs_as_it_does():
    model, x = Net(), torch.randn(3, 4)
    gm = fx.symbolic_trace(model)
    ops = [(n.op, n.target if isinstance(n.target, str) else n.target.__name__)
           for n in gm.graph.nodes]  # fmt: skip
    assert ("call_module", "lin") in ops and ("call_module", "block.0") in ops  # leaves
    assert ("get_attr", "scale") in ops and ("get_attr", "shift") in ops
    assert ("call_method", "chunk") in ops and ("call_function", "_scaled") in ops
    assert ("call_function", "sqrt") in ops  # math on a traced size
    for got, want in zip(gm(x), model(x), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert "def forward(self, x, bias = 0.0):" in gm.code
    assert "lin = self.lin(x);  x = None" in gm.code
    assert 'getattr(self.block, "0")' in gm.code
    assert str(gm.graph).startswith("graph(x, bias):")
    gm.graph.lint()


def test_a_traced_module_trains_and_compiles_as_the_original():
    model, x = Net(), torch.randn(3, 4)
    gm = fx.symbolic_trace(model)
    for m in (model, gm):
        out, _ = m(x)
        out.sum().backward()
    assert gm.lin.weight is model.lin.weight  # the root's own parameters
    compiled = torch.compile(gm)
    np.testing.assert_allclose(compiled(x)[0].numpy(), model(x)[0].numpy(), rtol=1e-6)


def test_editing_a_graph_replaces_ops_and_recompiles():
    """pytorch/examples' replace_op.py: every addition becomes a bitwise and."""

    class M(torch.nn.Module):
        def forward(self, x, y):
            return x + y, torch.add(x, y), x.add(y)

    traced = fx.symbolic_trace(M())
    patterns = {operator.add, torch.add, "add"}
    for n in traced.graph.nodes:
        if any(n.target == p for p in patterns):
            with traced.graph.inserting_after(n):
                new = traced.graph.call_function(torch.bitwise_and, n.args, n.kwargs)
                n.replace_all_uses_with(new)
            traced.graph.erase_node(n)
    traced.recompile()
    x, y = torch.tensor([6, 3]), torch.tensor([3, 5])
    assert [t.tolist() for t in traced(x, y)] == [[2, 1]] * 3
    assert traced.code.count("torch.bitwise_and") == 3
    with pytest.raises(RuntimeError, match="still had 3 users"):
        traced.graph.erase_node(next(n for n in traced.graph.nodes if n.op == "placeholder"))


def test_a_graph_built_by_hand_runs_as_a_graph_module():
    """invert.py: the inverse of exp(tan(x)), a graph built node by node."""
    graph = fx.Graph()
    out = graph.placeholder("output")
    log = graph.call_function(torch.log, (out,))
    graph.output(graph.call_function(torch.arctan, (log,)))
    graph.lint()
    inverse = fx.GraphModule(torch.nn.Module(), graph)
    y = torch.arange(1.0, 5.0)
    np.testing.assert_allclose(torch.exp(torch.tan(inverse(y))).numpy(), y.numpy(), rtol=1e-5)
    assert "log = torch.log(output);  output = None" in inverse.code


def test_custom_tracers_choose_leaves_and_see_every_node():
    class Tagging(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return not isinstance(m, torch.nn.ReLU) and super().is_leaf_module(m, qualname)

        def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
            n = super().create_node(kind, target, args, kwargs, name)
            n.tag = "foo"
            return n

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = torch.nn.ReLU()

        def forward(self, x):
            return self.relu(x)

    graph = Tagging().trace(M())
    assert [n.op for n in graph.nodes] == ["placeholder", "call_function", "output"]
    assert all(n.tag == "foo" for n in graph.nodes)


def test_interpreters_run_and_transformers_rewrite():
    model, x = Net(), torch.randn(3, 4)
    gm = fx.symbolic_trace(model)

    class Counting(fx.Interpreter):
        def run_node(self, n):
            self.seen = getattr(self, "seen", 0) + 1
            return super().run_node(n)

    counting = Counting(gm)
    np.testing.assert_allclose(counting.run(x)[0].numpy(), model(x)[0].numpy(), rtol=1e-6)
    assert counting.seen == len(gm.graph.nodes)

    class MulForAdd(fx.Transformer):
        def call_function(self, target, args, kwargs):
            return super().call_function(operator.mul if target is operator.add else target,
                                         args, kwargs)  # fmt: skip

    def f(a, b):
        return a + b

    swapped = MulForAdd(fx.symbolic_trace(f)).transform()
    assert swapped(torch.tensor(3.0), torch.tensor(4.0)).item() == 12.0


def test_control_flow_on_a_traced_value_is_refused_unless_made_concrete():
    def f(x, flag):
        return x * 2 if flag else x - 1

    with pytest.raises(fx.proxy.TraceError, match="control flow"):
        fx.symbolic_trace(f)
    gm = fx.symbolic_trace(f, concrete_args={"flag": True})
    assert gm(torch.tensor(3.0)).item() == 6.0


def test_a_graph_built_with_proxies_by_hand():
    """proxy_based_graph_creation.py: torch functions on proxies record nodes for as long as
    the graph's tracer lives, and stop being wrapped after it."""
    import gc

    relu = torch.relu
    graph = fx.Graph()
    tracer = fx.proxy.GraphAppendingTracer(graph)
    x, y = (fx.Proxy(graph.placeholder(n), tracer) for n in "xy")
    out = torch.neg(torch.tanh(torch.cat([x, y])))
    graph.output(out.node)
    module = fx.GraphModule(torch.nn.Module(), graph)
    assert "cat = torch.cat([x, y]);  x = y = None" in module.code
    a, b = torch.randn(2), torch.randn(2)
    np.testing.assert_allclose(module(a, b).numpy(), (-torch.tanh(torch.cat([a, b]))).numpy())
    del tracer, x, y, out
    gc.collect()
    assert torch.relu is relu
    with pytest.raises(fx.proxy.TraceError, match="graph.call_function"):
        relu(fx.Proxy(fx.Graph().placeholder("z"), _no_tracer()))


def _no_tracer():
    """A tracer that keeps no patch alive (proxies reaching functions raise)."""
    tracer = fx.Tracer()
    tracer.graph = fx.Graph()
    return tracer


def test_a_graph_module_called_on_proxies_inlines_its_graph():
    """wrap_output_dynamically.py: an activation's traced graph appended to another's."""

    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.cat([x, y])

    traced = fx.symbolic_trace(M())
    output = next(n for n in traced.graph.nodes if n.op == "output")
    wrapped = output.all_input_nodes[0]
    activation = fx.symbolic_trace(torch.nn.LeakyReLU())
    with traced.graph.inserting_after(wrapped):
        output.args = (activation(fx.Proxy(wrapped)).node,)
    traced.recompile()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    np.testing.assert_allclose(traced(x, y).numpy(),
                               F.leaky_relu(torch.cat([x, y])).numpy())  # fmt: skip


def test_what_torchvisions_feature_extractor_builds_on():
    """torchvision's `create_feature_extractor` subclasses GraphModule, skips its __init__,
    copies the root's objects with `_copy_attr` and swaps graphs with train/eval."""
    from tracegrad.torch.fx.graph_module import _copy_attr

    model = Net()
    train_graph, eval_graph = fx.Tracer().trace(model), fx.Tracer().trace(model)

    class Dual(fx.GraphModule):
        def __init__(self, root, train_graph, eval_graph):
            super(fx.GraphModule, self).__init__()
            for node in (*train_graph.nodes, *eval_graph.nodes):
                if node.op in ("get_attr", "call_module"):
                    _copy_attr(root, self, node.target)
            self.train_graph, self.eval_graph = train_graph, eval_graph
            self.graph = train_graph

    dual = Dual(model, train_graph, eval_graph)
    assert getattr(dual.block, "1").weight is model.block[1].weight and "shift" in dual._buffers
    x = torch.randn(2, 4)
    np.testing.assert_allclose(dual(x)[0].numpy(), model(x)[0].numpy(), rtol=1e-6)
    dual.graph = eval_graph
    np.testing.assert_allclose(dual(x)[1].numpy(), model(x)[1].numpy(), rtol=1e-6)


def test_shape_propagation_records_each_nodes_tensor():
    from tracegrad.torch.fx.passes.shape_prop import ShapeProp

    gm = fx.symbolic_trace(Net())
    ShapeProp(gm).propagate(torch.randn(3, 4))
    meta = {n.name: n.meta.get("tensor_meta") for n in gm.graph.nodes}
    assert meta["lin"].shape == (3, 6) and meta["lin"].dtype == torch.float32
    assert meta["lin"].stride == (6, 1)
    chunk = next(n for n in gm.graph.nodes if n.target == "chunk")
    assert [m.shape for m in chunk.meta["tensor_meta"]] == [(3, 3), (3, 3)]
    assert meta["output"][1].shape == (3, 2)


def test_replace_pattern_rewrites_each_occurrence():
    """subgraph_rewriter_basic_use.py: neg-then-cat-then-sum becomes a stack, twice."""

    class M(torch.nn.Module):
        def forward(self, x, w1, w2):
            m1 = torch.cat([torch.neg(w1), w2]).sum()
            m2 = torch.cat([torch.neg(w1), w2]).sum()
            return x + torch.max(m1) + torch.max(m2)

    def pattern(a1, a2):
        return torch.cat([torch.neg(a1), a2]).sum()

    def replacement(w1, w2):
        return torch.stack([w1, w2])

    traced = fx.symbolic_trace(M())
    matches = fx.replace_pattern(traced, pattern, replacement)
    assert len(matches) == 2 and all(m.anchor.target == "sum" for m in matches)
    assert traced.code.count("torch.stack([w1, w2])") == 2 and "neg" not in traced.code
    x, w1, w2 = torch.randn(3), torch.randn(2), torch.randn(2)
    np.testing.assert_allclose(traced(x, w1, w2).numpy(),
                               (x + 2 * torch.max(torch.stack([w1, w2]))).numpy())  # fmt: skip
    traced.graph.lint()


def test_einsum_records_its_operands_spread_and_torch_functional_names_it():
    """opt_einsum's torch backend calls `torch.einsum(eq, operands)` on proxies; PyTorch's
    einsum records `(eq, *operands)`, which opt_einsum_fx's passes read (e3nn)."""
    from tracegrad.torch.functional import einsum

    assert einsum is torch.einsum and torch.functional.tensordot is torch.tensordot
    module = fx.symbolic_trace(lambda a, b: torch.einsum("ij,jk->ik", (a, b)))
    (node,) = [n for n in module.graph.nodes if n.op == "call_function"]
    assert node.target in {torch.functional.einsum} and len(node.args) == 3
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    np.testing.assert_allclose(module(a, b).numpy(), a.numpy() @ b.numpy(), rtol=1e-6)
    with pytest.raises(AttributeError, match="torch.functional.no_such_name is not provided"):
        torch.functional.no_such_name  # noqa: B018

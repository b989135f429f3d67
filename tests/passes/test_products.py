"""batch_products: a sum of thin matrix products becomes one product of the concatenated
operands, on hand-built graphs (against the reference interpreter) and in a traced RNN step
(against eager, on both backends)."""

import numpy as np
import pytest

import passes
import tracegrad as tg
from tracegrad import interpret
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.primitives import PRIMITIVES
from tracegrad.core.vocabulary import Phase

F64 = np.float64


def node(op, inputs, out_shape, **attrs):
    out = Value(out_shape, F64)
    return Node(PRIMITIVES[op], inputs, [out], attrs, "test.py:1", Phase.BACKWARD), out


def sum_of_products(terms, k=3, m=4, n=5, extra=False):
    """sum_i x_i^T @ y_i (x_i (k, m), y_i (k, n)), and one more term, an input, if `extra`."""
    inputs, nodes, total = [], [], None
    for _ in range(terms):
        x, y = Value((k, m), F64), Value((k, n), F64)
        inputs += [x, y]
        t, xt = node("transpose", [x], (m, k), axes=(1, 0))
        p, prod = node("matmul", [xt, y], (m, n))
        nodes += [t, p]
        if total is not None:
            a, prod = node("add", [total, prod], (m, n))
            nodes.append(a)
        total = prod
    if extra:
        e = Value((m, n), F64)
        inputs.append(e)
        a, total = node("add", [e, total], (m, n))
        nodes.append(a)
    return Graph(inputs, nodes, [total])


def args_for(graph, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape) for v in graph.inputs]


@pytest.mark.parametrize("extra", [False, True])
def test_a_sum_of_thin_products_is_one_product(extra):
    before = sum_of_products(8, extra=extra)
    after, st = passes.batch_products(before)
    after.verify()
    assert after.count("matmul") == 1 and after.count("concatenate") == 2
    assert after.count("add") == int(extra)
    args = args_for(before)
    (want,), (got,) = interpret(before, *args), interpret(after, *args)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert st.nodes_after < st.nodes_before


@pytest.mark.parametrize(
    "graph",
    [
        sum_of_products(passes.products.MIN_TERMS - 1),
        sum_of_products(8, k=passes.products.THIN + 1),
    ],
    ids=["few terms", "long contraction"],
)
def test_few_or_long_products_stay_as_they_are(graph):
    after, _ = passes.batch_products(graph)
    assert after.nodes == graph.nodes


def test_a_product_read_elsewhere_stays_a_term_of_its_own():
    graph = sum_of_products(6)
    product = graph.nodes[1].outputs[0]  # the first product, read by the sum and returned
    graph = Graph(graph.inputs, graph.nodes, [*graph.outputs, product])
    after, _ = passes.batch_products(graph)
    after.verify()
    assert after.count("matmul") == 2
    args = args_for(graph)
    for got, want in zip(interpret(after, *args), interpret(graph, *args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_the_operands_go_in_the_order_of_a_stack_of_them():
    """An RNN's per-step gradients are stacked (for the input's gradient) in time order while
    backward makes them last step first: the one product concatenates them as the stack does,
    so that both are one array (`plan_memory`)."""
    graph = sum_of_products(6)
    ys = graph.inputs[1::2][::-1]  # stacked in the order opposite to the products'
    reshaped = [node("reshape", [y], (1, *y.shape), shape=(1, *y.shape)) for y in ys]
    stack, stacked = node("concatenate", [v for _, v in reshaped], (6, *ys[0].shape), axis=0)
    graph = Graph(graph.inputs, [*graph.nodes, *(n for n, _ in reshaped), stack],
                  [*graph.outputs, stacked])  # fmt: skip
    after, _ = passes.batch_products(graph)
    after.verify()
    (joined,) = [n for n in after.nodes if n.op == "concatenate" and n.inputs[0] in ys]
    assert joined.inputs == ys
    args = args_for(graph)
    for got, want in zip(interpret(after, *args), interpret(graph, *args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def rnn(steps=8, hidden=6, batch=3):
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.standard_normal((hidden, hidden)) / np.sqrt(hidden), requires_grad=True)
    u = tg.tensor(rng.standard_normal((2, hidden)), requires_grad=True)

    def step(xs):
        w.grad, u.grad = None, None
        h = tg.zeros((batch, hidden), dtype=F64)
        for t in range(steps):
            h = tg.tanh(h @ w + xs[t] @ u)
        loss = (h**2).sum()
        loss.backward()
        return loss

    xs = rng.standard_normal((steps, batch, 2))
    return step, xs, (w, u)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_rnn_gets_its_recurrent_weights_gradient_from_one_product(backend):
    step, xs, params = rnn()
    want = [float(step(tg.tensor(xs)))] + [p.grad.numpy().copy() for p in params]
    traced = tg.trace(step, backend=backend)
    got = [float(traced(xs))] + [p.grad.numpy().copy() for p in params]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    for a, b in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    graph = traced.latest.graph
    weight_grads = [n for n in graph.nodes if n.op == "matmul" and n.outputs[0].shape == (6, 6)]
    assert len(weight_grads) == 1

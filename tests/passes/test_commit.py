"""The commit point (passes/commit.py) and what rests on it: which nodes may fail, the schedule
that runs them before every update, and the memory plan that writes new state values into the
old ones' buffers only after the commit point and only once nothing reads the old value."""

import numpy as np

import passes
from passes.commit import commit_point, fallible
from passes.memory import plan_memory
from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.vocabulary import Phase

F64 = np.float64


def node(prim, inputs, out_shape, phase=Phase.FORWARD, dtype=F64, **attrs):
    out = Value(out_shape, dtype)
    return Node(prim, inputs, [out], attrs, "test.py:1", phase), out


def test_what_may_fail():
    table, tokens = Value((10, 4), F64), Value((6,), np.int64)
    checked, c = node(P.check_range, [tokens], (6,), dtype=np.int64, lo=0, hi=10, allow=None,
                      what="t", where="w")  # fmt: skip
    lookup, h = node(P.getitem, [table, c], (6, 4), template=("@",))
    row, r = node(P.getitem, [h], (4,), template=(0,))  # basic indexing: a view
    grad, g = node(P.scatter_add, [h, c], (10, 4), Phase.BACKWARD, shape=(10, 4),
                   template=("@",))  # fmt: skip
    other, o = node(P.scatter_add, [h, tokens], (10, 4), Phase.BACKWARD, shape=(10, 4),
                    template=("@",))  # fmt: skip
    graph = Graph([table, tokens], [checked, lookup, row, grad, other], [r, g, o])
    # the check and the lookup may fail; the view and the lookup's gradient (its indices were
    # checked by the lookup) may not; a scatter-add of other indices may
    assert fallible(graph) == [True, True, False, False, True]
    assert commit_point(graph) == 5
    assert not P.attention.may_raise and P.inv.may_raise and not P.mul.may_raise


def sgd_graph(late_check: bool):
    """p_new = p - 0.1 * g with g = x * p (backward), optionally a check traced after the
    update that does not read it."""
    p, x, labels = Value((8,), F64), Value((8,), F64), Value((8,), np.int64)
    nodes = []
    n, g = node(P.mul, [x, p], (8,), Phase.BACKWARD)
    nodes.append(n)
    n, step = node(P.mul, [g, Value((), F64, const=np.asarray(0.1))], (8,), Phase.UPDATE)
    nodes.append(n)
    n, new = node(P.sub, [p, step], (8,), Phase.UPDATE)
    nodes.append(n)
    outputs = [new]
    if late_check:
        n, c = node(P.check_range, [labels], (8,), dtype=np.int64, lo=0, hi=3, allow=None,
                    what="labels", where="w")  # fmt: skip
        nodes.append(n)
        outputs.insert(0, c)
    return Graph([p, x, labels], nodes, outputs), {len(outputs) - 1: 0}


def test_the_update_waits_for_what_may_fail_then_writes_in_place():
    graph, updates = sgd_graph(late_check=True)
    unscheduled = plan_memory(graph, None, updates)
    assert unscheduled.commit == 4 and not unscheduled.in_place  # the check comes last
    scheduled, _ = passes.schedule(graph)
    order = [n.prim for n in scheduled.nodes]
    assert order.index(P.check_range) == 1  # after the gradient, before the update
    memory = plan_memory(scheduled, None, updates)
    assert memory.commit == 2
    assert memory.in_place == {scheduled.outputs[1]: scheduled.inputs[0]}
    assert memory.written == [scheduled.inputs[0]]


def test_an_old_value_read_after_the_update_keeps_it_from_being_written_in_place():
    graph, updates = sgd_graph(late_check=False)
    assert plan_memory(graph, None, updates).in_place  # nothing reads p after the update
    p = graph.inputs[0]
    reader, r = node(P.mul, [p, p], (8,))
    late = Graph(graph.inputs, [*graph.nodes, reader], [r, *graph.outputs])
    memory = plan_memory(late, None, {1: 0})
    assert not memory.in_place and not memory.written
    view, v = node(P.reshape, [p], (2, 4), shape=(2, 4))
    returned = Graph(graph.inputs, [view, *graph.nodes], [v, *graph.outputs])
    assert not plan_memory(returned, None, {1: 0}).in_place  # a view of it is an output


def test_the_update_waits_for_the_last_reader_of_the_old_value():
    """A weight's update waits for the gradient of the layer's input, which reads the weight."""
    w, x, dy = Value((4, 4), F64), Value((2, 4), F64), Value((2, 4), F64)
    xt_node, xt = node(P.transpose, [x], (4, 2), Phase.BACKWARD, axes=(1, 0))
    dw_node, dw = node(P.matmul, [xt, dy], (4, 4), Phase.BACKWARD)
    wt_node, wt = node(P.transpose, [w], (4, 4), Phase.BACKWARD, axes=(1, 0))
    dx_node, dx = node(P.matmul, [dy, wt], (2, 4), Phase.BACKWARD)
    new_node, new = node(P.sub, [w, dw], (4, 4), Phase.UPDATE)
    # the update, traced last, is ready as soon as dw exists: it waits for dx, which reads w
    graph = Graph([w, x, dy], [xt_node, dw_node, wt_node, dx_node, new_node], [dx, new])
    scheduled, _ = passes.schedule(graph)
    order = [n.prim for n in scheduled.nodes]
    assert order.index(P.sub) > [i for i, p in enumerate(order) if p is P.matmul][-1]
    assert plan_memory(scheduled, None, {1: 0}).in_place

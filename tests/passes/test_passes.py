"""Each pass alone on small hand-built graphs, checked against the reference interpreter."""

import numpy as np
import pytest

import passes
from passes.memory import plan_memory
from tracegrad import interpret
from tracegrad.compiler import lowering
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.ir import Graph, GraphError, Node, Value
from tracegrad.core.primitives import PRIMITIVES, defprimitive
from tracegrad.core.vocabulary import Kind, Phase

F32 = np.float32
F64 = np.float64


def val(*shape, dtype=F32):
    return Value(shape, dtype)


def const(x, dtype=F32):
    x = np.asarray(x, dtype)
    return Value(x.shape, dtype, const=x)


def node(op, inputs, out_shape, phase=Phase.FORWARD, dtype=F32, **attrs):
    out = Value(out_shape, dtype)
    return Node(PRIMITIVES[op], inputs, [out], attrs, "test.py:1", phase), out


def same_results(before, after, *args):
    before.verify(), after.verify()
    for a, b in zip(interpret(before, *args), interpret(after, *args), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def check_plan(graph):
    """plan_memory's invariants, derived here independently of it: buffers that live at the
    same time never overlap in the arena (but the parts of a concatenation that copies nothing
    lie side by side in its result, in order), every intermediate is deleted after its last use,
    and the planned peak is the arena plus the most bytes alive outside it at once."""
    graph.verify()
    plan = plan_memory(graph)
    n = len(graph.nodes)
    last = {}
    for i, nd in enumerate(graph.nodes):
        last.update((v, i) for v in nd.inputs)
    last.update((v, n - 1) for v in graph.outputs)  # copied out after the plan ran
    owner, life = {}, {}
    for i, nd in enumerate(graph.nodes):
        for v in nd.outputs:
            if nd.prim.is_view(nd.inputs, nd.attrs):
                owner[v] = owner.get(nd.inputs[0])  # None: a view of an input
            else:
                owner[v] = owner[plan.reuse[v]] if v in plan.reuse else v
            if owner[v] is not None:
                start = life.get(owner[v], (i, i))[0]
                life[owner[v]] = (start, max(life.get(owner[v], (i, i))[1], last.get(v, i)))
    inside = {}  # a part's buffer (or a second result of the same parts) -> the result
    for nd in graph.nodes:
        whole = nd.outputs[0]
        if whole in plan.joined:
            at = plan.offsets[whole]
            for v in nd.inputs:
                assert plan.offsets[owner[v]] == at, "a part out of its place"
                at += v.nbytes
            first = inside.get(owner[nd.inputs[0]])
            inside.update({whole: first} if first else {owner[v]: whole for v in nd.inputs})
            # the result's buffer holds its first part's birth on, and its copy's life too
            lives = [life[owner[v]] for v in nd.inputs] + [life[whole]]
            life[first or whole] = (min(s for s, _ in lives), max(e for _, e in lives))

    def root(v):
        return root(inside[v]) if v in inside else v

    placed = [(plan.offsets[b], plan.offsets[b] + b.nbytes, life[b], b) for b in plan.offsets]
    for lo, hi, (b0, d0), v in placed:
        assert 0 <= lo and hi <= plan.arena and (lo % 64 == 0 or v in inside)
        for lo2, hi2, (b1, d1), w in placed:
            if (lo, hi) != (lo2, hi2) and b0 <= d1 and b1 <= d0 and root(v) is not root(w):
                assert hi <= lo2 or hi2 <= lo, "buffers alive at once overlap in the arena"
    deleted = [v for i in range(n) for v in plan.dead_after.get(i, ())]
    intermediates = {v for nd in graph.nodes for v in nd.inputs} - {*graph.inputs} - {
        v for v in last if v.const is not None} - set(graph.outputs)  # fmt: skip
    assert sorted(deleted, key=id) == sorted(intermediates, key=id)  # each exactly once
    for i in range(n):
        assert all(last[v] == i for v in plan.dead_after.get(i, ()))
    outside = [sum(b.nbytes for b, (s, e) in life.items() if b not in plan.offsets and s <= i <= e)
               for i in range(n)]  # fmt: skip
    assert plan.peak == plan.arena + max(outside, default=0)
    return plan


def rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(F32)


def test_prune_drops_what_reaches_no_output():
    x = val(3)
    n1, a = node("exp", [x], (3,))
    n2, b = node("sin", [x], (3,))  # dead
    n3, c = node("neg", [b], (3,))  # dead
    g = Graph([x], [n1, n2, n3], [a])
    after, st = passes.prune(g)
    assert [n.op for n in after.nodes] == ["exp"]
    assert (st.nodes_before, st.nodes_after, st.bytes_saved) == (3, 1, 24)
    same_results(g, after, rand(3))


def test_cse_merges_identical_nodes_and_equal_constants():
    x = val(4)
    n1, a = node("mul", [x, const(2.0)], (4,))
    n2, b = node("mul", [x, const(2.0)], (4,))  # same op, input, equal constant
    n3, c = node("add", [a, b], (4,))
    g = Graph([x], [n1, n2, n3], [c])
    after, st = passes.cse(g)
    assert [n.op for n in after.nodes] == ["mul", "add"]
    assert after.nodes[1].inputs[0] is after.nodes[1].inputs[1]
    same_results(g, after, rand(4))


def test_cse_keeps_nodes_whose_attributes_differ():
    x = val(2, 3)
    n1, a = node("sum", [x], (3,), axis=(0,), keepdims=False)
    n2, b = node("sum", [x], (2,), axis=(1,), keepdims=False)
    after, _ = passes.cse(Graph([x], [n1, n2], [a, b]))
    assert len(after.nodes) == 2


@pytest.mark.parametrize(
    "build, expect_ops",
    [
        (lambda x: [node("mul", [x, const(1.0)], (2, 3))], []),
        (lambda x: [node("mul", [const(1.0), x], (2, 3))], []),
        (lambda x: [node("add", [x, const(np.zeros((2, 3)))], (2, 3))], []),  # a zeros seed
        (lambda x: [node("sub", [x, const(0.0)], (2, 3))], []),
        (lambda x: [node("add", [x, const(1.0)], (2, 3))], ["add"]),
        (lambda x: [node("reshape", [x], (2, 3), shape=(2, 3))], []),
        (lambda x: [node("transpose", [x], (2, 3), axes=(0, 1))], []),
    ],
    ids=["x*1", "1*x", "x+zeros", "x-0", "x+1 stays", "reshape to itself", "identity transpose"],
)
def test_simplify_identities(build, expect_ops):
    x = val(2, 3)
    nodes_outs = build(x)
    nodes = [n for n, _ in nodes_outs]
    g = Graph([x], nodes, [nodes_outs[-1][1]])
    after, _ = passes.simplify(g)
    assert [n.op for n in after.nodes] == expect_ops
    same_results(g, after, rand(2, 3))


def test_simplify_transpose_of_transpose_and_reshape_chains():
    x = val(2, 3, 4)
    n1, a = node("transpose", [x], (3, 4, 2), axes=(1, 2, 0))
    n2, b = node("transpose", [a], (2, 3, 4), axes=(2, 0, 1))  # back to x
    n3, c = node("reshape", [b], (6, 4), shape=(6, 4))
    n4, d = node("reshape", [c], (24,), shape=(24,))
    g = Graph([x], [n1, n2, n3, n4], [d])
    after, _ = passes.prune(passes.simplify(g)[0])
    assert [n.op for n in after.nodes] == ["reshape"]
    same_results(g, after, rand(2, 3, 4))


def test_simplify_a_sum_that_undoes_a_broadcast():
    y = val(1, 3)
    n1, a = node("broadcast_to", [y], (5, 4, 3), shape=(5, 4, 3))
    n2, b = node("sum", [a], (3,), axis=(0, 1), keepdims=False)
    g = Graph([y], [n1, n2], [b])
    after, _ = passes.prune(passes.simplify(g)[0])
    assert "broadcast_to" not in [n.op for n in after.nodes]
    assert "sum" not in [n.op for n in after.nodes]
    same_results(g, after, rand(1, 3))


@pytest.mark.parametrize("exponent, abs_left", [(2.0, False), (4.0, False), (3.0, True)])
def test_simplify_an_even_power_of_abs_is_that_power_of_the_value(exponent, abs_left):
    x = val(6)
    n1, a = node("abs", [x], (6,))
    n2, b = node("pow", [a, const(exponent)], (6,))
    g = Graph([x], [n1, n2], [b])
    after, _ = passes.prune(passes.simplify(g)[0])
    assert ("abs" in [n.op for n in after.nodes]) == abs_left
    args = [np.array([-3.0, -0.0, 0.0, 1.5, -np.inf, np.nan], F32)]
    for got, want in zip(interpret(after, *args), interpret(g, *args), strict=True):
        np.testing.assert_array_equal(got, want)  # bit for bit, NaN where NaN


def test_simplify_a_cast_to_bfloat16_and_back_is_one_fusible_rounding():
    """Between two ops of bfloat16 operands (`tensor._in_float32`): the bfloat16 value stays
    where something else reads it (here, a result), its widening becomes the rounding."""
    x, a, b = val(5), val(5, dtype=BFLOAT16), val(5)
    n1 = Node(PRIMITIVES["astype"], [x], [a], {"dtype": BFLOAT16}, "test.py:1")
    n2 = Node(PRIMITIVES["astype"], [a], [b], {"dtype": np.dtype(F32)}, "test.py:2")
    n3, c = node("exp", [b], (5,))
    g = Graph([x], [n1, n2, n3], [c, a])
    after, _ = passes.prune(passes.simplify(g)[0])
    assert [n.op for n in after.nodes] == ["astype", "bfloat16_rounded", "exp"]
    args = [np.array([1.00390625, 1.01171875, np.nan, 3.4e38, -2.5], F32)]
    for got, want in zip(interpret(after, *args), interpret(g, *args), strict=True):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit


def test_simplify_folds_constants():
    x = val(3)
    n1, a = node("exp", [const([0.0, 1.0, 2.0])], (3,))
    n2, b = node("mul", [x, a], (3,))
    g = Graph([x], [n1, n2], [b])
    after, _ = passes.simplify(g)
    assert [n.op for n in after.nodes] == ["mul"]
    same_results(g, after, rand(3))


def test_simplify_leaves_a_check_of_constants_to_the_step():
    """A check has an effect (eager's error, raised when the step runs): folding it would
    raise from inside the pass, or drop it."""
    labels = const([0, 3, 1], np.int64)
    where = {"lo": 0, "hi": 2, "allow": None, "what": "labels", "where": "test.py:1"}
    n1, checked = node("check_range", [labels], (3,), dtype=np.int64, **where)
    n2, y = node("add", [val(3, dtype=np.int64), checked], (3,), dtype=np.int64)
    g = Graph([n2.inputs[0]], [n1, n2], [y])
    after, _ = passes.simplify(g)
    assert [n.op for n in after.nodes] == ["check_range", "add"]
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\), found 3"):
        interpret(after, np.zeros(3, np.int64))


def test_a_node_phase_is_a_phase_and_a_misspelt_one_raises():
    n, _ = node("exp", [val(3)], (3,), "backward")
    assert n.phase is Phase.BACKWARD
    with pytest.raises(ValueError, match="backwards"):
        node("exp", [val(3)], (3,), "backwards")


@pytest.mark.parametrize(
    "kind, rerun, effects",
    [(Kind.ELEMENTWISE, True, False), (Kind.OPAQUE, False, False), (Kind.RANDOM, False, True)],
)
def test_a_users_op_gets_what_passes_ask_from_its_kind(monkeypatch, kind, rerun, effects):
    """`defprimitive` ops answer `may_rerun` and `has_effects` by their kind: remat recomputes
    an elementwise one in backward, never an opaque op (it may hide an effect) or a draw."""
    name = f"user_{kind}"
    monkeypatch.setitem(PRIMITIVES, name, None)  # taken off the table after the test
    op = defprimitive(name, np.exp, vjp=None, kind=kind)
    assert (op.may_rerun, op.has_effects) == (rerun, effects)
    x, y = val(4, 3), val(4, 3)
    n2, z = node("mul", [y, y], (4, 3), Phase.BACKWARD)
    after, _ = passes.rematerialize(Graph([x], [Node(op, [x], [y]), n2], [z]))
    assert (Phase.RECOMPUTE in {n.phase for n in after.nodes}) == rerun


def gelu_layer():
    """x -> u = x@w -> y = tanh(u)*u (elementwise) -> loss; backward reads u, t and y."""
    x, w = val(4, 3), val(3, 3)
    fwd = [node("matmul", [x, w], (4, 3))]
    u = fwd[-1][1]
    fwd.append(node("tanh", [u], (4, 3)))
    t = fwd[-1][1]
    fwd.append(node("mul", [t, u], (4, 3)))
    y = fwd[-1][1]
    bwd = [
        node("mul", [y, t], (4, 3), Phase.BACKWARD),
        node("mul", [u, const(2.0)], (4, 3), Phase.BACKWARD),
    ]
    bwd.append(node("add", [bwd[0][1], bwd[1][1]], (4, 3), Phase.BACKWARD))
    nodes = [n for n, _ in fwd + bwd]
    return Graph([x, w], nodes, [bwd[-1][1]]), u


def test_remat_keeps_only_the_pre_activation():
    g, u = gelu_layer()
    assert len(passes.saved_values(g)) == 3
    after, st = passes.rematerialize(g)
    assert passes.saved_values(after) == [u]
    assert st.bytes_saved == 2 * 4 * 3 * 4
    assert [n.phase for n in after.nodes].count(Phase.RECOMPUTE) == 2
    same_results(g, after, rand(4, 3), rand(3, 3))


def test_remat_rebuilds_views_instead_of_keeping_their_base():
    """Max-pooling's shape: u = x @ w, r = relu(u), two window slices of r compared in
    backward. Keeping the slices keeps r alive beside u; slices are free to make again, so only
    u (which relu's backward reads) is kept, and m, a result of the step, held to its end
    anyway."""
    x, w = val(4, 4), val(4, 4)
    n1, u = node("matmul", [x, w], (4, 4))
    n2, r = node("maximum", [u, const(0.0)], (4, 4))
    n3, left = node("getitem", [r], (4, 2), template=(slice(None), slice(0, 4, 2)))
    n4, right = node("getitem", [r], (4, 2), template=(slice(None), slice(1, 4, 2)))
    n5, m = node("maximum", [left, right], (4, 2))
    n6, mask = node("greater", [u, const(0.0)], (4, 4), Phase.BACKWARD, dtype=np.bool_)
    n7, hit = node("equal", [left, m], (4, 2), Phase.BACKWARD, dtype=np.bool_)
    n8, other = node("equal", [right, m], (4, 2), Phase.BACKWARD, dtype=np.bool_)
    g = Graph([x, w], [n1, n2, n3, n4, n5, n6, n7, n8], [m, mask, hit, other])
    after, _ = passes.rematerialize(g)
    assert passes.saved_values(after) == [u, m]
    same_results(g, after, rand(4, 4), rand(4, 4))


def test_remat_of_a_long_run_of_cheap_nodes():
    """600 sines in a row (SENet's gates make long runs): the chain search recursed once per
    node and hit Python's recursion limit; it stops at MAX_CHAIN."""
    x, w = val(4), val(4)
    nodes, v = [], x
    for _ in range(600):
        n, v = node("sin", [v], (4,))
        nodes.append(n)
    n, y = node("mul", [v, w], (4,))
    n2, z = node("cos", [v], (4,), Phase.BACKWARD)
    g = Graph([x, w], [*nodes, n, n2], [y, z])
    after, _ = passes.rematerialize(g)
    same_results(g, after, rand(4), rand(4))


def test_remat_keeps_a_result_of_the_step_rather_than_recompute_it():
    """A gradient clipped, then applied (g' = g * c, p' = p - lr * g'): g' is a result (the new
    `.grad`), held to the end of the step anyway, so the update reads it rather than multiply
    again; a value that is not a result is still recomputed (h = g * c, read by the update)."""
    g, c, p, lr = val(8, 4), val(), val(8, 4), val()
    n1, clipped = node("mul", [g, c], (8, 4))
    n2, h = node("mul", [g, c], (8, 4))
    n3, step = node("mul", [clipped, lr], (8, 4), Phase.UPDATE)
    n4, new = node("sub", [p, step], (8, 4), Phase.UPDATE)
    n5, other = node("mul", [h, lr], (8, 4), Phase.UPDATE)
    graph = Graph([g, c, p, lr], [n1, n2, n3, n4, n5], [clipped, new, other])
    after, _ = passes.rematerialize(graph)
    assert passes.saved_values(after) == [clipped]
    assert [n.phase for n in after.nodes].count(Phase.RECOMPUTE) == 1
    same_results(graph, after, rand(8, 4), rand(), rand(8, 4), rand())


def test_remat_keeps_the_smallest_cut():
    """y = exp(x) * c, c = a matmul's (4, 1) result, backward reads the (4, 4) y: keeping c (4
    elements) and recomputing exp(x) * c is smaller than keeping y (16); keeping c and exp(x)
    (8) would be smaller too, but x is an input: free."""
    x, w, v = val(4), val(4, 4), val(4, 1)
    n1, a = node("exp", [x], (4,))
    n3, c = node("matmul", [w, v], (4, 1))  # cannot be recomputed
    n4, y = node("mul", [a, c], (4, 4))
    n5, z = node("neg", [y], (4, 4), Phase.BACKWARD)
    g = Graph([x, w, v], [n1, n3, n4, n5], [z])
    assert passes.saved_values(g) == [y]
    after, _ = passes.rematerialize(g)
    assert passes.saved_values(after) == [c]
    same_results(g, after, rand(4), rand(4, 4), rand(4, 1))


def test_remat_keeps_one_value_for_two_scaled_copies_of_it():
    """Exact GELU's backward reads 0.5 * u and u / sqrt(2), both cheap functions of the
    pre-activation u = matmul + bias: keep u (one value), not the two copies. A forward-order
    rule that only looks back at values already kept would keep both."""
    x, w, b = val(8, 4), val(4, 4), val(4)
    n1, m = node("matmul", [x, w], (8, 4))
    n2, u = node("add", [m, b], (8, 4))
    n3, half = node("mul", [u, const(0.5)], (8, 4))
    n4, scaled = node("mul", [u, const(0.7)], (8, 4))
    n5, e = node("erf", [scaled], (8, 4), Phase.BACKWARD)
    n6, z = node("mul", [half, e], (8, 4), Phase.BACKWARD)
    g = Graph([x, w, b], [n1, n2, n3, n4, n5, n6], [z])
    assert set(passes.saved_values(g)) == {scaled, half}
    after, _ = passes.rematerialize(g)
    assert passes.saved_values(after) == [u]
    same_results(g, after, rand(8, 4), rand(4, 4), rand(4))


def test_schedule_runs_updates_as_soon_as_ready():
    p, gin = val(3), val(3)
    n1, g1 = node("neg", [gin], (3,), Phase.BACKWARD)
    n2, g2 = node("exp", [gin], (3,), Phase.BACKWARD)
    n3, g3 = node("add", [g2, g1], (3,), Phase.BACKWARD)
    n4, new_p = node("sub", [p, g1], (3,), Phase.UPDATE)
    g = Graph([p, gin], [n1, n2, n3, n4], [g3, new_p])
    after, _ = passes.schedule(g)
    assert [n.op for n in after.nodes] == ["neg", "sub", "exp", "add"]
    same_results(g, after, rand(3), rand(3))


def test_schedule_starts_collectives_as_soon_as_ready_and_the_plan_places_their_results():
    """An all-reduce traced after unrelated backward work runs before it (its peers wait for
    it), its result gets an arena buffer, and the update reading it follows it."""
    p, gin = val(3), val(3)
    n1, g1 = node("neg", [gin], (3,), Phase.BACKWARD)
    n2, g2 = node("exp", [gin], (3,), Phase.BACKWARD)
    n3, g3 = node("add", [g2, g1], (3,), Phase.BACKWARD)
    r = val(3)
    allreduce = PRIMITIVES["allreduce"]
    n4 = Node(allreduce, [g1], [r], {"op": "mean", "timeout": None}, "", Phase.BACKWARD)
    n5, new_p = node("sub", [p, r], (3,), Phase.UPDATE)
    after, _ = passes.schedule(Graph([p, gin], [n1, n2, n3, n4, n5], [g3, new_p]))
    assert [n.op for n in after.nodes] == ["neg", "allreduce", "sub", "exp", "add"]
    assert r in check_plan(after).offsets
    k, r = const([1.0, 2.0, 3.0]), val(3)  # every rank's sum of a constant is not a constant
    n = Node(PRIMITIVES["allreduce"], [k], [r], {"op": "sum", "timeout": None}, "", Phase.FORWARD)
    assert [n.op for n in passes.simplify(Graph([], [n], [r]))[0].nodes] == ["allreduce"]


def test_collectives_keep_their_traced_order_and_are_never_merged():
    """Ranks must run the same all-reduces in the same order: one of a constant (ready at once)
    traced after one of a gradient still runs after it, and two of equal constants (a rank
    sending zeros for two buffers) stay two messages."""
    gin = val(3)
    n1, g1 = node("exp", [gin], (3,), Phase.BACKWARD)
    a, b, c = val(3), val(3), val(3)
    allreduce, attrs = PRIMITIVES["allreduce"], {"op": "sum", "timeout": None}
    n2 = Node(allreduce, [g1], [a], attrs, "", Phase.BACKWARD)
    n3 = Node(allreduce, [const([0.0, 0.0, 0.0])], [b], attrs, "", Phase.BACKWARD)
    n4 = Node(allreduce, [const([0.0, 0.0, 0.0])], [c], attrs, "", Phase.BACKWARD)
    g = Graph([gin], [n1, n2, n3, n4], [a, b, c])
    merged, _ = passes.cse(g)
    assert [n.op for n in merged.nodes].count("allreduce") == 3
    after, _ = passes.schedule(merged)
    assert [n.outputs[0] for n in after.nodes if n.op == "allreduce"] == [a, b, c]


def test_memory_plan_frees_at_last_use_and_reuses_dying_buffers():
    x = val(1000)
    n1, a = node("exp", [x], (1000,))
    n2, b = node("neg", [a], (1000,))  # a dies here: b can take its buffer
    n3, c = node("sum", [b], (), axis=(0,), keepdims=False)
    plan = check_plan(Graph([x], [n1, n2, n3], [c]))
    assert plan.reuse == {b: a}
    assert list(plan.offsets) == [a] and plan.arena == 4032  # b in a's place, 64-byte aligned
    assert plan.peak == 4032 + 4  # the arena, and the sum's 0-d result allocated by NumPy
    assert plan.dead_after[1] == [a] and plan.dead_after[2] == [b]


def test_memory_plan_hands_a_taken_over_buffer_on():
    x = val(1000)
    n1, a = node("exp", [x], (1000,))
    n2, b = node("neg", [a], (1000,))  # in a's buffer
    n3, c = node("sin", [b], (1000,))  # in it too: b, not its owner, dies here
    plan = check_plan(Graph([x], [n1, n2, n3], [c]))
    assert plan.reuse == {b: a, c: b} and plan.arena == 4032


def test_memory_plan_takes_over_a_place_in_the_arena_before_a_numpy_allocation():
    """Both inputs die at the add; taking over `where`'s result (NumPy allocates it: no out=)
    would keep that allocation alive, and fresh allocations fault their pages in each step."""
    x, cond = val(1000), val(1000, dtype=np.bool_)
    n1, a = node("where", [cond, x, x], (1000,))
    n2, b = node("exp", [x], (1000,))
    n3, c = node("add", [a, b], (1000,))
    n4, d = node("sin", [c], (1000,))
    plan = check_plan(Graph([x, cond], [n1, n2, n3, n4], [d]))
    assert plan.reuse[c] is b and a not in plan.offsets


def test_a_kernel_writes_no_result_over_an_input_its_loop_reads():
    """A layer's backward with its bias gradient: the kernel could write du over u or g (it
    reads each element before it writes there), but a loop that writes where it reads fails
    LLVM's overlap check and runs its scalar version, so du gets a place of its own. A
    log-softmax's output, stored in a later sweep than the logits' last read, takes their
    buffer."""
    x, x2 = val(8, 4), val(8, 4)
    n1, u = node("exp", [x], (8, 4))
    n2, g = node("sin", [x2], (8, 4))
    n3, y = node("tanh", [u], (8, 4), Phase.BACKWARD)
    n4, du = node("mul", [g, y], (8, 4), Phase.BACKWARD)
    n5, db = node("sum", [du], (4,), Phase.BACKWARD, axis=(0,), keepdims=False)
    graph = Graph([x, x2], [n1, n2, n3, n4, n5], [du, db])
    after, _ = passes.fuse(graph)
    assert [len(n.attrs["body"].nodes) for n in after.nodes] == [1, 1, 3]
    plan = check_plan(after)
    assert du not in plan.reuse
    same_results(graph, after, rand(8, 4), rand(8, 4))

    h, w = val(8, 3), val(3, 4)
    m1, z = node("matmul", [h, w], (8, 4))  # the logits
    m2, m = node("max", [z], (8, 1), axis=(1,), keepdims=True)
    m3, d = node("sub", [z, m], (8, 4))
    m4, e = node("exp", [d], (8, 4))
    m5, t = node("sum", [e], (8, 1), axis=(1,), keepdims=True)
    m6, lt = node("log", [t], (8, 1))
    m7, logp = node("sub", [d, lt], (8, 4))
    graph = Graph([h, w], [m1, m2, m3, m4, m5, m6, m7], [logp])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["matmul", "fused"]
    plan = check_plan(after)
    assert plan.reuse[logp] is z
    same_results(graph, after, rand(8, 3), rand(3, 4))


def dot(a, b):
    """A 0-d result NumPy allocates (a sum of a product: 0-d results are never placed)."""
    n1, p = node("mul", [a, b], a.shape)
    n2, s = node("sum", [p], (), axis=tuple(range(a.ndim)), keepdims=False)
    return [n1, n2], s


def test_memory_plan_places_buffers_in_the_arena_and_reuses_places():
    x = val(1000)
    n1, a = node("exp", [x], (1000,))
    n2, b = dot(a, a)  # a's product takes a's place
    n3, c = node("sin", [x], (1000,))  # a is dead by now: c takes its place
    n4, d = node("cos", [c], (1000,))  # c is still read below: d needs a place of its own
    n5, e = dot(c, d)
    n6, f = node("exp", [x], (1000,))  # an output, in the arena: c and d are dead by now
    n7, g = node("sin", [f], (1000,))  # another, while f must stay until the caller copies it
    nodes = [n1, *n2, n3, n4, *n5, n6, n7]
    plan = check_plan(Graph([x], nodes, [b, e, f, g]))
    assert {c, d, f, g} <= set(plan.offsets) and plan.offsets[c] != plan.offsets[d]
    assert plan.arena == 2 * 4032  # two places serve every buffer
    assert plan.peak == plan.arena + 4 + 4  # and the 0-d results


def stack_of(parts, axis=0):
    """reshape each part to (1, *shape) and concatenate them along `axis` (a stack)."""
    nodes, views = [], []
    for v in parts:
        r, view = node("reshape", [v], (1, *v.shape), shape=(1, *v.shape))
        nodes.append(r)
        views.append(view)
    shape = list(views[0].shape)
    shape[axis] = sum(v.shape[axis] for v in views)
    c, whole = node("concatenate", views, tuple(shape), axis=axis)
    return [*nodes, c], whole


def test_memory_plan_makes_the_parts_of_a_concatenation_in_their_places():
    x = val(40, 50)
    n1, a = node("exp", [x], (40, 50))
    n2, b = node("sin", [x], (40, 50))
    stacked, s = stack_of([a, b])
    n3, twice = node("concatenate", [a, b], (80, 50), axis=0)  # the same parts, in order
    n4, y = node("neg", [s], (2, 40, 50))
    n5, z = node("neg", [twice], (80, 50))
    graph = Graph([x], [n1, n2, *stacked, n3, n4, n5], [y, z])
    plan = check_plan(graph)
    assert plan.joined == {s, twice}
    assert plan.offsets[b] == plan.offsets[a] + a.nbytes == plan.offsets[s] + a.nbytes
    assert plan.offsets[twice] == plan.offsets[s]
    assert plan.arena == 2 * 8000 + 2 * 16000  # the parts and their results: one buffer
    args = [rand(40, 50)]
    source, namespace = lowering_source(graph, plan)
    assert "concatenate" not in source
    want = interpret(graph, *args)
    from tracegrad.compiler.codegen import compile_source
    from tracegrad.runtime.arena import ArenaLayout, _aligned_empty

    run = compile_source(source, namespace, "stacked")
    got = run(ArenaLayout(plan).views(_aligned_empty(plan.arena)), *args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def lowering_source(graph, plan):
    from tracegrad.compiler.codegen import generate

    return generate(graph, "stacked", plan, {})


def test_memory_plan_copies_parts_that_cannot_be_made_in_place():
    x, y = val(40, 50), val(40, 50)
    n1, a = node("exp", [x], (40, 50))
    n2, b = node("sin", [x], (40, 50))
    n3, across = node("concatenate", [a, b], (40, 100), axis=1)  # a part is not contiguous
    n4, given = node("concatenate", [a, y], (80, 50), axis=0)  # a part is an input
    n5, other = node("concatenate", [b, a], (80, 50), axis=0)  # the parts in another order
    n6, first = node("concatenate", [a, b], (80, 50), axis=0)
    n7, c = node("cos", [x], (40, 50))
    n8, e = node("exp", [z := val(0, 50)], (0, 50))
    n9, padded = node("concatenate", [e, c], (40, 50), axis=0)  # an empty part: c is the whole
    graph = Graph([x, y, z], [n1, n2, n3, n4, n5, n6, n7, n8, n9],
                  [across, given, other, first, padded])  # fmt: skip
    plan = check_plan(graph)
    assert plan.joined == {other}  # the first of the two that could: a part has one place
    same_results(graph, graph, rand(40, 50), rand(40, 50), np.zeros((0, 50), F32))


def test_memory_plan_keeps_the_buffers_of_outputs_to_the_end():
    x = val(1000)
    n1, a = node("exp", [x], (1000,))
    n2, b = node("neg", [a], (1000,))  # written into a's buffer, and returned
    n3, t = node("reshape", [a], (10, 100), shape=(10, 100))
    n4, c = node("cos", [x], (1000,))
    plan = check_plan(Graph([x], [n1, n2, n4], [b, c]))
    assert plan.reuse == {b: a} and set(plan.offsets) == {a, c} and plan.arena == 2 * 4032
    plan = check_plan(Graph([x], [n1, n3, n4], [t, c]))  # a view of a is returned
    assert set(plan.offsets) == {a, c} and plan.peak == 2 * 4032


def test_memory_plan_keeps_a_viewed_buffer_alive():
    x = val(10, 100)
    n1, a = node("exp", [x], (10, 100))
    n2, t = node("transpose", [a], (100, 10), axes=(1, 0))  # a view of a's buffer
    n3, b = node("neg", [a], (10, 100))  # a's last use, but t still views it: no reuse
    n4, c = node("matmul", [t, b], (100, 100))
    plan = check_plan(Graph([x], [n1, n2, n3, n4], [c]))
    assert b not in plan.reuse
    assert set(plan.offsets) == {a, b, c} and plan.peak == 4032 + 4032 + 40000


def test_default_pipeline_order_is_visible_and_overridable():
    assert passes.DEFAULT[0] is passes.simplify
    g, _ = gelu_layer()
    after, st = passes.run(g, [passes.prune])
    assert [s.name for s in st] == ["prune"]


def test_fuse_groups_a_layer_backward_into_one_kernel_with_its_bias_sum():
    """u = pre-activation, g = incoming gradient: recompute y = tanh(u), dU = g * (1 - y*y),
    the bias gradient sum(dU, 0): one fused node with outputs y (for dW), dU and the sum."""
    u, g = val(8, 4), val(8, 4)
    n1, y = node("tanh", [u], (8, 4), Phase.RECOMPUTE)
    n2, yy = node("mul", [y, y], (8, 4), Phase.BACKWARD)
    n3, d = node("sub", [const(1.0), yy], (8, 4), Phase.BACKWARD)
    n4, du = node("mul", [g, d], (8, 4), Phase.BACKWARD)
    n5, db = node("sum", [du], (4,), Phase.BACKWARD, axis=(0,), keepdims=False)
    n6, dw = node("matmul", [val(4, 8), du], (4, 4), Phase.BACKWARD)
    n7, yt = node("transpose", [y], (4, 8), Phase.BACKWARD, axes=(1, 0))
    graph = Graph([u, g], [n1, n2, n3, n4, n5, n6, n7], [db, dw, yt])
    after, st = passes.fuse(graph)
    fused = [n for n in after.nodes if n.op == "fused"]
    assert len(fused) == 1
    assert set(fused[0].outputs) == {y, du, db}
    assert [n.op for n in after.nodes] == ["fused", "transpose", "matmul"]  # views move up
    args = rand(8, 4), rand(8, 4), rand(4, 8)
    graph.inputs.append(n6.inputs[0])
    same_results(graph, Graph(graph.inputs, after.nodes, after.outputs), *args)


def test_fuse_moves_views_up_so_that_a_chain_joins_the_recomputation_it_reads():
    """A layer's incoming gradient, made by a matmul and reshaped right before the elementwise
    chain that reads it: the reshape moves up next to the matmul, and the chain joins the group
    that recomputes tanh(u), started before the reshape was (one kernel, not two)."""
    a, w, u = val(2, 8), val(8, 16), val(8, 4)
    n1, m = node("matmul", [a, w], (2, 16), Phase.BACKWARD)
    n2, t = node("tanh", [u], (8, 4), Phase.RECOMPUTE)
    n3, g = node("reshape", [m], (8, 4), Phase.BACKWARD, shape=(8, 4))
    n4, du = node("mul", [g, t], (8, 4), Phase.BACKWARD)
    graph = Graph([a, w, u], [n1, n2, n3, n4], [du, t])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["matmul", "reshape", "fused"]
    assert [n.op for n in after.nodes[2].attrs["body"].nodes] == ["tanh", "mul"]
    same_results(graph, after, rand(2, 8), rand(8, 16), rand(8, 4))


def test_fuse_keeps_recomputation_out_of_forward_groups():
    x = val(8, 4)
    n1, u = node("exp", [x], (8, 4))
    n2, y = node("tanh", [u], (8, 4), Phase.RECOMPUTE)  # must not run in forward, next to exp
    graph = Graph([x], [n1, n2], [y])
    after, _ = passes.fuse(graph)
    assert [len(n.attrs["body"].nodes) for n in after.nodes] == [1, 1]


def test_fuse_keeps_recomputation_out_of_segments_rebuilt_from_a_checkpoint():
    """Under a budget, u is rebuilt long before backward reads it; tanh(u), recomputed right
    where backward needs it, must not move up into u's group past the matmul."""
    x, w = val(8, 4), val(4, 4)
    n1, u = node("exp", [x], (8, 4), Phase.REBUILD)
    n2, m = node("matmul", [u, w], (8, 4), Phase.REBUILD)
    n3, y = node("tanh", [u], (8, 4), Phase.RECOMPUTE)
    graph = Graph([x, w], [n1, n2, n3], [m, y])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["fused", "matmul", "fused"]


def test_fuse_seals_a_rebuild_group_at_the_next_node_that_cannot_fuse():
    """A later rebuild of the same segment reads the checkpoint u held by an earlier one;
    joining u's group past the matmul would run the later rebuild early and hold its result."""
    x, w = val(8, 4), val(4, 4)
    n1, u = node("exp", [x], (8, 4), Phase.REBUILD)
    n2, m = node("matmul", [u, w], (8, 4), Phase.REBUILD)
    n3, y = node("tanh", [u], (8, 4), Phase.REBUILD)
    after, _ = passes.fuse(Graph([x, w], [n1, n2, n3], [m, y]))
    assert [n.op for n in after.nodes] == ["fused", "matmul", "fused"]


def test_fuse_never_moves_a_node_before_an_input_it_reads():
    """b = exp(a) starts a group; m = matmul(a, a) follows; c = b * m may not join the group,
    which runs where exp ran, before m exists."""
    a = val(4, 4)
    n1, b = node("exp", [a], (4, 4))
    n2, m = node("matmul", [a, a], (4, 4))
    n3, c = node("mul", [b, m], (4, 4))
    after, _ = passes.fuse(Graph([a], [n1, n2, n3], [c]))
    assert [n.op for n in after.nodes] == ["fused", "matmul", "fused"]


def test_simplify_transpose_of_a_product_swaps_the_operands():
    a, b = val(4, 3), val(3, 5)
    n1, m = node("matmul", [a, b], (4, 5))
    n2, t = node("transpose", [m], (5, 4), axes=(1, 0))
    g = Graph([a, b], [n1, n2], [t])
    after, _ = passes.prune(passes.simplify(g)[0])
    assert [n.op for n in after.nodes] == ["transpose", "transpose", "matmul"]
    same_results(g, after, rand(4, 3), rand(3, 5))
    kept, _ = passes.simplify(Graph([a, b], [n1, n2], [t, m]))  # the product is needed too
    assert [n.op for n in kept.nodes] == ["matmul", "transpose"]


def test_memory_plan_packs_mixed_sizes_to_the_liveness_peak():
    """Placing in order of allocation would put the big buffer above the first small one."""
    x = val(100)
    n1, a = node("exp", [x], (100,))  # 400 bytes (448 aligned), dies at n2
    n2, b = node("sin", [a], (100,))  # lives to the end
    n3, c = node("broadcast_to", [x], (10, 100), shape=(10, 100))  # a view: no buffer
    n4, d = node("exp", [c], (10, 100))  # 4000 bytes: fits where a was only if a were bigger
    n5, e = node("mul", [d, b], (10, 100))
    plan = check_plan(Graph([x], [n1, n2, n3, n4, n5], [e]))
    assert plan.reuse == {b: a, e: d}
    assert plan.arena == 448 + 4032  # b and d live at once; nothing is wasted


def test_verify_rejects_graphs_that_break_the_rules():
    a, b = val(1000), val(4, 3)
    bad_matmul, _ = node("matmul", [a, a], ())  # 1-D inputs, a 0-d result
    with pytest.raises(GraphError, match="matmul.*shape rule rejects"):
        Graph([a], [bad_matmul], []).verify()
    wrong_type, _ = node("exp", [b], (3, 4))
    with pytest.raises(GraphError, match=r"gives f32\[3,4\]; its shape rule says f32\[4,3\]"):
        Graph([b], [wrong_type], []).verify()
    n1, c = node("exp", [b], (4, 3))
    n2, d = node("neg", [c], (4, 3))
    with pytest.raises(GraphError, match="reads .* before it is defined"):
        Graph([b], [n2, n1], [d]).verify()
    with pytest.raises(GraphError, match="already defined"):
        Graph([b], [n1, n1], [c]).verify()
    with pytest.raises(GraphError, match="never defined"):
        Graph([b], [n1], [d]).verify()
    assert Graph([b], [n1, n2], [d]).verify() is not None


def test_the_suite_verifies_every_pass():
    """conftest turns on passes.VERIFY: every pipeline run in the tests re-checks its graphs."""
    assert passes.VERIFY
    x = val(4, 3)
    n1, y = node("exp", [x], (4, 3))
    broken = lambda g: (Graph(g.inputs, g.nodes, [val(4, 3)]), None)  # an undefined output
    with pytest.raises(GraphError, match="never defined"):
        passes.run(Graph([x], [n1], [y]), [broken])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gradients_of_adjacent_slices_are_one_concatenation(backend):
    """q, k, v = qkv[:, :, 0..2] and a split along axis 1: their gradients are concatenated,
    not scattered into zeros and summed; the gradient is eager's (which scatters)."""
    import tracegrad as tg

    def step(x):
        q, k, v = (x[:, :, i] for i in range(3))
        head, tail = x[:, :1, :], x[:, 1:, :]
        y = (q * k + v**2).sum() + (head * head).sum() + tg.exp(tail).sum() + x[-1, :, 1].sum()
        y.backward()
        return y

    x0 = np.random.default_rng(0).standard_normal((4, 3, 3))
    eager, traced = tg.tensor(x0, requires_grad=True), tg.tensor(x0, requires_grad=True)
    step(eager)
    compiled = tg.trace(step, backend=backend)
    compiled(traced)
    np.testing.assert_allclose(traced.grad.numpy(), eager.grad.numpy(), rtol=1e-12)
    nodes = compiled.latest.graph.nodes
    ops = [n.op for n in nodes]
    assert ops.count("scatter_add") == 0  # x[-1, :, 1] narrows 2 axes, but its gradient is const
    assert sorted(len(n.inputs) for n in nodes if n.op == "concatenate") == [2, 3]  # one copy each


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gradients_of_a_chunked_tensor_summed_out_of_order_are_one_concatenation(backend):
    """An LSTM's gates, x.chunk(4, -1) (slices x[..., i:j]), used in an order that sums their
    gradients as no two adjacent ones meet: one concatenation of the four, as eager's sum."""
    import tracegrad as tg

    def step(x):
        i, f, g, o = x.chunk(4, -1)
        y = (tg.tanh(g) * tg.sigmoid(i) + f * o).sum()
        y.backward()
        return y

    x0 = np.random.default_rng(0).standard_normal((3, 8))
    eager, traced = tg.tensor(x0, requires_grad=True), tg.tensor(x0, requires_grad=True)
    step(eager)
    compiled = tg.trace(step, backend=backend)
    compiled(traced)
    np.testing.assert_allclose(traced.grad.numpy(), eager.grad.numpy(), rtol=1e-12)
    ops = [n.op for n in compiled.latest.graph.nodes]
    assert ops.count("scatter_add") == 0 and ops.count("concatenate") == 1


def test_fuse_makes_a_log_sum_exp_one_kernel_that_sweeps_each_row_again():
    """A log-sum-exp: the row maxima (8, 1), guarded, are read by the (8, 4) exps, whose row
    sums are read again by log(t) + s. The row reductions are read inside the group (the kernel
    sweeps each row once per stage) and the (8, 1) result is stored once a row: one kernel."""
    from tracegrad.compiler.kernels.fused import analyze

    x = val(8, 4)
    n1, m = node("max", [x], (8, 1), axis=(1,), keepdims=True)
    n2, a = node("abs", [m], (8, 1))
    n3, ok = node("less", [a, const(np.inf)], (8, 1), dtype=np.bool_)
    n4, s = node("where", [ok, m, const(0.0)], (8, 1))
    n5, d = node("sub", [x, s], (8, 4))
    n6, e = node("exp", [d], (8, 4))
    n7, t = node("sum", [e], (8, 1), axis=(1,), keepdims=True)
    n8, lt = node("log", [t], (8, 1))
    n9, y = node("add", [lt, s], (8, 1))
    graph = Graph([x], [n1, n2, n3, n4, n5, n6, n7, n8, n9], [y, e])
    after, _ = passes.fuse(graph)
    groups = [[m.op for m in n.attrs["body"].nodes] for n in after.nodes if n.op == "fused"]
    assert groups == [["max", "abs", "less", "where", "sub", "exp", "sum", "log", "add"]]
    body = after.nodes[0].attrs["body"]
    analyze(body.inputs, body.nodes, body.outputs)  # raises for a group it cannot compile
    same_results(graph, after, rand(8, 4))


def test_fuse_keeps_a_column_reduction_read_again_out_of_its_group():
    """Only a row's reduction may be read again inside its group: a column sum (1, 4) read by
    the (8, 4) values after it ends its group."""
    x = val(8, 4)
    n1, e = node("exp", [x], (8, 4))
    n2, t = node("sum", [e], (1, 4), axis=(0,), keepdims=True)
    n3, y = node("div", [e, t], (8, 4))
    graph = Graph([x], [n1, n2, n3], [y])
    after, _ = passes.fuse(graph)
    groups = [[m.op for m in n.attrs["body"].nodes] for n in after.nodes if n.op == "fused"]
    assert groups == [["exp", "sum"], ["div"]]
    same_results(graph, after, rand(8, 4))


def test_fuse_counts_a_graph_output_as_read_outside_the_group():
    """s (1, 4) is a result of the step itself: the (8, 4) product that reads it must not widen
    its group, or the kernel would have a narrow result (a column: only a row's number can be
    stored once a row). s (8, 1) can: one kernel."""
    from tracegrad.compiler.kernels.fused import analyze

    for shape, expected in (((1, 4), [["exp"], ["mul"]]), ((8, 1), [["exp", "mul"]])):
        x, c = val(8, 4), val(*shape)
        n1, s = node("exp", [c], shape)
        n2, e = node("mul", [x, s], (8, 4))
        graph = Graph([x, c], [n1, n2], [e, s])
        after, _ = passes.fuse(graph)
        assert [[m.op for m in n.attrs["body"].nodes] for n in after.nodes] == expected
        for n in after.nodes:
            body = n.attrs["body"]
            analyze(body.inputs, body.nodes, body.outputs)
        same_results(graph, after, rand(8, 4), rand(*shape))


def test_fuse_folds_reductions_over_leading_or_trailing_axes_of_3d_values():
    """Layer norm's statistics (last axis of (N, T, D)) and bias gradients (first two axes)
    fold into the kernel that computes their input; a middle axis does not (no matrix view)."""
    x = val(2, 3, 4)
    n1, e = node("exp", [x], (2, 3, 4))
    n2, last = node("sum", [e], (2, 3, 1), axis=(2,), keepdims=True)
    n3, first = node("sum", [e], (4,), axis=(0, 1), keepdims=False)
    n4, middle = node("sum", [e], (2, 4), axis=(1,), keepdims=False)
    graph = Graph([x], [n1, n2, n3, n4], [last, first, middle])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["fused", "sum"]
    assert set(after.nodes[0].outputs) == {e, last, first}
    same_results(graph, Graph(graph.inputs, after.nodes, after.outputs), rand(2, 3, 4))


def test_fuse_folds_a_channels_statistics_and_makes_a_lone_one_a_kernel():
    """Sums over (0, 2, 3) of (N, C, H, W), a batch norm's statistics, join the group of what
    they sum; alone (the sum of a convolution's output), one is a kernel of its own: NumPy's
    reduce over those axes is slower than a kernel's sweep; beside a group that reads what it
    sums (its sibling), it joins it. A sum over the middle axis alone stays NumPy's."""
    x = val(2, 3, 4, 5)
    n1, alone = node("sum", [x], (1, 3, 1, 1), axis=(0, 2, 3), keepdims=True)
    n2, e = node("exp", [x], (2, 3, 4, 5))
    n3, stats = node("sum", [e], (3,), axis=(0, 2, 3), keepdims=False)
    n4, middle = node("sum", [x], (2, 4, 5), axis=(1,), keepdims=False)
    graph = Graph([x], [n1, n2, n3, n4], [alone, e, stats, middle])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["fused", "sum"]
    assert set(after.nodes[0].outputs) == {alone, e, stats}
    same_results(graph, Graph(graph.inputs, after.nodes, after.outputs), rand(2, 3, 4, 5))

    y = val(2, 3, 4, 5)
    n5, lone = node("sum", [y], (1, 3, 1, 1), axis=(0, 2, 3), keepdims=True)
    after, _ = passes.fuse(Graph([y], [n5], [lone]))
    assert [n.op for n in after.nodes] == ["fused"] and after.nodes[0].outputs == [lone]


def test_fuse_makes_a_lone_sum_over_leading_axes_a_kernel():
    """A bias's gradient, the sum of a matrix product's output over its rows (or over N and T
    of (N, T, D)), is a kernel of its own: NumPy's reduce over leading axes is about three times
    slower than a kernel adding whole rows. A lone sum over the last axis stays NumPy's."""
    g, h = val(6, 4), val(2, 3, 4)
    n1, bias = node("sum", [g], (4,), axis=(0,), keepdims=False)
    n2, kept = node("sum", [h], (1, 1, 4), axis=(0, 1), keepdims=True)
    n3, rows = node("sum", [g], (6,), axis=(1,), keepdims=False)
    graph = Graph([g, h], [n1, n2, n3], [bias, kept, rows])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["fused", "fused", "sum"]
    assert [n.outputs for n in after.nodes[:2]] == [[bias], [kept]]
    same_results(graph, Graph(graph.inputs, after.nodes, after.outputs), rand(6, 4), rand(2, 3, 4))


def test_fuse_merges_sibling_groups_that_read_one_large_value():
    """A recomputed GELU and its gradient's chain both read the pre-activation u: one kernel
    reads it once, where the recomputation ran (the incoming gradient g already existed there),
    computing the GELU's sigmoid once. A chain whose input is made after the earlier group
    began stays apart, as do optimizer updates (each parameter's its own kernel), even of one
    parameter w read by both."""
    u, g, w, s = val(8, 4), val(8, 4), val(4, 4), val()
    n1, y = node("gelu_tanh", [u], (8, 4), Phase.RECOMPUTE)
    n2, m = node("matmul", [y, w], (8, 4), Phase.BACKWARD)
    n3, d = node("gelu_tanh_slope", [u], (8, 4), Phase.BACKWARD)
    n4, du = node("mul", [g, d], (8, 4), Phase.BACKWARD)
    n5, b = node("exp", [u], (8, 4), Phase.BACKWARD)
    n6, c = node("mul", [b, m], (8, 4), Phase.BACKWARD)  # its chain reads m, made after n1
    n7, e = node("mul", [w, s], (4, 4), Phase.UPDATE)
    n8, f = node("add", [w, s], (4, 4), Phase.UPDATE)
    graph = Graph([u, g, w, s], [n1, n2, n3, n4, n5, n6, n7, n8], [m, du, c, e, f])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["fused", "matmul", "fused", "fused", "fused"]
    assert [m.op for m in after.nodes[0].attrs["body"].nodes] == ["gelu_tanh", "gelu_tanh_slope",
                                                                   "mul"]  # fmt: skip
    same_results(graph, after, rand(8, 4), rand(8, 4), rand(4, 4), rand())


def test_an_adamw_update_is_one_kernel_per_parameter(monkeypatch):
    """AdamW computes its bias corrections (scalars) between its array ops; the schedule runs
    them first, so each parameter's update fuses into one kernel instead of four."""
    import tracegrad as tg
    from tracegrad import optim

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    w = tg.tensor(np.ones((8, 4), np.float32), requires_grad=True)
    b = tg.tensor(np.ones(4, np.float32), requires_grad=True)
    opt = optim.AdamW([w, b], lr=0.1)

    @tg.trace(backend="numba")
    def step(x):
        loss = tg.tanh(x @ w + b).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step(tg.tensor(np.ones((2, 8), np.float32)))
    updates = [n for n in step.latest.graph.nodes if n.phase == Phase.UPDATE and n.op == "fused"]
    for shape in ((8, 4), (4,)):  # the bias corrections are a group's vector, fused apart
        assert sum(any(v.shape == shape for v in n.outputs) for n in updates) == 1


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_each_parameters_update_runs_when_its_gradient_exists(optimizer):
    """Updates read scalars they share (a learning rate cast once for all parameters): that
    must not join them into one piece that waits for every gradient, which keeps them all alive."""
    import tracegrad as tg
    from tracegrad import nn, optim

    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = getattr(optim, optimizer)(model.parameters(), lr=0.1)

    @tg.trace(backend="numpy")
    def step(x):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step(tg.tensor(np.ones((3, 4), np.float32)))
    nodes = step.latest.graph.nodes
    phases = [n.phase for n in nodes if any(v.ndim for v in n.outputs)]
    first_update = phases.index(Phase.UPDATE)
    last_backward = len(phases) - 1 - phases[::-1].index(Phase.BACKWARD)
    assert first_update < last_backward


def test_schedule_keeps_two_step_calls_updates_of_one_parameter_apart():
    """A parameter updated by two `step()` calls (p1 = p - g(p), p2 = p1 - g(p1)): the second
    update reads the first's result, yet the two are not one piece, which would wait for g(p1)
    before p1 exists and leave both unscheduled."""
    p, x = val(3), val(3)
    n1, g1 = node("mul", [p, x], (3,), Phase.BACKWARD)
    n2, p1 = node("sub", [p, g1], (3,), Phase.UPDATE)
    n3, g2 = node("mul", [p1, x], (3,), Phase.BACKWARD)
    n4, p2 = node("sub", [p1, g2], (3,), Phase.UPDATE)
    n2.update, n4.update = 0, 1
    g = Graph([p, x], [n1, n2, n3, n4], [p2])
    after, _ = passes.schedule(g)
    assert after.nodes == g.nodes
    same_results(g, after, rand(3), rand(3))


def test_simplify_reads_through_a_broadcast_an_elementwise_op_would_make_itself():
    x, y = val(5, 1), val(5, 4)
    n1, a = node("broadcast_to", [x], (5, 4), shape=(5, 4))
    n2, b = node("mul", [a, y], (5, 4))
    n3, c = node("exp", [a], (5, 4))  # alone it needs the broadcast: its result is (5, 4)
    n4, d = node("add", [b, c], (5, 4))
    g = Graph([x, y], [n1, n2, n3, n4], [d])
    after, _ = passes.simplify(g)
    mul = next(n for n in after.nodes if n.op == "mul")
    exp = next(n for n in after.nodes if n.op == "exp")
    assert mul.inputs[0] is x and exp.inputs[0] is a
    same_results(g, after, rand(5, 1), rand(5, 4))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("labels", [[1, 6, 0, 6], [-1, 2, -7, 3]])
def test_a_picked_entry_per_row_has_an_elementwise_gradient(backend, labels):
    """x[arange(N), cols]'s gradient is a where over the (N, C) domain, not a scatter into
    zeros: no (N, C) array is filled; negative columns count from the end, as eager's."""
    import tracegrad as tg

    def step(x, cols):
        y = (x[np.arange(4), cols] * tg.tensor([1.0, 2.0, 3.0, 4.0])).sum()
        y.backward()
        return y

    x0 = np.random.default_rng(0).standard_normal((4, 7))
    cols = np.array(labels)
    eager, traced = tg.tensor(x0, requires_grad=True), tg.tensor(x0, requires_grad=True)
    step(eager, tg.tensor(cols))
    compiled = tg.trace(step, backend=backend)
    compiled(traced, tg.tensor(cols))
    np.testing.assert_array_equal(traced.grad.numpy(), eager.grad.numpy())
    assert [n.op for n in compiled.latest.graph.nodes].count("scatter_add") == 0


def test_a_scattered_gradient_lives_in_the_arena():
    """An embedding's gradient (a scatter of rows) is placed in the arena like the others
    (not a fresh allocation each step)."""
    import tracegrad as tg

    table = tg.nn.Embedding(50, 8)
    opt = tg.optim.SGD(table.parameters(), lr=0.1)

    def step(idx):
        loss = (table(idx) ** 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    compiled = tg.trace(step, backend="numpy")
    compiled(tg.tensor(np.array([[1, 2, 2], [49, 0, 1]])))
    plan = compiled.latest
    scatter = next(n for n in plan.graph.nodes if n.op == "scatter_add")
    assert scatter.outputs[0] in plan.memory.offsets


def test_fuse_computes_an_expansion_again_in_each_kernel_that_reads_it():
    """A one-hot built from labels, read by a row sum and by the elementwise chain after it:
    the kernel computes it as it goes, in each sweep of a row that reads it; nothing writes
    the (N, C) one-hot."""
    labels, g, x = val(6, 1, dtype=np.int64), val(6, 1), val(6, 9)
    n1, hot = node("equal", [const(np.arange(9), np.int64), labels], (6, 9), dtype=np.bool_)
    n2, picked = node("where", [hot, g, const(0.0)], (6, 9))
    n3, total = node("sum", [picked], (6, 1), axis=(1,), keepdims=True)
    n4, scaled = node("mul", [x, total], (6, 9))
    n5, out = node("sub", [scaled, picked], (6, 9))
    graph = Graph([labels, g, x], [n1, n2, n3, n4, n5], [out])
    after, _ = passes.fuse(graph)
    fused = [n for n in after.nodes if n.op == "fused"]
    assert len(fused) == 1 and [v.shape for v in fused[0].outputs] == [(6, 9)]
    assert [n.op for n in fused[0].attrs["body"].nodes].count("where") == 2  # a copy a reader
    args = [np.array([[0], [3], [8], [1], [1], [5]]), rand(6, 1), rand(6, 9)]
    same_results(graph, after, *args)


def test_simplify_moves_elementwise_ops_of_reshaped_values_before_the_reshape():
    """`linear(x).view(-1, C)`: the bias add of the (N, T, C) view of the (N * T, C) product
    happens on the product itself (the bias broadcast along the axes the view keeps), and the
    gradient's two parts, each viewed back, add before one view. A bias that varies along a
    reshaped axis keeps the op where it was."""
    p, b, g1, g2, c = val(6, 4), val(4), val(6, 4), val(6, 4), val(3, 1)
    n1, p3 = node("reshape", [p], (2, 3, 4), shape=(2, 3, 4))
    n2, z = node("add", [p3, b], (2, 3, 4))
    n3, flat = node("reshape", [z], (6, 4), shape=(6, 4))
    n4, a3 = node("reshape", [g1], (2, 3, 4), shape=(2, 3, 4))
    n5, b3 = node("reshape", [g2], (2, 3, 4), shape=(2, 3, 4))
    n6, s = node("add", [a3, b3], (2, 3, 4))
    n7, keep = node("mul", [a3, c], (2, 3, 4))  # c varies along axis 1, which the view merges
    g = Graph([p, b, g1, g2, c], [n1, n2, n3, n4, n5, n6, n7], [flat, s, keep])
    after, _ = passes.prune(passes.simplify(g)[0])
    producer = after.producers()
    assert producer[after.outputs[0]].op == "add" and producer[after.outputs[0]].inputs == [p, b]
    assert producer[after.outputs[1]].op == "reshape"
    assert producer[producer[after.outputs[1]].inputs[0]].inputs == [g1, g2]
    assert producer[after.outputs[2]].op == "mul"
    same_results(g, after, rand(6, 4), rand(4), rand(6, 4), rand(6, 4), rand(3, 1))


def test_simplify_leaves_a_view_that_only_drops_unit_axes_where_it_is():
    """A conv bias's gradient, summed to (1, C, 1, 1) and viewed as (C,), then scaled (a clipped
    gradient): the scaling stays in the parameter's shape, so the update it feeds, all (C,),
    is one fused group rather than two split by the view."""
    g, m = val(2, 3, 4, 4), val(3)
    n1, summed = node("sum", [g], (1, 3, 1, 1), axis=(0, 2, 3), keepdims=True)
    n2, flat = node("reshape", [summed], (3,), shape=(3,))
    n3, scaled = node("mul", [flat, const(0.5)], (3,))
    n4, moment = node("add", [m, scaled], (3,))
    graph = Graph([g, m], [n1, n2, n3, n4], [moment])
    after, _ = passes.prune(passes.simplify(graph)[0])
    assert [n.op for n in after.nodes] == ["sum", "reshape", "mul", "add"]
    fused, _ = passes.fuse(after)
    bodies = [[m.op for m in n.attrs["body"].nodes] for n in fused.nodes if n.op == "fused"]
    assert ["mul", "add"] in bodies and ["mul"] not in bodies
    same_results(graph, after, rand(2, 3, 4, 4), rand(3))


def test_simplify_makes_a_product_over_a_contraction_of_one_a_broadcast_multiply():
    """(3, 1) @ (1, 4) and a batch of them are outer products: one multiply each, the same
    numbers; a contraction longer than one stays a matmul."""
    a, b, c, d, e, f = val(3, 1), val(1, 4), val(2, 3, 1), val(2, 1, 4), val(3, 2), val(2, 4)
    n1, outer = node("matmul", [a, b], (3, 4))
    n2, batched = node("matmul", [c, d], (2, 3, 4))
    n3, product = node("matmul", [e, f], (3, 4))
    graph = Graph([a, b, c, d, e, f], [n1, n2, n3], [outer, batched, product])
    after, _ = passes.simplify(graph)
    assert [n.op for n in after.nodes] == ["mul", "mul", "matmul"]
    same_results(graph, after, rand(3, 1), rand(1, 4), rand(2, 3, 1), rand(2, 1, 4), rand(3, 2),
                 rand(2, 4))  # fmt: skip


@pytest.mark.parametrize("op", ["sum", "max"])
def test_simplify_reduces_the_array_a_reshape_read_and_keeps_axes_a_reshape_restores(op):
    """sum(g.view(N, T, C), (0, 1)) as sum(g, 0) of the (N * T, C) g (a bias gradient, then a
    column sum of the kernel writing g); reshape(sum(x, 1), (N, 1)) as sum(x, 1, keepdims):
    a row reduction its kernel may read again."""
    g, x = val(6, 4), val(5, 7)
    n1, g3 = node("reshape", [g], (2, 3, 4), shape=(2, 3, 4))
    n2, bias = node(op, [g3], (4,), axis=(0, 1), keepdims=False)
    n3, rows = node(op, [x], (5,), axis=(1,), keepdims=False)
    n4, kept = node("reshape", [rows], (5, 1), shape=(5, 1))
    n5, y = node("sub", [x, kept], (5, 7))
    graph = Graph([g, x], [n1, n2, n3, n4, n5], [bias, y])
    after, _ = passes.prune(passes.simplify(graph)[0])
    reductions = [n for n in after.nodes if n.op == op]
    assert [(n.inputs[0], n.attrs["axis"], n.attrs["keepdims"]) for n in reductions] == [
        (g, (0,), False), (x, (1,), True)]  # fmt: skip
    assert "reshape" not in [n.op for n in after.nodes]
    same_results(graph, after, rand(6, 4), rand(5, 7))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_cross_entropy_of_a_viewed_linear_layer_is_a_kernel_each_way(dtype, monkeypatch):
    """word_language_model's decoder: `linear(h).view(-1, C)`, log-softmax, NLL. Forward, the
    bias add, the row max, the exps and their sums and the log-probabilities are one kernel
    (three sweeps of each row); backward, the logits' gradient and the bias gradient (a column
    sum) one more. Traced matches eager (float64 to 1e-12)."""
    import tracegrad as tg
    from tracegrad.compiler import lowering

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    rng = np.random.default_rng(0)
    linears = [tg.nn.Linear(8, 37).double() if dtype == np.float64 else tg.nn.Linear(8, 37)
               for _ in range(2)]  # fmt: skip
    linears[1].load_state_dict(linears[0].state_dict())
    h = rng.standard_normal((5, 3, 8)).astype(dtype)
    targets = rng.integers(0, 37, 15)

    def step(linear, h, targets):
        logits = linear(tg.tensor(h)).view(-1, 37)
        loss = tg.nn.functional.nll_loss(tg.nn.functional.log_softmax(logits, dim=1), targets)
        loss.backward()
        return loss

    eager = step(linears[0], h, tg.tensor(targets))
    compiled = tg.trace(step, backend="numba")
    traced = compiled(linears[1], h, tg.tensor(targets))
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(traced.item(), eager.item(), rtol=tol)
    for a, b in zip(linears[1].parameters(), linears[0].parameters(), strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol, atol=tol)
    nodes = compiled.latest.graph.nodes
    big = [n for n in nodes if n.op == "fused" and (15, 37) in [v.shape for v in n.outputs]]
    bodies = [[m.op for m in n.attrs["body"].nodes] for n in big]
    assert len(big) == 2, bodies
    assert {"add", "max", "exp", "sum", "log"} <= set(bodies[0])
    assert any(v.shape == (37,) for v in big[1].outputs)  # the bias gradient


POOL = {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1)}


def pooled_after(op, first_array=True):
    """max_pool2d(f(x)) for f = op(x, 0.5) (or op(0.5, x)), simplified: the ops in order."""
    x, half = val(2, 3, 6, 6), const(0.5)
    inputs = [x] if op in ("tanh", "gelu") else [x, half] if first_array else [half, x]
    n1, y = node(op, inputs, (2, 3, 6, 6))
    n2, idx = node("max_pool2d_argmax", [y], (2, 3, 3, 3), dtype=np.dtype(np.int8), **POOL)
    n3, p = node("max_pool2d", [y, idx], (2, 3, 3, 3), **POOL)
    graph = Graph([x], [n1, n2, n3], [p, idx])
    after, _ = passes.simplify(graph)
    data = rand(2, 3, 6, 6)
    data[0, 0, :2, :2] = -1.0  # a window where a ReLU ties at zero
    same_results(graph, after, data)
    return [n.op for n in after.nodes], after


@pytest.mark.parametrize("op", ["maximum", "minimum", "add", "sub", "tanh"])
def test_simplify_pools_before_a_non_decreasing_elementwise_op(op):
    """The maxima of f(x) are f of the maxima of x for a non-decreasing f: f then runs over a
    quarter of the values, and the argmax still reads f(x)."""
    ops, after = pooled_after(op)
    assert ops == [op, "max_pool2d_argmax", "max_pool2d", op]
    assert after.nodes[2].inputs[0] is after.inputs[0]


@pytest.mark.parametrize("op, first_array", [("gelu", True), ("sub", False), ("mul", True)])
def test_simplify_keeps_the_pooling_after_other_elementwise_ops(op, first_array):
    """GELU dips below zero, 0.5 - x decreases, and a product's factor may be negative."""
    ops, _ = pooled_after(op, first_array)
    assert ops == [op, "max_pool2d_argmax", "max_pool2d"]


def relu_pool_backward(stride=2, mask="greater_equal", relu_first=True, zero_first=True):
    """A ReLU's (maximum(0, x)'s, or maximum(x, 0)'s) `mask`(0, x) on the gradient of a
    max-pooling of its result, and its sum per channel (a bias gradient), in float64: x
    (2, 3, 6, 6) and g, the pooled gradient, in; the masked gradient and the sum out."""
    pool = dict(POOL, stride=(stride, stride))
    windows = (2, 3, 3, 3) if stride == 2 else (2, 3, 5, 5)
    x, g, zero = val(2, 3, 6, 6, dtype=F64), val(*windows, dtype=F64), const(0.0, F64)
    n1, y = node("maximum", [zero, x] if relu_first else [x, zero], (2, 3, 6, 6), dtype=F64)
    n2, idx = node("max_pool2d_argmax", [y], windows, dtype=np.dtype(np.int8), **pool)
    n3, s = node("max_pool2d_scatter", [g, idx], (2, 3, 6, 6), Phase.BACKWARD, F64,
                 shape=x.shape, **pool)  # fmt: skip
    n4, c = node(mask, [zero, x], (2, 3, 6, 6), Phase.BACKWARD, dtype=np.dtype(bool))
    n5, dx = node("where", [c, zero, s] if zero_first else [c, s, zero], (2, 3, 6, 6),
                  Phase.BACKWARD, F64)  # fmt: skip
    n6, db = node("sum", [dx], (3,), Phase.BACKWARD, F64, axis=(0, 2, 3), keepdims=False)
    return Graph([x, g], [n1, n2, n3, n4, n5, n6], [dx, db])


def relu_pool_data(graph):
    """x with a window where the ReLU ties at zero and one whose maximum is zero; g."""
    data = rand(2, 3, 6, 6).astype(F64)
    data[0, 0, :2, :2] = -1.0
    data[1, 2, 2:4, 2:4] = 0.0
    data[1, 2, 2, 2] = -1.0
    return data, rand(*graph.inputs[1].shape).astype(F64)


@pytest.mark.parametrize("stride", [2, 1])
def test_simplify_masks_a_pooled_gradient_at_the_maxima(stride):
    """ReLU's mask on a max-pooling's gradient is taken on the pooled values (the pre-activation
    at the maxima) and scattered after: nothing of x's size is read in backward, and the bias
    gradient sums the windows' values. Overlapping windows (stride 1) add, as before."""
    graph = relu_pool_backward(stride)
    after, _ = passes.prune(passes.simplify(graph)[0])
    x = after.inputs[0]
    backward = [n for n in after.nodes if n.phase is Phase.BACKWARD]
    assert [n.op for n in backward] == ["max_pool2d", "greater_equal", "where",
                                        "max_pool2d_scatter", "sum"]  # fmt: skip
    assert [n for n in after.nodes if x in n.inputs and n.phase is Phase.BACKWARD] == backward[:1]
    assert backward[-1].inputs[0].shape == backward[2].outputs[0].shape != x.shape
    argmax = [n for n in after.nodes if n.op == "max_pool2d_argmax"]
    assert argmax[0].inputs == [x]  # the ReLU's result is not needed at all
    same_results(graph, after, *relu_pool_data(graph))


@pytest.mark.parametrize("change", [{"mask": "greater"}, {"relu_first": False},
                                    {"zero_first": False}, {"shared": True}])  # fmt: skip
def test_simplify_leaves_masks_that_would_differ_at_ties(change):
    """Left as they are: a mask of x > 0 (at a window whose maximum is 0 it would pass the
    gradient to a position the indices did not choose), a ReLU that sends ties to x, a where
    that keeps the gradient where the mask holds, a gradient another node reads too."""
    shared = change.pop("shared", False)
    graph = relu_pool_backward(**change)
    x = graph.inputs[0]
    if shared:
        extra, _ = node("exp", [graph.nodes[2].outputs[0]], (2, 3, 6, 6), Phase.BACKWARD, F64)
        graph = Graph(graph.inputs, [*graph.nodes, extra], [*graph.outputs, extra.outputs[0]])
    after, _ = passes.prune(passes.simplify(graph)[0])
    assert "max_pool2d" not in [n.op for n in after.nodes]
    assert after.nodes[1].op == "max_pool2d_argmax" and after.nodes[1].inputs[0] is not x
    same_results(graph, after, *relu_pool_data(graph))


def test_fuse_folds_a_sum_over_all_axes_into_what_it_sums():
    """A gradient norm's sum of squares: one kernel that never writes the squares."""
    g = val(6, 5)
    n1, sq = node("mul", [g, g], (6, 5), Phase.UPDATE)
    n2, total = node("sum", [sq], (), Phase.UPDATE, axis=(0, 1), keepdims=False)
    graph = Graph([g], [n1, n2], [total])
    after, _ = passes.fuse(graph)
    assert [n.op for n in after.nodes] == ["fused"] and after.nodes[0].outputs == [total]
    same_results(graph, after, rand(6, 5))


BATCH = (8, 3, 16, 16)  # more elements than cse holds as a few numbers


def channel_statistics(op="sub", phase=Phase.FORWARD, x=None):
    """A batch norm's forward on x (8, 3, 16, 16): the mean, x - mean (or `op`), the sum of its
    squares, the normalized values' ReLU. Returns x, the nodes, the result."""
    x = val(*BATCH) if x is None else x
    count, eps = const(x.size / 3), const(1e-5)
    n1, total = node("sum", [x], (1, 3, 1, 1), phase, axis=(0, 2, 3), keepdims=True)
    n2, mean = node("div", [total, count], (1, 3, 1, 1), phase)
    n3, centered = node(op, [x, mean], BATCH, phase)
    n4, square = node("mul", [centered, centered], BATCH, phase)
    n5, squares = node("sum", [square], (1, 3, 1, 1), phase, axis=(0, 2, 3), keepdims=True)
    n6, var = node("div", [squares, count], (1, 3, 1, 1), phase)
    n7, shifted = node("add", [var, eps], (1, 3, 1, 1), phase)
    n8, std = node("sqrt", [shifted], (1, 3, 1, 1), phase)
    n9, y = node("div", [centered, std], BATCH, phase)
    n10, out = node("maximum", [y, const(0.0)], BATCH, phase)
    return x, [n1, n2, n3, n4, n5, n6, n7, n8, n9, n10], out


def test_fuse_computes_a_map_again_in_a_later_kernel_instead_of_writing_it():
    """x - mean, read by the sum of its squares and, once the variance is known, by the
    normalization: the later kernel computes it again from x (which it reads instead), so the
    first kernel writes nothing as large as x; only the result is written."""
    x, nodes, out = channel_statistics()
    graph = Graph([x], nodes, [out])
    after, _ = passes.fuse(graph)
    kernels = [n for n in after.nodes if n.op == "fused"]
    written = [v for n in kernels for v in n.outputs if v.shape == x.shape]
    assert written == [out]
    bodies = [[m.op for m in n.attrs["body"].nodes] for n in kernels]
    assert sum(body.count("sub") for body in bodies) == 2, bodies
    same_results(graph, after, rand(*BATCH))


@pytest.mark.parametrize("op", ["arctan2", "hypot", "pow"])
def test_fuse_writes_a_map_of_a_transcendental_function_once(op):
    """A map that is not arithmetic costs more to compute again than to write and read back:
    the earlier kernel writes it, the later reads it."""
    x, nodes, out = channel_statistics(op)
    after, _ = passes.fuse(Graph([x], nodes, [out]))
    written = [v for n in after.nodes if n.op == "fused" for v in n.outputs]
    assert [v for v in written if v.shape == x.shape and v is not out] == [nodes[2].outputs[0]]


@pytest.mark.parametrize("reads_x", [False, True])
def test_fuse_copies_a_map_of_two_large_values_only_where_one_is_read_anyway(reads_x):
    """x - z read across a reduction: computing it again would read both x and z, one more
    large value than the later kernel reads. When that kernel reads x anyway (a batch norm's
    masked gradient, whose dx reads x), it computes x - z itself and nothing writes it."""
    x, z = val(4, 6), val(4, 6)
    n1, d = node("sub", [x, z], (4, 6))
    n2, columns = node("sum", [d], (1, 6), axis=(0,), keepdims=True)
    n3, s = node("sqrt", [columns], (1, 6))
    n4, out = node("div", [d, s], (4, 6))
    nodes = [n1, n2, n3, n4]
    if reads_x:
        n5, out = node("mul", [out, x], (4, 6))
        nodes.append(n5)
    graph = Graph([x, z], nodes, [out])
    after, _ = passes.fuse(graph)
    bodies = [[m.op for m in n.attrs["body"].nodes] for n in after.nodes if n.op == "fused"]
    assert sum(body.count("sub") for body in bodies) == 1 + reads_x, bodies
    same_results(graph, after, rand(4, 6), np.full((4, 6), -5.0, F32))  # sums > 0


def test_cse_holds_a_channels_statistics_until_backward_computes_them_again():
    """Backward's recomputation of the mean and the sum of squares (a batch norm's gradient
    recomputes its statistics) merges with forward's: a few numbers held, not a pass over the
    batch. x - mean itself, as large as x, is backward's own; so is a sum that keeps most of
    x's size, and a small value computed from a product (a recurrent net's hidden state)."""
    x, forward, out = channel_statistics()
    _, again, _ = channel_statistics(phase=Phase.BACKWARD, x=x)
    wide_f, wide = node("sum", [x], (8, 1, 16, 16), axis=(1,), keepdims=True)
    wide_b, wide_again = node("sum", [x], (8, 1, 16, 16), Phase.BACKWARD, axis=(1,), keepdims=True)
    a = val(4, 4)
    product_n, product = node("matmul", [a, a], (4, 4))
    state_f, state = node("tanh", [product], (4, 4))
    state_b, state_again = node("tanh", [product], (4, 4), Phase.BACKWARD)
    graph = Graph([x, a], forward + again + [wide_f, wide_b, product_n, state_f, state_b],
                  [out, again[-1].outputs[0], wide, wide_again, state, state_again])  # fmt: skip
    after, _ = passes.cse(graph)
    after, _ = passes.prune(after)
    kept = [n for n in after.nodes if n.phase is Phase.BACKWARD]
    assert [n.op for n in kept] == ["sub", "div", "maximum", "sum", "tanh"]
    same_results(graph, after, rand(*BATCH), rand(4, 4))


def test_simplify_takes_the_parts_of_a_concatenation_its_slices_are():
    """A gradient op's cotangents packed into one array and unpacked (batch norm's, traced as
    their parts): each slice is the part it covers, and the concatenation goes; a slice across
    two parts stays one."""
    a, b = val(2, 3), val(4)
    n1, flat = node("reshape", [a], (6,), shape=(6,))
    n2, packed = node("concatenate", [flat, b], (10,), axis=0)
    n3, first = node("getitem", [packed], (6,), template=(slice(None, 6, None),))
    n4, again = node("reshape", [first], (2, 3), shape=(2, 3))
    n5, second = node("getitem", [packed], (4,), template=(slice(6, None, None),))
    n6, across = node("getitem", [packed], (2,), template=(slice(5, 7, None),))
    graph = Graph([a, b], [n1, n2, n3, n4, n5, n6], [again, second, across])
    after, _ = passes.simplify(graph)
    after, _ = passes.prune(after)
    assert after.outputs[:2] == [a, b]
    assert [n.op for n in after.nodes] == ["reshape", "concatenate", "getitem"]
    same_results(graph, after, rand(2, 3), rand(4))


def test_simplify_gathers_few_elements_from_an_elementwise_ops_operands():
    """(x - m)[rows, cols], m a column (N, 1): the picked entries computed from x's and m's
    (m broadcast, a view), so the (N, C) difference is not computed; a gather of more than
    GATHERED_SHARE of the elements stays where it was."""
    x, m = val(16, 10), val(16, 1)
    rows, cols = const(np.arange(16), np.int64), val(16, dtype=np.dtype(np.int64))
    n1, d = node("sub", [x, m], (16, 10))
    n2, picked = node("getitem", [d, rows, cols], (16,), template=("@", "@"))
    g = Graph([x, m, cols], [n1, n2], [picked])
    after, _ = passes.prune(passes.simplify(g)[0])
    subs = [n for n in after.nodes if n.op == "sub"]
    assert len(subs) == 1 and subs[0].outputs[0].shape == (16,)
    labels = np.random.default_rng(1).integers(0, 10, 16)
    same_results(g, after, rand(16, 10), rand(16, 1), labels)
    many = const(np.arange(16).repeat(8), np.int64)
    n3, lots = node("getitem", [d, many], (128, 10), template=("@",))
    kept, _ = passes.simplify(Graph([x, m], [n1, n3], [lots]))
    assert [n.op for n in kept.nodes] == ["sub", "getitem"]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_nll_of_a_log_softmax_reads_the_scores_not_every_log_probability(backend):
    """A classifier's `nll_loss(log_softmax(scores))`, traced: the label's log-probability is
    computed from the scores (the product's result) and the row's statistics, so no (N, C)
    log-probabilities are written; loss and gradients are eager's."""
    import tracegrad as tg
    from tracegrad.nn import functional as F

    rng = np.random.default_rng(0)
    x, labels = tg.tensor(rng.standard_normal((32, 8))), tg.tensor(rng.integers(0, 50, 32))
    w0, b0 = rng.standard_normal((8, 50)), rng.standard_normal(50)

    def step(w, b):
        loss = F.nll_loss(F.log_softmax(x @ w + b, dim=1), labels)
        loss.backward()
        return loss

    eager = [tg.tensor(a, requires_grad=True) for a in (w0, b0)]
    traced = [tg.tensor(a, requires_grad=True) for a in (w0, b0)]
    want = step(*eager)
    compiled = tg.trace(step, backend=backend)
    got = compiled(*traced)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-12)
    for a, b in zip(traced, eager, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
    graph = compiled.latest.graph
    producers = graph.producers()
    gathers = [n for n in graph.nodes if n.op == "getitem" and len(n.inputs) > 1]
    assert gathers
    for n in gathers:
        made = producers.get(n.inputs[0])
        assert made is None or made.op in ("matmul", "broadcast_to"), made.op


def test_folding_log_of_zero_is_quiet_and_minus_inf():
    """T5's relative-position buckets take log(0) of a constant: folded at compile time it gave
    NumPy's RuntimeWarning, which PyTorch does not give (nor the run, where it is kept quiet)."""
    import warnings

    import tracegrad as tg

    step = tg.trace(lambda x: x + tg.log(tg.arange(3).float()).clamp(min=0).sum(), backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert step(tg.ones(1)).item() == pytest.approx(1 + np.log(2.0))

"""Fusion: connected elementwise nodes, and reductions that end them (a bias gradient summed over
the batch, a softmax's row sums) or that later members read again (a row's, `_row_reduction`),
become one `fused` node whose `body` is a small Graph. A backend compiles each body into one
kernel; the reference interpreter evaluates the body.

A node joins the groups of its producers (merging them) when everything else the merged group
reads already existed when its earliest part started, so the fused node can run where the
group's first member ran, and when both are of one family (`_families`): a recomputed value must
not move back into forward, or into a segment rebuilt long before backward reads it, where it
would be held until then; and not when it would widen a group whose narrower results are read
after it (`_narrow_results`). A map of one large value that a group writes for a later one is
computed again by the later one's kernel instead (`_maps_per_group`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.ops import shapes
from tracegrad.core.primitives import fused
from tracegrad.core.vocabulary import Kind, Phase

from .base import PassStats, clone, is_view
from .prune import prune


@dataclass
class _Group:
    start: int
    family: Phase  # see `_families`: a node joins only groups of its own
    sealed: bool = False  # a rebuilt segment's group, once a matmul (say) has run after it
    nodes: list[Node] = field(default_factory=list)
    values: set[Value] = field(default_factory=set)  # elementwise results inside the group
    reductions: set[Value] = field(default_factory=set)  # results, re-read only if in rows
    rows: dict[Value, tuple[int, ...]] = field(default_factory=dict)  # see `_row_reduction`
    reads: set[Value] = field(default_factory=set)  # what its members read (`_siblings`)


def _elementwise(n: Node) -> bool:
    return (
        n.prim.kind is Kind.ELEMENTWISE
        and n.prim.fusible
        and n.outputs[0].ndim > 0
        and not _numpy_only(n)
    )


def _numpy_only(n: Node) -> bool:
    """It reads or makes complex values, which kernels do not take (they stay NumPy's), or
    bfloat16 bits (kind V) other than by a cast from or to float32 (a kernel loads and stores
    bfloat16 arrays, and computes in float32)."""
    dtypes = {v.dtype for v in (*n.inputs, *n.outputs)}
    if any(d.kind == "c" for d in dtypes):
        return True
    cast = n.prim is P.astype and len(dtypes) == 2 and np.dtype(np.float32) in dtypes
    return any(d.kind == "V" for d in dtypes) and not cast


def _trailing_reduction(n: Node) -> bool:
    """A reduction over leading or trailing axes: read as a matrix, one axis of it,
    the shape a kernel folds as it goes (layer norm's statistics over the last axis of (N, T,
    D), a bias gradient over the first two); or over both around kept middle ones
    (`shapes.around`); or over all of them (a gradient norm's sum of squares, a loss's mean),
    which then never writes what it sums."""
    if n.prim.kind is not Kind.REDUCTION or not n.prim.fusible or not n.inputs or _numpy_only(n):
        return False
    ndim, axes = _reduced(n)
    if ndim >= 1 and len(axes) == ndim:
        return True
    block = axes == list(range(len(axes))) or axes == list(range(ndim - len(axes), ndim))
    around = shapes.around(axes, ndim) is not None
    return ndim >= 2 and 0 < len(axes) < ndim and (block or around)


def _reduced(n: Node) -> tuple[int, list[int]]:
    """A reduction's input rank and the axes it reduces, sorted and non-negative."""
    ndim = n.inputs[0].ndim
    return ndim, sorted(a % max(ndim, 1) for a in n.attrs["axis"])


def _alone_a_kernel(n: Node) -> bool:
    return _around_reduction(n) or _column_reduction(n)


def _around_reduction(n: Node) -> bool:
    """A reduction around kept axes (`shapes.around`): a batch norm's statistics of each
    channel. Its kernel reads the input once, in order; NumPy's reduce over such axes is
    several times slower (docs/kernels.md), so it is a kernel even alone."""
    if not _trailing_reduction(n):
        return False
    ndim, axes = _reduced(n)
    return shapes.around(axes, ndim) is not None


def _column_reduction(n: Node) -> bool:
    """A reduction over leading axes, the last kept (a bias's gradient, the sum of (N, T, D)
    over N and T). Its kernel adds whole rows into each thread's sums; NumPy's reduce over
    leading axes is about three times slower, so it is a kernel even alone."""
    if not _trailing_reduction(n):
        return False
    ndim, axes = _reduced(n)
    return 0 < len(axes) < ndim and axes == list(range(len(axes)))


def _row_reduction(n: Node) -> bool:
    """A reduction over the last axis only, its axes kept: later members of its group may read
    it (the kernel sweeps each row again, still in cache: a softmax's max, then exps and their
    sum, then its output), as long as the group's domain is what it reduced."""
    x = n.inputs[0] if n.inputs else None
    return (
        _trailing_reduction(n)
        and x.ndim >= 2
        and n.outputs[0].ndim == x.ndim
        and [a % x.ndim for a in n.attrs["axis"]] == [x.ndim - 1]
    )


def fuse(graph: Graph) -> tuple[Graph, PassStats]:
    before = len(graph.nodes)
    graph = _views_early(_expansions_per_reader(graph))
    groups, group_of = _grouped(graph)
    for _ in range(MAPS_ROUNDS):
        copied = _maps_per_group(graph, groups, group_of)
        if copied is None:
            break
        graph = _views_early(copied)
        groups, group_of = _grouped(graph)
    users = graph.users()
    outputs = set(graph.outputs)
    nodes: list[Node] = []
    fused = 0
    for i, n in enumerate(graph.nodes):
        group = group_of.get(n.outputs[0]) if n.outputs else None
        if group is None:
            nodes.append(n)
        elif group.start == i:
            nodes.append(_fused_node(group, users, outputs))
            fused += len(group.nodes)
    after = Graph(graph.inputs, nodes, graph.outputs)
    note = f"{fused} nodes in {len(groups)} groups"
    return after, PassStats("fuse", before, len(nodes), 0, note)


def _grouped(graph: Graph) -> tuple[dict[int, _Group], dict[Value, _Group]]:
    """The groups by their first node's index, and the group of each result in one."""
    readers = graph.users()
    for v in graph.outputs:  # the step's caller reads them too
        readers.setdefault(v, []).append(None)
    made_at = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    group_of: dict[Value, _Group] = {}
    groups: dict[int, _Group] = {}  # start index -> group
    rebuilding: list[_Group] = []  # rebuild groups not sealed yet
    families = _families(graph)
    for i, n in enumerate(graph.nodes):
        if not (_elementwise(n) or _trailing_reduction(n)):
            if not is_view(n):
                for g in rebuilding:
                    g.sealed = True
                rebuilding.clear()
            continue
        group = _join(n, families[id(n)], group_of, made_at, groups, readers)
        if group is None:
            if not (_elementwise(n) or _row_reduction(n) or _alone_a_kernel(n)):
                continue
            group = groups[i] = _Group(i, families[id(n)])
            if group.family is Phase.REBUILD:
                rebuilding.append(group)
        group.nodes.append(n)
        group.reads.update(n.inputs)
        out = n.outputs[0]
        (group.values if _elementwise(n) else group.reductions).add(out)
        if _row_reduction(n):
            group.rows[out] = n.inputs[0].shape
        group_of[out] = group
    _merge_siblings(groups, group_of, made_at, readers)
    for start, group in list(groups.items()):  # a reduction alone: nothing to fuse
        if not group.values and not any(map(_alone_a_kernel, group.nodes)):
            del groups[start]
            for v in group.reductions:
                del group_of[v]
    return groups, group_of


# Rounds of `_maps_per_group`: a map copied into a later group may make another copyable.
MAPS_ROUNDS = 3


def _maps_per_group(graph: Graph, groups: dict[int, _Group], group_of: dict[Value, _Group]
                    ) -> Graph | None:  # fmt: skip
    """The graph with each map one group writes for a later group of its family computed again
    by that group's kernel, or None if there is none. A map is an elementwise result of
    arithmetic (`Primitive.arithmetic`) on values as large as it, of which the later group reads
    at most one it did not read before, and narrower ones (a batch norm's x - mean, read by the
    sum of its squares and by the normalization after it; the ReLU-masked gradient its backward
    sums and then reads for dx, which reads x anyway): the later kernel reads at most one more
    large value, and the earlier one no longer writes the map (Inductor inlines pointwise ops
    into every reader). Only a map of a group that sums (the reason a reader of its sums runs
    in a later kernel) and that every reader outside its group may compute again: one written
    for a reader anyway would be work on top."""
    made_at = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    producer = {v: n for n in graph.nodes for v in n.outputs}
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    outputs = set(graph.outputs)
    copies: dict[int, dict[Value, Value]] = {}  # reader index -> its map -> its copy
    inserted: dict[int, list[Node]] = {}
    for v, users in graph.users().items():
        earlier = group_of.get(v)
        outside = [r for r in users if group_of.get(r.outputs[0]) is not earlier]
        if earlier is None or not earlier.reductions or not outside or v in outputs:
            continue  # only a sum's split pays for a copy (not LLVM's, ALIAS_CHECKS_MAX)
        chains = [_copyable(v, earlier, group_of.get(r.outputs[0]), producer, made_at)
                  for r in outside]  # fmt: skip
        if any(c is None for c in chains):
            continue  # a reader needs it written: a copy would be work on top
        for r, chain in zip(outside, chains, strict=True):
            i = position[id(r)]
            mine = copies.setdefault(i, {})
            for m in chain:
                if m.outputs[0] not in mine:
                    inserted.setdefault(i, []).append(clone(m, mine, r.phase))
    if not inserted:
        return None
    nodes: list[Node] = []
    for i, n in enumerate(graph.nodes):
        mine = copies.get(i, {})
        nodes += inserted.get(i, ())
        nodes.append(n.replace(inputs=[mine.get(v, v) for v in n.inputs]) if mine else n)
    return prune(Graph(graph.inputs, nodes, graph.outputs))[0]


def _copyable(v: Value, earlier: _Group, later: _Group | None, producer: dict[Value, Node],
              made_at: dict[Value, int]) -> list[Node] | None:  # fmt: skip
    """The nodes of `earlier` that compute `v`, in order, if `later` (a reader's group) may
    compute it again: a later group of the family, and `v` a map whose inputs exist before it."""
    if later is None or later.start <= earlier.start or later.family != earlier.family:
        return None
    chain = _map_chain(v, earlier, producer, made_at, later.reads)
    if chain is None or any(made_at.get(u, -1) >= later.start for u in chain[1]):
        return None
    return chain[0]


def _map_chain(v: Value, group: _Group, producer: dict[Value, Node], made_at: dict[Value, int],
               read: set[Value]) -> tuple[list[Node], set[Value]] | None:  # fmt: skip
    """The group's nodes that compute `v`, in order, and what they read from outside them, if
    `v` is a map (see `_maps_per_group`) of at most one value as large as it not in `read`."""
    chain: list[Node] = []
    leaves: set[Value] = set()
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u in group.values:
            m = producer[u]
            if not m.prim.arithmetic or len(chain) >= MAP_NODES_MAX:
                return None
            chain.append(m)
            stack += m.inputs
        elif u.const is None:
            leaves.add(u)
    if sum(u.size >= v.size and u not in read for u in leaves) > 1:
        return None
    return sorted(chain, key=lambda m: made_at[m.outputs[0]]), leaves


MAP_NODES_MAX = 8  # longest chain a later kernel computes again


def _expansions_per_reader(graph: Graph) -> Graph:
    """Each reader of an expansion gets a copy of it, made right before it. An expansion is an
    elementwise value computed only from narrower values (broadcast along some axis),
    constants and other expansions: a one-hot from labels and column numbers, a mask from
    positions. Each kernel that reads one computes it again as it goes, where one kernel
    computing it for another would write it whole (a cross-entropy's one-hot gradient is as
    large as the logits)."""
    expansion: dict[Value, Node] = {}
    for n in graph.nodes:
        out = n.outputs[0] if len(n.outputs) == 1 else None
        if (
            out is not None
            and _elementwise(n)
            and out not in graph.outputs
            and all(v.const is not None or v in expansion or v.size < out.size for v in n.inputs)
        ):
            expansion[out] = n
    readers = graph.users()
    shared = {v for v, users in readers.items() if v in expansion and len(users) > 1}
    if not shared:
        return graph
    nodes: list[Node] = []
    for n in graph.nodes:
        if any(v in shared for v in n.inputs):
            copies: dict[Value, Value] = {}
            inputs = [_copy_expansion(v, expansion, copies, nodes) for v in n.inputs]
            n = n.replace(inputs=inputs)
        nodes.append(n)
    return prune(Graph(graph.inputs, nodes, graph.outputs))[0]  # the originals no one reads


def _copy_expansion(v: Value, expansion: dict, copies: dict, nodes: list[Node]) -> Value:
    """`v` computed again (appended to `nodes`), or `v` itself if it is no expansion."""
    if v not in expansion:
        return v
    if v not in copies:
        n = expansion[v]
        for x in n.inputs:
            _copy_expansion(x, expansion, copies, nodes)
        nodes.append(clone(n, copies, n.phase))
    return copies[v]


def _views_early(graph: Graph) -> Graph:
    """Each view moved up to right after the nodes that made what it reads. A view allocates
    nothing and keeps its base alive to its own last use wherever it runs, and a group can read
    only what existed when it started: a gradient reshaped right before the elementwise chain
    that reads it had kept that chain out of the group that recomputes what it needs."""
    anchor: dict[Value, int] = {}  # value -> index of the node (not a view) it comes after
    after: dict[int, list[Node]] = {}
    for i, n in enumerate(graph.nodes):
        at = max((anchor.get(v, -1) for v in n.inputs), default=-1) if is_view(n) else i
        anchor.update((v, at) for v in n.outputs)
        if at != i:
            after.setdefault(at, []).append(n)
    nodes = after.get(-1, [])
    for i, n in enumerate(graph.nodes):
        if not is_view(n):
            nodes += [n, *after.get(i, ())]
    return Graph(graph.inputs, nodes, graph.outputs)


def _families(graph: Graph) -> dict[int, Phase]:
    """Each node's family, by the node's id: forward, a segment rebuilt from a checkpoint, or the
    rest (backward, updates, values recomputed where backward reads them). Values of the first
    two are held until backward: a node of the rest joining their groups would run, and hold its
    result, from there on. A forward node that reads gradients (a clipping's scale, an unscaling:
    the user's code between backward and the update) is of the rest: its backward has run, and
    its update may join it. A rebuild group is sealed by the next node that cannot fuse: a later
    rebuild of the same segment reads the checkpoint it holds, and joining would run that
    rebuild here, early."""
    families: dict[int, Phase] = {}
    gradients: set[Value] = set()  # results of backward, and of forward nodes reading them
    for n in graph.nodes:
        family = n.phase if n.phase in (Phase.FORWARD, Phase.REBUILD) else Phase.BACKWARD
        if n.phase is Phase.BACKWARD or (
            family is Phase.FORWARD and any(v in gradients for v in n.inputs)
        ):
            family = Phase.BACKWARD
            gradients.update(n.outputs)
        families[id(n)] = family
    return families


def _join(
    n: Node,
    family: Phase,
    group_of: dict[Value, _Group],
    made_at: dict[Value, int],
    groups: dict[int, _Group],
    readers: dict[Value, list[Node | None]],
) -> _Group | None:
    """The group `n` joins: all the groups whose elementwise results it reads, merged, if that
    is legal; else the first one of them it may join alone."""
    candidates = list(
        {
            id(g): g
            for g in (group_of.get(v) for v in n.inputs)
            if g is not None and g.family == family and not g.sealed
        }.values()
    )
    for option in ([candidates] if len(candidates) > 1 else []) + [[g] for g in candidates]:
        if (
            _legal(n, option, made_at)
            and not _narrow_results(n, option, readers)
            and _vectorizes(option, readers, n)
            and _fits_a_kernel([*(m for g in option for m in g.nodes), n])
        ):
            return _merge(option, group_of, groups)
    return None


# LLVM vectorizes a kernel's loop, whose arrays might overlap, only behind a runtime check per
# pair of arrays one of which it writes, and gives up past 128 such pairs (its
# vectorize-memory-check-threshold): the loop then runs an element at a time, several times
# slower. A group grows only while its kernel stays under that (a GRU's recomputed hidden states
# chain through every time step, a result and two reads apiece).
ALIAS_CHECKS_MAX = 128


def _vectorizes(option: list[_Group], readers: dict[Value, list[Node | None]],
                n: Node | None = None) -> bool:  # fmt: skip
    """Whether the kernel of the groups of `option` merged (with node `n`) keeps within
    ALIAS_CHECKS_MAX: with W arrays written (results read outside it, as far as known now) and
    R read (not scalars), W (W - 1) / 2 + W R pairs."""
    nodes = [m for g in option for m in g.nodes] + ([n] if n is not None else [])
    members = set(map(id, nodes))
    made = {v for m in nodes for v in m.outputs}
    reads = {v for m in nodes for v in m.inputs} - made
    written = sum(any(r is None or id(r) not in members for r in readers.get(v, ())) for v in made)
    read = sum(v.const is None and v.size > 1 for v in reads)
    return written * (written - 1) // 2 + written * read <= ALIAS_CHECKS_MAX


def _fits_a_kernel(nodes: list[Node]) -> bool:
    """Whether a kernel can loop over these nodes' domain: three canonical axes at most
    (`shapes.canonical_axes`), two where a row's reduction is read again. A group past that
    runs as NumPy calls whole, so the node that would take it there starts a group of its own
    (attention's scores masked per sample, not per head: three axes; then softmaxed by rows:
    four)."""
    made = {v: n for n in nodes for v in n.outputs}
    domain = np.broadcast_shapes(*map(_extent, nodes))
    reads = [v.shape for n in nodes for v in n.inputs if v not in made and v.const is None]
    reduced = []
    for n in nodes:
        if n.prim.kind is Kind.REDUCTION:
            offset = len(domain) - n.inputs[0].ndim
            reduced.append(tuple(a + offset for a in _reduced(n)[1]))
    reread = any(made.get(v) is not None and made[v].prim.kind is Kind.REDUCTION
                 for n in nodes for v in n.inputs)  # fmt: skip
    return len(shapes.canonical_axes(domain, reads, reduced)) <= (2 if reread else 3)


def _merge_siblings(groups: dict[int, _Group], group_of: dict, made_at: dict[Value, int],
                    node_readers: dict[Value, list[Node | None]]) -> None:  # fmt: skip
    """Each group joins the latest earlier one that reads a value as large as both their domains
    which it reads too, if they are siblings: one kernel then reads that value once (XLA's
    sibling fusion; a recomputed activation and its gradient both read the pre-activation)."""
    domains = {id(g): _domain(g) for g in groups.values()}  # merging keeps a group's domain
    readers: dict[Value, list[_Group]] = {}  # large value -> earlier groups that read it
    for start in sorted(groups):
        later = groups[start]
        domain = domains[id(later)]
        outside = _outside(later)
        large = [v for v in outside if v.shape == domain]
        alike = {id(g): g for v in large for g in readers.get(v, ()) if domains[id(g)] == domain}
        ordered = sorted(alike.values(), key=lambda g: -g.start)
        owner = next((g for g in ordered if _siblings(g, later, outside, made_at)
                      and _vectorizes([g, later], node_readers)
                      and _fits_a_kernel(g.nodes + later.nodes)), None)  # fmt: skip
        if owner is None:
            owner = later
        else:
            _merge([owner, later], group_of, groups)
        for v in large:
            readers.setdefault(v, []).append(owner)


def _outside(group: _Group) -> set[Value]:
    """What a group reads that it does not compute, constants aside."""
    return {v for v in group.reads - group.values - group.reductions if v.const is None}


def _siblings(earlier: _Group, later: _Group, outside: set[Value], made_at: dict[Value, int]
              ) -> bool:  # fmt: skip
    """Whether `later` may run inside `earlier`: both of one family (not a rebuilt segment, see
    `_families`), and all `later` reads besides its own results (`outside`) existed when
    `earlier` started.
    Never an optimizer's update: each parameter's is a group of its own, one pattern for all
    parameters of a kind, which lowering compiles once even when small (a batch norm's weight,
    read by its backward too, would tie the two together)."""
    updates = any(m.phase is Phase.UPDATE for m in earlier.nodes + later.nodes)
    return (
        not updates
        and earlier.family == later.family != Phase.REBUILD
        and all(made_at.get(v, -1) < earlier.start for v in outside)
    )


def _domain(group: _Group) -> tuple[int, ...]:
    """The shape a group's kernel loops over."""
    return np.broadcast_shapes(*map(_extent, group.nodes))


def _extent(n: Node) -> tuple[int, ...]:
    """The shape a member spans in its kernel's loops: its result's, or what a reduction reads."""
    return n.inputs[0].shape if n.prim.kind is Kind.REDUCTION else n.outputs[0].shape


def _legal(n: Node, option: list[_Group], made_at: dict[Value, int]) -> bool:
    start = min(g.start for g in option)
    values = set().union(*(g.values for g in option))
    rows = {v: shape for g in option for v, shape in g.rows.items()}
    reads = [x for g in option for m in g.nodes for x in m.inputs] + n.inputs
    if not all(x in values or x in rows or x.const is not None or made_at.get(x, -1) < start
               for x in reads):  # fmt: skip
        return False
    reread = {rows[x] for g in option for m in [*g.nodes, n] for x in m.inputs if x in rows}
    if not reread:
        return True
    shapes = [_extent(n)] + [v.shape for g in option for v in g.values]
    try:
        domain = np.broadcast_shapes(*shapes, *reread)
    except ValueError:  # rows of two shapes that do not broadcast: no one kernel's domain
        return False
    return reread == {domain}


def _narrow_results(n: Node, option: list[_Group], readers: dict[Value, list[Node | None]]) -> bool:
    """Whether joining would leave a result narrower than the merged group's domain read outside
    it (by a node, or as a graph output: reader None): a kernel writes its elementwise results
    over its whole domain, or once a row (`row_shaped`), so such a group never compiles."""
    values = [v for g in option for v in g.values]
    members = {id(m) for g in option for m in g.nodes} | {id(n)}
    try:
        domain = np.broadcast_shapes(_extent(n), *(v.shape for v in values))
    except ValueError:  # groups over domains that do not broadcast (a row's scale read by both)
        return True
    narrow = [v for v in values if v.shape != domain and not shapes.row_shaped(v.shape, domain)]
    return any(id(r) not in members for v in narrow for r in readers.get(v, ()))


def _merge(option: list[_Group], group_of: dict[Value, _Group], groups: dict) -> _Group:
    """One group; members stay in topological order, since no member of an earlier group can
    read a later one's results (it would have merged with it)."""
    first, *rest = sorted(option, key=lambda g: g.start)
    for g in rest:
        first.nodes += g.nodes
        first.values |= g.values
        first.reductions |= g.reductions
        first.reads |= g.reads
        group_of.update((v, first) for v in g.values | g.reductions)
        del groups[g.start]
    return first


def _fused_node(group: _Group, users: dict[Value, list[Node]], outputs: set[Value]) -> Node:
    members = {id(n) for n in group.nodes}
    produced = group.values | group.reductions
    inputs = list(dict.fromkeys(v for n in group.nodes for v in n.inputs if v not in produced))
    results = [
        v
        for n in group.nodes
        for v in n.outputs
        if v in outputs or any(id(u) not in members for u in users.get(v, ()))
    ]
    body = Graph(inputs, group.nodes, results)
    first = group.nodes[0]
    # the module most of its members come from: a GELU's kernel that took in the bias add
    # before it belongs to the GELU
    module = Counter(n.module for n in group.nodes).most_common(1)[0][0]
    return Node(
        fused, inputs, results, {"body": body}, first.source, first.phase, module, first.update
    )

"""Lowering: the one place a plan's route is decided. On the Numba backend every fused group
large enough to gain from a kernel, and every node of an op with a kernel of its own, is
compiled; everything else runs as NumPy calls (a fused group spliced back into its members)."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from passes.prune import prune
from tracegrad.core import ir
from tracegrad.core import primitives as P
from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import EAGER_GROUPS, EAGER_KERNELS, Kind


def needs_kernels(graph: ir.Graph, backend: str) -> bool:
    """Whether lowering `graph` for `backend` compiles anything."""
    return (backend == "numba" and not FORKED_FROM_OPENMP
            and bool(kernel_groups(graph) or native_nodes(graph)))  # fmt: skip


# A fused group over fewer elements runs as NumPy calls: its kernel would save microseconds a
# step and cost a fraction of a second to compile, which a run of a few thousand steps does not
# earn back; and a plan with only such groups never pays Numba's start-up in a new process.
KERNEL_MIN = 1 << 16

# A process forked from one whose kernels had started Numba's OpenMP threads cannot run a
# parallel kernel: GNU OpenMP is not fork-safe, and Numba terminates such a child at its first
# parallel launch. Python's `multiprocessing` forks by default on Linux (A3C workers, a Pool
# after training), so such a child runs every op as NumPy calls instead: eager ops without
# their kernels, and plans lowered for NumPy (`lower`, and `Plan.runs_here`).
FORKED_FROM_OPENMP = False


def _after_fork_in_child() -> None:
    global FORKED_FROM_OPENMP
    threads = sys.modules.get("numba.np.ufunc.parallel")
    if threads is not None and threads._is_initialized and threads._threading_layer == "omp":
        FORKED_FROM_OPENMP = True
        EAGER_KERNELS.clear()
        EAGER_GROUPS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def lower(
    graph: ir.Graph, backend: str, compile: bool = True, background: bool = False
) -> tuple[ir.Graph, dict[ir.Node, Callable]]:
    """Compile each fused body into a kernel; a body the backend cannot compile, or too small to
    gain from it (or any body, on the NumPy backend), is spliced back as its member nodes.
    `compile=False` only decides (fused kernels map to None, native ones to
    `native.Planned`): the memory-budget solver plans with it.
    `background=True` (from a thread beside a running step) compiles in child processes,
    silently."""
    if FORKED_FROM_OPENMP:
        backend = "numpy"
    groups = kernel_groups(graph) if backend == "numba" else []
    natives = native_nodes(graph) if backend == "numba" else []
    kernels: dict[ir.Node, Callable] = {}
    if groups or natives:  # one round of loading, so that new kernels compile together
        from tracegrad.compiler.kernels import compile_groups, native

        modules = native.modules(natives)
        graph, modules = _argmax_with_maxima(graph, modules)
        graph, modules, groups = _conv_prologues(graph, modules, groups)
        graph, modules, groups = _conv_epilogues(graph, modules, groups)
        bodies = [(b.inputs, b.nodes, b.outputs) for b in (n.attrs["body"] for n in groups)]
        progress = Progress() if compile and not background else None
        compiled = compile_groups(bodies, progress, compile=compile, background=background,
                                  also=dict(modules.values()))  # fmt: skip
        if progress is not None:
            progress.close()
        kernels = {n: k for n, (ok, k) in zip(groups, compiled, strict=True) if ok}
        kernels.update(
            native.launchers(modules) if compile else {n: native.planned(n) for n in modules}
        )
    nodes = []
    for n in graph.nodes:
        if n.prim.kind is not Kind.COMPOSITE or n in kernels:
            nodes.append(n)
        else:
            nodes.extend(n.attrs["body"].nodes)
    return _slices_copied(ir.Graph(graph.inputs, nodes, graph.outputs), kernels), kernels


def _argmax_with_maxima(graph: ir.Graph, modules: dict[ir.Node, Any]
                        ) -> tuple[ir.Graph, dict[ir.Node, Any]]:  # fmt: skip
    """A max-pooling's argmax and maxima of one input, both run by kernels in one phase, as one
    node whose kernel writes both (`kernels.pool`): the argmax finds each window's maximum
    anyway, where the maxima's own kernel read the whole input again. (Maxima rebuilt for
    backward stay there: made in forward they would be held until then.) `modules` (node ->
    its kernel's module) follows."""
    from tracegrad.compiler.kernels import native

    argmax = {n.outputs[0]: n for n in modules if n.prim is P.max_pool2d_argmax}
    pairs: dict[ir.Node, ir.Node] = {}
    for n in modules:
        a = argmax.get(n.inputs[1]) if n.prim is P.max_pool2d else None
        if (a is not None and a.inputs[0] is n.inputs[0] and a.attrs == n.attrs
                and a.phase is n.phase and a not in pairs):  # fmt: skip
            pairs[a] = n
    if not pairs:
        return graph, modules
    joint = {a: a.replace(outputs=[*a.outputs, m.outputs[0]]) for a, m in pairs.items()}
    maxima = set(pairs.values())
    nodes = [joint.get(n, n) for n in graph.nodes if n not in maxima]
    modules = {n: m for n, m in modules.items() if n not in pairs and n not in maxima}
    modules.update(native.modules(list(joint.values())))
    return ir.Graph(graph.inputs, nodes, graph.outputs), modules


def _conv_prologues(graph: ir.Graph, modules: dict[ir.Node, Any], groups: list[ir.Node]
                    ) -> tuple[ir.Graph, dict[ir.Node, Any], list[ir.Node]]:  # fmt: skip
    """A fused kernel's result that only convolutions read as their image (forward's, the weight
    gradient's), made by arithmetic from one image of its size and a number per channel (a batch
    or group norm's scale and shift, then a ReLU), is computed by those convolutions as they copy
    the image into their padded buffer (`kernels.conv.prologue_source`) and never written:
    forward's norm-and-activation pass goes, and so does backward's rebuilt copy of it. The fused
    kernel keeps its other results, or goes. `modules` and `groups` follow."""
    from tracegrad.compiler.kernels import native

    producer, users, kernels = graph.producers(), graph.users(), set(groups)
    taken: dict[ir.Value, ir.Graph] = {}
    for n in modules:
        x = n.inputs[0] if _takes_prologue(n, modules) else None
        if x is None or x in taken or producer.get(x) not in kernels or x in graph.outputs:
            continue
        if all(_takes_prologue(u, modules) and x not in u.inputs[1:] for u in users[x]):
            body = _prologue(producer[x].attrs["body"], x)
            if body is not None:
                taken[x] = body
    if not taken:
        return graph, modules, groups
    convs = {u: u.replace(inputs=[taken[x].inputs[0], u.inputs[1], *taken[x].inputs[1:]],
                          attrs={**u.attrs, "prologue": taken[x]})
             for x in taken for u in users[x]}  # fmt: skip
    made = native.modules(list(convs.values()))
    if len(made) < len(convs):  # a kernel that cannot take it: leave them all as they were
        return graph, modules, groups
    fused = {f: _without(f, taken) for f in {producer[x] for x in taken}}
    replaced = {**convs, **fused}  # a fused node that is left with nothing to make: None
    nodes = [m for m in (replaced.get(n, n) for n in graph.nodes) if m is not None]
    modules = {n: m for n, m in modules.items() if n not in convs}
    modules.update(made)
    groups = [m for m in (fused.get(f, f) for f in groups) if m is not None]
    return ir.Graph(graph.inputs, nodes, graph.outputs), modules, groups


def _conv_epilogues(graph: ir.Graph, modules: dict[ir.Node, Any], groups: list[ir.Node]
                    ) -> tuple[ir.Graph, dict[ir.Node, Any], list[ir.Node]]:  # fmt: skip
    """A fused kernel that is all a convolution's result is read by (forward's, or a transposed
    convolution's), and makes one result from it by elementwise ops and numbers per channel (a
    bias, then an activation), is done by the convolution instead, as it writes its results,
    in cache (`kernels.conv.epilogue_source`): the pass over the result goes. `modules` and
    `groups` follow."""
    from tracegrad.compiler.kernels import conv, native

    users, kernels = graph.users(), set(groups)
    order = {n: i for i, n in enumerate(graph.nodes)}
    producer = graph.producers()
    finished: dict[ir.Node, ir.Node] = {}  # the convolution -> its epilogue's fused node
    convs: dict[ir.Node, ir.Node] = {}  # the convolution -> itself with the epilogue
    for n in modules:
        y = n.outputs[0]
        readers = users.get(y, [])
        if (n.prim not in conv.OPS or not conv.takes_epilogue(n) or len(readers) != 1
                or readers[0] not in kernels or y in graph.outputs):  # fmt: skip
            continue
        f, body = readers[0], _epilogue(readers[0], y)
        # its numbers made before the convolution, which takes their place in the schedule
        ready = body is not None and all(order.get(producer.get(v), -1) < order[n]
                                         for v in body.inputs[1:])  # fmt: skip
        if ready and f.phase is n.phase:
            finished[n] = f
            convs[n] = n.replace(inputs=[*n.inputs, *body.inputs[1:]], outputs=f.outputs,
                                 attrs={**n.attrs, "epilogue": body})  # fmt: skip
    if not convs:
        return graph, modules, groups
    made = native.modules(list(convs.values()))
    convs = {n: c for n, c in convs.items() if c in made}
    gone = {finished[n] for n in convs}
    nodes = [convs.get(n, n) for n in graph.nodes if n not in gone]
    modules = {n: m for n, m in modules.items() if n not in convs}
    modules.update({c: made[c] for c in convs.values()})
    groups = [f for f in groups if f not in gone]
    return ir.Graph(graph.inputs, nodes, graph.outputs), modules, groups


def _epilogue(f: ir.Node, y: ir.Value) -> ir.Graph | None:
    """Fused node f's body as a graph of y (first) and the numbers per channel it reads, if it
    makes its one result, of y's size and dtype, from those by elementwise ops alone; else
    None."""
    body = f.attrs["body"]
    (z, *more), numbers = body.outputs, [v for v in body.inputs if v is not y]
    if more or z.shape != y.shape or z.dtype != y.dtype or y not in body.inputs:
        return None
    if any(n.prim.kind is not Kind.ELEMENTWISE or n.prim.scalar is None
           or n.outputs[0].dtype.name not in ("float32", "float64", "bool")
           for n in body.nodes):  # fmt: skip
        return None
    if any(v.shape == y.shape or not _per_channel(v, y) for v in numbers):
        return None
    return ir.Graph([y, *numbers], body.nodes, [z])


def _takes_prologue(n: ir.Node, modules: dict[ir.Node, Any]) -> bool:
    """Whether node n runs a convolution kernel that can read its image through a prologue."""
    from tracegrad.compiler.kernels import conv

    return n in modules and n.prim in conv.OPS and conv.takes_prologue(n)


# The scalar helpers a prologue may call besides operators: the NaN-propagating extremes (a
# ReLU, a clamp). An activation of exp or erf (SiLU, GELU) costs more in the convolution's copy
# loop than the pass it saves, and backward's rebuilt kernel computes it anyway for its slope.
PROLOGUE_HELPERS = frozenset((*P.maximum.helpers, *P.minimum.helpers))


def _prologue(body: ir.Graph, x: ir.Value) -> ir.Graph | None:
    """The part of a fused body that makes x, as a graph of the image (its one input of x's
    size) and the per-channel numbers it reads; None unless x is made by elementwise ops alone
    from such inputs."""
    cone = _needed(body, [x])
    if any(n.prim.kind is not Kind.ELEMENTWISE or n.prim.scalar is None
           or not PROLOGUE_HELPERS.issuperset(n.prim.helpers) for n in cone.nodes):  # fmt: skip
        return None
    images = [v for v in cone.inputs if v.shape == x.shape]
    numbers = [v for v in cone.inputs if v.shape != x.shape]
    if len(images) != 1 or any(not _per_channel(v, x) for v in (*images, *numbers)):
        return None
    return ir.Graph([*images, *numbers], cone.nodes, [x])


def _per_channel(v: ir.Value, x: ir.Value) -> bool:
    """Whether v, of x's dtype, is x's size or broadcasts to it as one number per channel of the
    image (N, C, H, W), or one for all."""
    if v.dtype != x.dtype or v.ndim > 4:
        return False
    shape = (1,) * (4 - v.ndim) + v.shape
    return v.shape == x.shape or (shape[0] == shape[2] == shape[3] == 1
                                  and shape[1] in (1, x.shape[1]))  # fmt: skip


def _without(f: ir.Node, taken: dict[ir.Value, ir.Graph]) -> ir.Node | None:
    """Fused node f without its results in `taken` and what only they needed; None if nothing
    is left."""
    outputs = [v for v in f.outputs if v not in taken]
    if not outputs:
        return None
    body = _needed(f.attrs["body"], outputs)
    return f.replace(inputs=body.inputs, outputs=outputs, attrs={**f.attrs, "body": body})


def _needed(body: ir.Graph, outputs: list[ir.Value]) -> ir.Graph:
    """What of `body` makes `outputs` (`passes.prune`), its inputs what that reads and does not
    make, as `fuse` lists a body's."""
    kept = prune(ir.Graph(body.inputs, body.nodes, outputs))[0].nodes
    made = {v for n in kept for v in n.outputs}
    inputs = dict.fromkeys(v for n in kept for v in n.inputs if v not in made)
    return ir.Graph(list(inputs), kept, outputs)


def _slices_copied(graph: ir.Graph, kernels: dict[ir.Node, Any]) -> ir.Graph:
    """Each strided slice that kernels read (a concatenation's gradient split along channels,
    as a U-Net's skip connections make it; a chunk of features) copied once, by one NumPy call
    into the arena, right after the slice: the fused kernels and most of the others take
    C-contiguous arrays and would each copy it for themselves, at every call, into fresh pages
    (docs/kernels.md, "Strided slices"). Products and attention read a slice where it lies.
    Slices under KERNEL_MIN elements stay: a recurrent net's gates, chunks of a small step's
    product, cost a statement each copied apart, more than the copy a fused kernel's launcher
    makes of them in its call (`ravel`). `kernels` is updated for the rewritten nodes."""
    readers = {n for n in graph.nodes if n in kernels and _needs_c_order(n)}
    slices = {v for n in readers for v in n.inputs if v.const is None}
    producer = graph.producers()
    large = [v for v in slices if v.size >= KERNEL_MIN and v in producer]
    copies = {v: ir.Value(v.shape, v.dtype) for v in large if _strided_slice(producer[v])}
    if not copies:
        return graph
    nodes = []
    for n in graph.nodes:
        if n in readers and not copies.keys().isdisjoint(n.inputs):
            new = n.replace(inputs=[copies.get(v, v) for v in n.inputs])
            kernels[new] = kernels.pop(n)
            n = new
        nodes.append(n)
        for v in n.outputs:
            if v in copies:
                nodes.append(n.replace(prim=P.positive, inputs=[v], outputs=[copies[v]],
                                       attrs={}))  # fmt: skip
    return ir.Graph(graph.inputs, nodes, graph.outputs)


def _needs_c_order(n: ir.Node) -> bool:
    """Whether node `n`'s kernel takes its arrays C-contiguous (all but the generators that
    say they read strided operands: BLAS's rows and columns)."""
    from tracegrad.compiler.kernels.native import GENERATORS

    return not getattr(GENERATORS.get(n.prim), "STRIDED", False)


def _strided_slice(n: ir.Node) -> bool:
    """Whether `n` is a basic slice of one array that is not C-contiguous even where that
    array is (decided on a stand-in of the array's shape and strides, no memory behind it), of
    a numeric dtype (`positive` copies it)."""
    if n.prim is not P.getitem or len(n.inputs) != 1 or n.outputs[0].dtype.kind not in "fiuc":
        return False
    x = n.inputs[0]
    strides = [x.dtype.itemsize] * x.ndim
    for k in range(x.ndim - 2, -1, -1):
        strides[k] = strides[k + 1] * max(x.shape[k + 1], 1)
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, x.dtype), x.shape, strides)
    return not stand_in[shapes.build_index(n.attrs["template"], ())].flags.c_contiguous


# A small group still gains from a kernel when its pattern repeats: the kernel is compiled once
# for all the groups of one pattern (kernels are cached by structure, not by size), and each of
# them then runs as one launch instead of one NumPy call per member, a few microseconds of
# Python apiece (an optimizer's update of each small parameter, an RNN cell's gate math at each
# time step). Worth it when the pattern's groups hold REPEATED_MIN members in all: half a
# millisecond of calls a step, which pays a kernel's compiling back within a thousand steps.
REPEATED_MIN = 96
REPEATED_MEMBERS = 3  # a group of fewer members saves less than a kernel launch costs
SMALL_WORK = 1 << 14  # elements times ops: a small group's kernel's least work (`_worth_a_launch`)


def kernel_groups(graph: ir.Graph) -> list[ir.Node]:
    """The fused nodes large enough to gain from a kernel, or repeated often enough; and, in a
    plan that runs kernels anyway, the small ones that gain from one too (`_worth_a_launch`)."""
    composites = [n for n in graph.nodes if n.prim.kind is Kind.COMPOSITE]
    members: Counter = Counter()
    for n in composites:
        body = n.attrs["body"]
        if len(body.nodes) >= REPEATED_MEMBERS:
            members[_pattern(body)] += len(body.nodes)
    around = _has_large_node(graph)
    return [n for n in composites if _elements(n.attrs["body"]) >= KERNEL_MIN
            or members.get(_pattern(n.attrs["body"]), 0) >= REPEATED_MIN
            or (around and _worth_a_launch(n.attrs["body"]))]  # fmt: skip


def _worth_a_launch(body: ir.Graph) -> bool:
    """In a plan that runs kernels anyway (Numba loaded, kernels cached on disk by structure):
    whether a small group's kernel beats its NumPy calls. Each op is a call of a microsecond or
    two and a pass of its own, the kernel one launch of about five and one pass: a few ops over
    a few thousand elements (a small MLP's bias and ReLU, their gradient with the bias's sum)
    run faster as a kernel. So does a group reducing around kept axes (a batch norm's statistics
    of each channel over (N, C, H, W)) at any size: NumPy's reduce over such axes is several
    times slower than a kernel's pass."""
    ops = len(body.nodes)
    return (ops >= 2 and _elements(body) * ops >= SMALL_WORK) or any(
        map(_reduces_around, body.nodes)
    )


def _reduces_around(n: ir.Node) -> bool:
    if n.prim.kind is not Kind.REDUCTION:
        return False
    ndim = n.inputs[0].ndim
    return shapes.around(sorted(a % ndim for a in n.attrs["axis"]), ndim) is not None


def _pattern(body: ir.Graph) -> tuple:
    """What of a fused body decides its kernel, short of the kernel generator's `Structure`
    (which loads Numba): its ops and wiring, attributes, dtypes, and which of the canonical
    axes (`shapes.canonical_axes`) each value spans and each reduction reduces; no sizes. So an
    update of a (C,) bias, a (C, D) weight and a (C, D, 1, 1) kernel is one pattern, as it is
    one kernel. Bodies of one pattern share a kernel, or nearly all do."""
    reduces = lambda n: n.prim.kind is Kind.REDUCTION  # noqa: E731
    extents = [n.inputs[0].shape if reduces(n) else n.outputs[0].shape for n in body.nodes]
    try:
        domain = shapes.broadcast_shapes(*extents)
    except ValueError:  # not one kernel's domain: it will not compile anyway
        domain = ()
    values = (*body.inputs, *(v for n in body.nodes for v in n.outputs))
    reduced = [_reduced_axes(n, domain) for n in body.nodes if reduces(n) and domain]
    axes = shapes.canonical_axes(domain, [v.shape for v in values], reduced)
    slots = {v: k for k, v in enumerate(body.inputs)}
    nodes = []
    for n in body.nodes:
        wiring = tuple(slots.get(v, ("const", v.dtype.str, v.ndim)) for v in n.inputs)
        attrs = {k: a for k, a in n.attrs.items() if k not in ("axis", "keepdims")}
        if reduces(n) and domain:
            attrs["axis"] = shapes.spans(_reduced_shape(n, domain), domain, axes)
        nodes.append((n.op, wiring, ir.fmt_attr(attrs)))
        slots.update((v, len(slots)) for v in n.outputs)
    spans = tuple((v.dtype.str, shapes.spans(v.shape, domain, axes)) for v in values)
    return tuple(nodes), spans, tuple(slots.get(v) for v in body.outputs)


def _reduced_axes(n: ir.Node, domain: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted({a % len(domain) for a in n.attrs["axis"]}))


def _reduced_shape(n: ir.Node, domain: tuple[int, ...]) -> tuple[int, ...]:
    """A reduction's result as its kept axes of `domain` (reduced ones as 1)."""
    axes = _reduced_axes(n, domain)
    return tuple(1 if a in axes else d for a, d in enumerate(domain))


PROGRESS_AFTER = 2.0  # seconds of kernel compilation before saying so on stderr


class Progress:
    """A line on stderr once compiling a plan's kernels has taken PROGRESS_AFTER seconds
    (redrawn in place on a terminal); silent when the kernels come from the cache."""

    def __init__(self, total: int = 0, stream: Any = None):
        self.total, self.done, self.shown, self.last = total, 0, False, -1.0
        self.start = time.perf_counter()
        self.stream = stream or sys.stderr

    def step(self) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        tty = getattr(self.stream, "isatty", lambda: False)()
        due = tty or elapsed - self.last >= 1.0  # a log gets a line a second at most
        if elapsed >= PROGRESS_AFTER and self.done < self.total and due:
            end, self.last = ("\r" if tty else "\n"), elapsed
            self.stream.write(f"tracegrad: compiling kernels {self.done}/{self.total} "
                              f"({elapsed:.1f} s){end}")  # fmt: skip
            self.stream.flush()
            self.shown = True

    def close(self) -> None:
        elapsed = time.perf_counter() - self.start
        if self.shown or (elapsed >= PROGRESS_AFTER and self.total):
            self.stream.write(f"tracegrad: compiled {self.total} kernels in {elapsed:.1f} s\n")
            self.stream.flush()


def _elements(body: ir.Graph) -> int:
    return max(v.size for n in body.nodes for v in (*n.inputs, *n.outputs))


def native_nodes(graph: ir.Graph) -> list[ir.Node]:
    """The nodes of ops with a kernel of their own (a generator in `kernels.native`, such as
    max-pooling's) over at least KERNEL_MIN elements, or the generator's own `KERNEL_MIN` (an
    op whose NumPy version is a score of calls at any size). The generators import Numba: a
    graph with no node over KERNEL_MIN never loads them."""
    if not _has_large_node(graph):
        return []
    from tracegrad.compiler.kernels.native import GENERATORS

    return [n for n in graph.nodes if n.prim in GENERATORS
            and _size(n) >= getattr(GENERATORS[n.prim], "KERNEL_MIN", KERNEL_MIN)]  # fmt: skip


def _size(n: ir.Node) -> int:
    return max((v.size for v in (*n.inputs, *n.outputs)), default=0)


def _has_large_node(graph: ir.Graph) -> bool:
    """Whether a node of `graph` reaches KERNEL_MIN: only then does a plan load Numba for
    what gains from a kernel at any size."""
    return any(_size(n) >= KERNEL_MIN for n in graph.nodes)

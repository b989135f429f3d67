"""Memory planning along the schedule: liveness over buffers (a view keeps its base's buffer
alive), `del` points, elementwise results written into a dying input's buffer where that is safe,
and an offset in one arena for every buffer that is not 0-d and whose producer accepts `out=`
(the step's outputs too: the caller copies them out after the plan ran).

Why an arena: a fresh multi-megabyte NumPy array is a fresh `mmap`, and the page faults on its
first touch cost about as much as the matmul writing it (docs/architecture.md, "The arena").
The arena is allocated once and reused by every step, so its pages stay mapped."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tracegrad.core.ir import Graph, Node, Value

from .base import is_view, last_uses

ALIGN = 64  # bytes: a cache line, and the widest SIMD load


@dataclass
class MemoryPlan:
    """Which buffer each value lives in, which dying input each node writes into, where in the
    arena each buffer lives, and the bytes the step holds along the schedule (graph inputs and
    constants excluded)."""

    reuse: dict[Value, Value] = field(default_factory=dict)  # result -> input it overwrites
    dead_after: dict[int, list[Value]] = field(default_factory=dict)  # node index -> names
    offsets: dict[Value, int] = field(default_factory=dict)  # buffer owner -> arena offset
    arena: int = 0  # bytes of the arena: held between steps, reused by each
    timeline: list[int] = field(default_factory=list)  # live bytes after each node
    peak: int = 0  # arena plus the most that lives outside it at once (with an op's scratch)
    peak_at: int = 0  # the node at which the step reaches `peak`


@dataclass(eq=False)  # one buffer is one object: compared and hashed by identity
class _Buffer:
    owner: Value
    born: int  # index of the node that allocates it
    died: int | None = None  # index of the node after which nothing reads it (or copies it)
    placeable: bool = False  # its producer can write into a given array (`out=`)


def plan_memory(graph: Graph, kernels: Mapping[Node, Any] | None = None) -> MemoryPlan:
    """Liveness over buffers plus in-place reuse, then arena offsets. A node's temporaries are
    its op's (`Primitive.scratch`), or those of the kernel `kernels` runs it with, where that
    kernel says (a `scratch` attribute, bytes): a convolution's kernel holds far fewer."""
    plan = MemoryPlan()
    buffers = _liveness(graph, plan)
    for b in buffers.values():
        b.died = b.born if b.died is None else b.died  # a result nothing reads
    for v in graph.outputs:  # the caller copies results and state writes out after the plan
        if v in buffers:
            buffers[v].died = len(graph.nodes) - 1
    distinct = list(dict.fromkeys(buffers.values()))
    plan.offsets, plan.arena = _place([b for b in distinct if b.placeable])
    fresh = [b for b in distinct if b.owner not in plan.offsets]
    during, dying = [0] * (len(graph.nodes) + 1), [0] * len(graph.nodes)
    for b in fresh:  # a buffer counts from the node that makes it to the last that reads it
        during[b.born] += b.owner.nbytes
        during[b.died + 1] -= b.owner.nbytes
        dying[b.died] += b.owner.nbytes
    live = 0
    for i, n in enumerate(graph.nodes):
        live += during[i]
        if plan.arena + live + _scratch(n, kernels or {}) > plan.peak:
            plan.peak, plan.peak_at = plan.arena + live + _scratch(n, kernels or {}), i
        plan.timeline.append(plan.arena + live - dying[i])
    plan.peak = max(plan.peak, plan.arena)
    return plan


def _scratch(n: Node, kernels: Mapping[Node, Any]) -> int:
    own = getattr(kernels.get(n), "scratch", None)
    return n.prim.scratch(n.inputs, n.attrs) if own is None else own


def _liveness(graph: Graph, plan: MemoryPlan) -> dict[Value, _Buffer]:
    """The buffer each value lives in; a result may take over a dying input's buffer (noted in
    `plan.reuse`). Also the names to `del` after each node (`plan.dead_after`)."""
    last = last_uses(graph)
    external = {*graph.inputs, *(v for n in graph.nodes for v in n.inputs if v.const is not None)}
    buffers: dict[Value, _Buffer] = {}
    holders: dict[_Buffer, int] = {}  # buffer -> live values in it
    views: set[Value] = set()  # strided aliases: never a result's buffer (a square transpose
    for i, n in enumerate(graph.nodes):  # has its owner's shape, not its layout)
        dying = [v for v in dict.fromkeys(n.inputs) if last.get(v) == i and v in buffers]
        for out in n.outputs:
            if is_view(n):
                buf = buffers.get(n.inputs[0])  # None: a view of an input or a constant
                views.add(out)
            else:
                buf = _reusable(n, out, [v for v in dying if v not in views], buffers, holders)
                if buf is not None:
                    plan.reuse[out] = next(v for v in dying if buffers[v] is buf)
                    dying.remove(plan.reuse[out])  # one result per dying buffer
                    holders[buf] -= 1  # the dying input's place is taken by `out`
                else:
                    buf = _Buffer(out, i, placeable=n.prim.accepts_out and out.ndim > 0)
            if buf is not None:
                buffers[out] = buf
                holders[buf] = holders.get(buf, 0) + 1
        for v in dying:
            holders[buffers[v]] -= 1
            if holders[buffers[v]] == 0:
                buffers[v].died = i
        plan.dead_after[i] = [v for v in dict.fromkeys(n.inputs) if last.get(v) == i
                              and v not in external]  # fmt: skip
    return buffers


def _place(buffers: list[_Buffer]) -> tuple[dict[Value, int], int]:
    """Offsets by "greedy by size" (Pisarchyk and Lee, 2020; TFLite's arena planner): largest
    first, each at the lowest offset clear of every placed buffer whose life overlaps its own.
    Placing in order of allocation instead leaves gaps that a later, larger buffer cannot use
    when sizes are mixed, and the arena grows well above the liveness peak."""
    offsets: dict[Value, int] = {}
    placed: list[tuple[int, int, _Buffer]] = []  # (start, end, buffer)
    for b in sorted(buffers, key=lambda b: (-b.owner.nbytes, b.born)):
        size, start = _aligned(b.owner.nbytes), 0
        overlapping = sorted(
            (lo, hi) for lo, hi, o in placed if o.born <= b.died and b.born <= o.died
        )
        for lo, hi in overlapping:
            if start + size <= lo:
                break
            start = max(start, hi)
        placed.append((start, start + size, b))
        offsets[b.owner] = start
    return offsets, max((hi for _, hi, _ in placed), default=0)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _reusable(
    n: Node, out: Value, dying: list[Value], buffers: dict, holders: dict
) -> _Buffer | None:
    """A dying input's buffer that `n` can safely overwrite with its result `out`."""
    if out.ndim == 0 or not n.prim.overwrites_safely(n.attrs):  # 0-d results: scalars, no out=
        return None
    # not views: a value here owns its buffer or took over one of its layout; a place in the
    # arena first: taking over a buffer NumPy allocated keeps that allocation alive longer
    for v in sorted(dying, key=lambda v: not buffers[v].placeable):
        buf = buffers[v]
        if (v.shape, v.dtype) == (buf.owner.shape, buf.owner.dtype) == (out.shape, out.dtype):
            if holders[buf] == 1 and n.inputs.count(v) == 1:
                return buf
    return None

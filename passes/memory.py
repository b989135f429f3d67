"""Memory planning along the schedule: liveness over buffers (a view keeps its base's buffer
alive), `del` points, elementwise results written into a dying input's buffer where that is safe,
and an offset in one arena for every buffer that is not 0-d and whose producer accepts `out=`
(the state the step writes too: the caller copies it out after the plan ran; the results the
caller keeps get buffers of their own instead, outside the arena, so nothing copies them).

Why an arena: a fresh multi-megabyte NumPy array is a fresh `mmap`, and the page faults on its
first touch cost about as much as the matmul writing it (docs/architecture.md, "The arena").
The arena is allocated once and reused by every step, so its pages stay mapped.

The update in place: `updates` pairs the outputs that are new state values with the inputs
holding the old ones. From the commit point on (`passes/commit.py`: nothing after it can
fail) a node may write its result into such an input's buffer once nothing reads the old value
any more (a view of it counts as a read): the new value itself, or a temporary of the update
that the new value then takes over. Such buffers are the state's, not the step's: they are not
counted in the peak, and the step's end copies nothing into them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tracegrad.core import primitives as P
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.vocabulary import Kind

from .base import is_view, last_uses, unreshaped
from .commit import commit_point

ALIGN = 64  # bytes: a cache line, and the widest SIMD load


@dataclass
class MemoryPlan:
    """Which buffer each value lives in, which dying input each node writes into, where in the
    arena each buffer lives, and the bytes the step holds along the schedule (graph inputs and
    constants excluded)."""

    reuse: dict[Value, Value] = field(default_factory=dict)  # result -> input it overwrites
    dead_after: dict[int, list[Value]] = field(default_factory=dict)  # node index -> names
    offsets: dict[Value, int] = field(default_factory=dict)  # buffer owner -> arena offset,
    # and each part written straight into its place in a concatenation (`joined`) -> its place
    joined: set[Value] = field(default_factory=set)  # concatenations with nothing left to copy
    arena: int = 0  # bytes of the arena: held between steps, reused by each
    timeline: list[int] = field(default_factory=list)  # live bytes after each node
    peak: int = 0  # arena plus the most that lives outside it at once (with an op's scratch)
    peak_at: int = 0  # the node at which the step reaches `peak`
    commit: int = 0  # the commit point: index of the first node after all that may fail
    written: list[Value] = field(default_factory=list)  # inputs whose buffers the plan writes
    in_place: dict[Value, Value] = field(default_factory=dict)  # new state value -> its input
    own_buffers: set[int] = field(default_factory=set)  # results in buffers of their own


@dataclass(eq=False)  # one buffer is one object: compared and hashed by identity
class _Buffer:
    owner: Value
    born: int  # index of the node that allocates it
    died: int | None = None  # index of the node after which nothing reads it (or copies it)
    placeable: bool = False  # its producer can write into a given array (`out=`)
    state: bool = False  # a state input's own buffer, written from the commit point on


def plan_memory(
    graph: Graph,
    kernels: Mapping[Node, Any] | None = None,
    updates: Mapping[int, int] | None = None,
    results: int = 0,
) -> MemoryPlan:
    """Liveness over buffers plus in-place reuse, then arena offsets. A node's temporaries are
    its op's (`Primitive.scratch`), or those of the kernel `kernels` runs it with, where that
    kernel says (a `scratch` attribute, bytes): a convolution's kernel holds far fewer.
    `updates` maps positions of outputs that are new state values to the positions of the
    inputs they replace: those are updated in place where the commit point allows. The first
    `results` outputs are handed to the caller, who keeps them: they are made outside the
    arena (`own_buffers`), where no other plan overwrites them, rather than copied out of it."""
    plan = MemoryPlan(commit=commit_point(graph))
    donate = _donations(graph, updates or {})
    parts, plan.joined = _parts_in_place(graph, donate)
    buffers = _liveness(graph, plan, donate, parts)
    for b in buffers.values():
        b.died = b.born if b.died is None else b.died  # a result nothing reads
    for v in graph.outputs:  # the caller copies results and state writes out after the plan
        if v in buffers:
            buffers[v].died = len(graph.nodes) - 1
    wholes = {_place_in(part, parts)[0] for part in parts}
    for i, v in enumerate(graph.outputs[:results]):
        b = buffers.get(v)
        if b is not None and not b.state and b.owner not in wholes:
            b.placeable = False
            plan.own_buffers.add(i)
    distinct = [b for b in dict.fromkeys(buffers.values()) if not b.state]
    plan.written = list(dict.fromkeys(b.owner for v, b in buffers.items()
                                      if b.state and v is not b.owner))  # fmt: skip
    plan.offsets, plan.arena = _place([b for b in distinct if b.placeable])
    for part in parts:
        whole, at = _place_in(part, parts)
        plan.offsets[part] = plan.offsets[whole] + at
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


def _donations(graph: Graph, updates: Mapping[int, int]) -> dict[Value, Value]:
    """New state value -> the input it replaces, where the new value could live in the old
    one's buffer: same type, an output only once, not an input itself."""
    count: dict[Value, int] = {}
    for v in graph.outputs:
        count[v] = count.get(v, 0) + 1
    inputs = set(graph.inputs)
    pairs = {}
    for o, i in updates.items():
        new, old = graph.outputs[o], graph.inputs[i]
        if (new.shape, new.dtype) == (old.shape, old.dtype) and new.ndim and count[new] == 1:
            if new not in inputs and new.const is None:
                pairs[new] = old
    return pairs


def _parts_in_place(
    graph: Graph, donate: dict[Value, Value]
) -> tuple[dict[Value, tuple[Value, int]], set[Value]]:
    """The values a concatenation's result can hold from the start, each made in its place
    instead of copied there (an RNN's outputs over time, the gradients of a split): part ->
    (result, byte offset in it). Only where every part is one contiguous range of the result
    (the axis is the first that is not 1) made by a node that writes into a given array (or a
    reshape of such a value), of the result's dtype, in no other concatenation, and not an
    input, a constant or a state value: then the concatenation copies nothing. A second
    concatenation of the same parts in the same order (a stack of an RNN's per-step gradients
    beside their concatenation for the weights' product) is the first one's buffer. Also the
    results of the concatenations that copy nothing."""
    producer = graph.producers()

    def base(v: Value) -> Value | None:
        v = unreshaped(v, producer)
        n = producer.get(v)
        if n is None or is_view(n) or not n.prim.accepts_out or v.ndim == 0 or not v.size:
            return None
        return None if v in donate else v

    parts: dict[Value, tuple[Value, int]] = {}
    made: dict[tuple[Value, ...], Value] = {}  # the parts of a result -> that result
    joined: set[Value] = set()
    for n in graph.nodes:
        whole = n.outputs[0]
        if n.prim is not P.concatenate or len(n.inputs) < 2 or whole in donate:
            continue
        if math.prod(whole.shape[: n.attrs["axis"] % whole.ndim]) != 1:
            continue
        bases = tuple(base(v) for v in n.inputs)
        if bases in made:
            parts[whole] = (made[bases], 0)
            joined.add(whole)
            continue
        if any(b is None or b.dtype != whole.dtype or b in parts for b in bases):
            continue
        if len(set(bases)) < len(bases):
            continue
        at = 0
        for b in bases:
            parts[b], at = (whole, at), at + b.nbytes
        made[bases] = whole
        joined.add(whole)
    return parts, joined


def _place_in(part: Value, parts: dict[Value, tuple[Value, int]]) -> tuple[Value, int]:
    """The outermost result `part` is written into and its byte offset there (a concatenation's
    result may itself be a part of another)."""
    whole, at = parts[part]
    while whole in parts:
        whole, more = parts[whole]
        at += more
    return whole, at


def _output_backed(graph: Graph) -> set[Value]:
    """The outputs and the values they are views of: what the step's end reads."""
    backed = set(graph.outputs)
    for n in reversed(graph.nodes):
        if is_view(n) and any(v in backed for v in n.outputs):
            backed.add(n.inputs[0])
    return backed


def _liveness(graph: Graph, plan: MemoryPlan, donate: dict[Value, Value],
              parts: dict[Value, tuple[Value, int]]) -> dict[Value, _Buffer]:  # fmt: skip
    """The buffer each value lives in; a result may take over a dying input's buffer (noted in
    `plan.reuse`), and from the commit point on a dead state input's (`donate`); a part of a
    concatenation (`parts`) lives in the result's buffer from the first part made on. Also the
    names to `del` after each node (`plan.dead_after`)."""
    last = last_uses(graph)
    external = {*graph.inputs, *(v for n in graph.nodes for v in n.inputs if v.const is not None)}
    buffers: dict[Value, _Buffer] = {}
    holders: dict[_Buffer, int] = {}  # buffer -> live values in it
    for old in donate.values():
        buffers[old] = _Buffer(old, -1, state=True)
        holders[buffers[old]] = int(old in last)
    backed = _output_backed(graph)

    def may_take(out: Value, buf: _Buffer, i: int) -> bool:
        """A state buffer holds, from the commit point on, temporaries and its own new value,
        never another output (the step's end would read it after it was overwritten)."""
        return not buf.state or (i >= plan.commit and (out not in backed or
                                                       donate.get(out) is buf.owner))  # fmt: skip

    wholes: dict[Value, _Buffer] = {}  # a concatenation's result -> its buffer, parts first
    views: set[Value] = set()  # strided aliases: never a result's buffer (a square transpose
    for i, n in enumerate(graph.nodes):  # has its owner's shape, not its layout)
        dying = [v for v in dict.fromkeys(n.inputs) if last.get(v) == i and v in buffers]
        for out in n.outputs:
            if is_view(n):
                buf = buffers.get(n.inputs[0])  # None: a view of an input or a constant
                views.add(out)
            elif out in parts or out in plan.joined:
                whole = _place_in(out, parts)[0] if out in parts else out
                if whole not in wholes:
                    wholes[whole] = _Buffer(whole, i, placeable=True)
                buf = wholes[whole]
            else:
                candidates = [v for v in dying if v not in views and may_take(out, buffers[v], i)]
                # a free state buffer before a dying temporary's: a parameter's second update
                # in a step reads the first's result, which lives in the arena
                free = _free_state(n, out, donate, buffers, holders) and may_take(
                    out, buffers[donate[out]], i
                )
                buf = None if free else _reusable(n, out, candidates, buffers, holders)
                if buf is not None:
                    plan.reuse[out] = next(v for v in dying if buffers[v] is buf)
                    dying.remove(plan.reuse[out])  # one result per dying buffer
                    holders[buf] -= 1  # the dying input's place is taken by `out`
                elif free:
                    buf = buffers[donate[out]]  # the old value died before this node
                    plan.reuse[out] = donate[out]
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
    plan.in_place = {new: old for new, old in donate.items() if buffers.get(new) is buffers[old]}
    return buffers


def _free_state(n: Node, out: Value, donate: dict, buffers: dict, holders: dict) -> bool:
    """`out` is a new state value whose old value's buffer nothing holds any more, and `n` can
    write its result into a given array."""
    old = donate.get(out)
    return (
        old is not None
        and holders[buffers[old]] == 0
        and n.prim.accepts_out
        and (len(n.outputs) == 1 or n.prim.overwrites_safely(n.attrs))
    )


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
    if out.ndim == 0:  # 0-d results: scalars, no out=
        return None
    # not views: a value here owns its buffer or took over one of its layout; a place in the
    # arena first: taking over a buffer NumPy allocated keeps that allocation alive longer
    # a state buffer first of all: it costs the step nothing
    for v in sorted(dying, key=lambda v: (not buffers[v].state, not buffers[v].placeable)):
        buf = buffers[v]
        if (v.shape, v.dtype) == (buf.owner.shape, buf.owner.dtype) == (out.shape, out.dtype):
            result, operand = n.outputs.index(out), n.inputs.index(v)
            if n.prim.kind is Kind.COMPOSITE and not buf.state:
                # a kernel's loop that writes where it reads fails LLVM's overlap check at run
                # time and runs its scalar version (docs/benchmarks.md); a later sweep's result
                # may take the buffer (a log-softmax's, the logits')
                apart = n.prim.sweeps_apart(n.attrs, result, operand)
                safe = apart is not None and apart > 0
            else:
                safe = n.prim.overwrites_safely(n.attrs, result, operand)
            if safe and holders[buf] == 1 and n.inputs.count(v) == 1:
                return buf
    return None

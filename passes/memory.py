"""Memory planning along the schedule: liveness over buffers (a view keeps its base's buffer
alive), `del` points, elementwise results written into a dying input's buffer where that is safe,
and the planned peak of bytes the step allocates (graph inputs and constants excluded)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracegrad.ir import Graph, Node, Value
from tracegrad.primitives import PRIMITIVES

from .base import is_view, last_uses


@dataclass
class MemoryPlan:
    """Which buffer each value lives in, which dying input each node writes into, and the
    bytes allocated by the step along the schedule (graph inputs and constants excluded)."""

    reuse: dict[Value, Value] = field(default_factory=dict)  # result -> input it overwrites
    dead_after: dict[int, list[Value]] = field(default_factory=dict)  # node index -> names
    timeline: list[int] = field(default_factory=list)  # live bytes after each node
    peak: int = 0


def plan_memory(graph: Graph) -> MemoryPlan:
    """Liveness over buffers (a view keeps its base's buffer alive) plus in-place reuse."""
    last = last_uses(graph)
    external = {*graph.inputs, *(v for n in graph.nodes for v in n.inputs if v.const is not None)}
    buffer: dict[Value, Value] = {}  # value -> the value that owns its buffer
    holders: dict[Value, int] = {}  # buffer owner -> live values in it
    plan, live = MemoryPlan(), 0
    for i, n in enumerate(graph.nodes):
        dying = [v for v in dict.fromkeys(n.inputs) if last.get(v) == i and v in buffer]
        for out in n.outputs:
            if is_view(n):
                owner = buffer.get(n.inputs[0])  # None: a view of an input or a constant
            else:
                owner = _reusable(n, out, dying, buffer, holders)
                if owner is not None:
                    plan.reuse[out] = next(v for v in dying if buffer[v] is owner)
                    dying.remove(plan.reuse[out])  # one result per dying buffer
                    holders[owner] -= 1
                else:
                    owner, live = out, live + out.nbytes
            if owner is not None:
                buffer[out] = owner
                holders[owner] = holders.get(owner, 0) + 1
        plan.peak = max(plan.peak, live)
        for v in dying:
            holders[buffer[v]] -= 1
            if holders[buffer[v]] == 0:
                live -= buffer[v].nbytes
        plan.dead_after[i] = [v for v in dict.fromkeys(n.inputs) if last.get(v) == i
                              and v not in external]  # fmt: skip
        plan.timeline.append(live)
    return plan


def _writes_elementwise(n: Node) -> bool:
    """Results computed element by element from same-index inputs: `out=` an input is safe."""
    if n.op == "fused":
        return all(m.op != "sum" for m in n.attrs["body"].nodes)
    return isinstance(PRIMITIVES[n.op].impl, np.ufunc) and n.op != "matmul"


def _reusable(n: Node, out: Value, dying: list[Value], buffer: dict, holders: dict) -> Value | None:
    """A dying input's buffer that `n` can safely overwrite with its result `out`."""
    if not _writes_elementwise(n) or out.ndim == 0:  # 0-d NumPy results are scalars, not `out=`
        return None
    for v in dying:
        owner = buffer[v]
        if (v.shape, v.dtype) == (out.shape, out.dtype) == (owner.shape, owner.dtype):
            if holders[owner] == 1 and n.inputs.count(v) == 1:
                return owner
    return None

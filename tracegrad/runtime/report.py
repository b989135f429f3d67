"""`step.report()`'s text: the passes, what is saved for backward, the planned and measured peaks,
and what a memory budget recomputes."""

from __future__ import annotations

from typing import Any

import passes
from tracegrad.core.vocabulary import Kind


def mib(n: int) -> str:
    return f"{round(n / 2**20, 1) + 0.0:.1f} MiB"  # + 0.0: no "-0.0"


def report(plan: Any) -> str:
    """Passes (nodes before/after, bytes saved), values saved for backward, planned and measured
    peak bytes of the step."""
    graph = plan.graph
    lines = [
        f"tracegrad plan ({plan.backend} backend): {len(graph.nodes)} nodes, "
        f"{plan.kernel_count} kernels"
    ]
    lines.append("passes:")
    for s in plan.stats:
        note = f"  ({s.note})" if s.note else ""
        lines.append(
            f"  {s.name:<10} nodes {s.nodes_before:>5} -> {s.nodes_after:<5} "
            f"saved {mib(s.bytes_saved):>10}{note}"
        )
    saved = passes.saved_values(graph)
    producers = graph.producers()
    for n in graph.nodes:  # name the op inside a kernel, not the kernel
        if n.prim.kind is Kind.COMPOSITE:
            producers.update(n.attrs["body"].producers())
    lines.append(f"saved for backward: {len(saved)} values, {mib(sum(v.nbytes for v in saved))}")
    for v in saved:
        n = producers[v]
        lines.append(f"  {v.type_str:<20} {mib(v.nbytes):>10}  {n.op:<10} {n.source}")
    memory = plan.memory
    lines.append(
        f"planned peak: {mib(memory.peak)} (arena {mib(memory.arena)}, held between steps; "
        f"{mib(memory.peak - memory.arena)} more allocated during the step)"
    )
    peak = plan.run.peak
    measured = "not measured yet" if peak is None else mib(peak)
    lines.append(f"measured peak (tracemalloc, call {plan.run.calls}): {measured}")
    if plan.budget is not None:
        lines += _budget_lines(plan, producers)
    return "\n".join(lines)


RECOMPUTED_SHOWN = 12  # report lines for recomputed values; the rest are counted


def _budget_lines(plan: Any, producers: dict) -> list[str]:
    """The budget, what it does not count, and what the budget pass recomputes."""
    b = plan.budget
    held = sum(v.nbytes for v in plan.graph.inputs)
    share = b.extra_s / b.step_s if b.step_s else 0.0
    lines = [
        f"memory budget: {mib(b.limit)}; planned peak {mib(plan.memory.peak)} fits "
        f"(parameters, optimizer state and inputs, not counted: {mib(held)})",
        f"recomputed under the budget: {len(b.recomputed)} values, estimated extra compute "
        f"{b.extra_s * 1e3:.1f} ms ({share:.0%} of the step's estimate)",
    ]
    for v, n in b.recomputed[:RECOMPUTED_SHOWN]:
        lines.append(f"  {v.type_str:<20} {mib(v.nbytes):>10}  {n.op:<10} {n.source}")
    if len(b.recomputed) > RECOMPUTED_SHOWN:
        lines.append(f"  ... and {len(b.recomputed) - RECOMPUTED_SHOWN} more")
    return lines

"""`step.report()`'s text: the passes, what is saved for backward, the kernels, the planned and
measured peaks, which plan ran which calls, and what a memory budget recomputes (runtime/viz.py
makes it a page)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from passes.commit import fallible, gradients, why_gradients_wait
from tracegrad.core.vocabulary import Kind


def mib(n: int) -> str:
    return f"{round(n / 2**20, 1) + 0.0:.1f} MiB"  # + 0.0: no "-0.0"


def kernel_summary(plan: Any) -> str:
    """The plan's kernels: fused groups and ops with kernels of their own, by op."""
    kernels = getattr(plan, "kernels", {})
    fused = sum(n.prim.kind is Kind.COMPOSITE for n in kernels)
    own = Counter(n.op for n in kernels if n.prim.kind is not Kind.COMPOSITE)
    parts = [f"{fused} fused"] * bool(fused) + [f"{op} {k}" for op, k in sorted(own.items())]
    return f"{len(kernels)} kernels" + (f" ({', '.join(parts)})" if parts else "")


def measured_peak(plan: Any) -> tuple[int, str]:
    """The peak bytes tracemalloc measured for the plan as it is built now, and on which call:
    the first call that ran it (or a later one made while tracemalloc was tracing); if no call
    has run it yet (its kernels arrived after the last call), an instrumented run made now."""
    run = plan.run
    if run.peak is not None:
        call = plan.built_at_call + run.measured_call - 1
        return run.peak, f"call {call}"
    from tracegrad.runtime.profile import profile

    prof = profile(plan, repeat=0)
    return prof.peak, "an instrumented run for this report: no call has run this plan yet"


def history(plan: Any) -> str | None:
    """Which calls ran what, when a stand-in ran before the kernels arrived."""
    if plan.built_at_call <= 1:
        return None
    seconds = next((s for what, _, s in plan.events if what.endswith("background")), None)
    ready = f" (ready after {seconds:.1f} s)" if seconds is not None else ""
    first = plan.built_at_call - 1
    calls = "call 1" if first == 1 else f"calls 1-{first}"
    return (f"{calls} ran the same graph as NumPy calls while its kernels compiled{ready}; "
            f"this plan runs from call {plan.built_at_call} on")  # fmt: skip


def report(plan: Any) -> str:
    """Passes (nodes before/after, bytes saved), values saved for backward, planned and measured
    peak bytes of the step."""
    graph = plan.graph
    lines = [
        f"tracegrad plan ({plan.backend} backend): {len(graph.nodes)} nodes, {kernel_summary(plan)}"
    ]
    lines.append("passes:")
    for s in plan.stats:
        note = f"  ({s.note})" if s.note else ""
        lines.append(
            f"  {s.name:<10} nodes {s.nodes_before:>5} -> {s.nodes_after:<5} "
            f"saved {mib(s.bytes_saved):>10}{note}"
        )
    saved = graph.residuals()
    producers = graph.producers()
    for n in graph.nodes:  # name the op inside a kernel, not the kernel
        if n.prim.kind is Kind.COMPOSITE:
            producers.update(n.attrs["body"].producers())
    lines.append(f"saved for backward: {len(saved)} values, {mib(sum(v.nbytes for v in saved))}")
    for v in saved:
        n = producers[v]
        lines.append(f"  {v.type_str:<20} {mib(v.nbytes):>10}  {n.op:<10} {n.where}")
    memory = plan.memory
    lines.append(
        f"planned peak: {mib(memory.peak)} (arena {mib(memory.arena)}, held between steps; "
        f"{mib(memory.peak - memory.arena)} more allocated during the step)"
    )
    peak, when = measured_peak(plan)
    lines.append(f"measured peak (tracemalloc, {when}): {mib(peak)}")
    lines += commit_lines(plan)
    ran = history(plan)
    if ran is not None:
        lines.append(ran)
    if plan.budget is not None:
        lines += _budget_lines(plan, producers)
    return "\n".join(lines)


def commit_lines(plan: Any) -> list[str]:
    """Where the commit point is, what is updated in place after it, and whether the gradients
    die inside backward (or why they wait for each other)."""
    graph, memory = plan.graph, plan.memory
    fails = [i for i, f in enumerate(fallible(graph)) if f]
    if fails:
        n = graph.nodes[fails[-1]]
        count = "the only node" if len(fails) == 1 else f"the last of {len(fails)} nodes"
        after = f"after {n.op} at {n.where}, {count} that may fail"
    else:
        after = "at the start: no node of the step may fail"
    lines = [f"commit point: before node {memory.commit} of {len(graph.nodes)} ({after})"]
    updates = getattr(plan, "updates", {})
    if updates:
        done = len(memory.in_place)
        copied = len(updates) - done
        lines.append(
            f"  state updated in place after it: {done} of {len(updates)} values "
            f"({mib(sum(v.nbytes for v in memory.in_place))})"
            + (f"; {copied} copied at the end of the step" if copied else "")
        )
    grads = gradients(graph)
    if grads:
        alive = max(sum(b <= i <= d for _, b, d in grads) for _, i, _ in grads)
        why = why_gradients_wait(graph, memory.commit)
        held = f"{len(grads)} gradients, at most {alive} alive at once"
        lines.append(f"  {held}: " + (f"kept until all exist, because {why}" if why else
                                       "each freed by its update inside backward"))  # fmt: skip
    return lines


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
        lines.append(f"  {v.type_str:<20} {mib(v.nbytes):>10}  {n.op:<10} {n.where}")
    if len(b.recomputed) > RECOMPUTED_SHOWN:
        lines.append(f"  ... and {len(b.recomputed) - RECOMPUTED_SHOWN} more")
    return lines

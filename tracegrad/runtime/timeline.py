"""A compiled step's memory over its plan: the bytes each value holds from the node that makes it
to its last reader, stacked by kind, beside the memory plan's line and tracemalloc's samples,
with one peak: the planned peak the report prints, and what is live there.

Runtime layer; matplotlib is imported only where the figure is drawn (the `viz` extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from passes.base import is_view, last_uses
from tracegrad.core import ir
from tracegrad.core.drawing import PHASE_COLOURS, size_text
from tracegrad.core.vocabulary import Phase
from tracegrad.runtime.profile import Profile, profile

VIZ_EXTRA = 'pip install "tracegrad[viz]"'
KINDS = ["batch inputs", "parameters", "gradients", "optimizer state", "saved activations",
         "temporaries"]  # fmt: skip
KIND_COLOURS = ["#bbbbbb", "#1f78b4", "#ff7f00", "#33a02c", "#e31a1c", "#fdd49e"]


def require_matplotlib() -> Any:
    """matplotlib, or an error that names the extra that installs it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"this picture needs matplotlib: {VIZ_EXTRA}") from None
    return matplotlib


@dataclass
class Lifetime:
    """One value's bytes, from the node that makes it (-1: a graph input) to the last node that
    reads it, and what it is."""

    value: ir.Value
    kind: str
    born: int
    died: int
    producer: ir.Node | None


def _state_kinds(plan: Any) -> dict[ir.Value, str]:
    """The kind of each graph input and each state write, from the capture."""
    cap, graph = plan.capture, plan.graph
    n_args = len(cap.args)
    kinds = {v: "batch inputs" for v in graph.inputs[:n_args]}
    for v, (ref, via_grad) in zip(graph.inputs[n_args:], cap.reads, strict=True):
        kinds[v] = "gradients" if via_grad else _tensor_kind(ref.tensor)
    writes = iter(graph.outputs[cap.n_results :])
    for ref in cap.value_writes:
        kinds.setdefault(next(writes), "gradients" if ref.grad else _tensor_kind(ref.tensor))
    for _, to_none in cap.grad_writes:
        if not to_none:
            kinds.setdefault(next(writes), "gradients")
    return kinds


def _tensor_kind(t: Any) -> str:
    """A captured tensor's kind; None: an argument of the call."""
    if t is None:
        return "batch inputs"
    return "parameters" if t.requires_grad else "optimizer state"


def lifetimes(plan: Any) -> list[Lifetime]:
    """Every value that owns bytes: graph inputs for the whole step, results (views excluded:
    they own none, nor do values written into the state's buffers after the commit point) from
    their node to their last reader, or the end if the step returns them."""
    graph = plan.graph
    end = len(graph.nodes) - 1
    last = last_uses(graph)
    kinds = _state_kinds(plan)
    saved = set(graph.residuals())
    born = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    handed = {old: born[new] - 1 for new, old in plan.memory.reuse.items()}  # buffer taken over
    in_state = set(graph.inputs)
    for n in graph.nodes:  # values that took over a state input's buffer, in order
        in_state.update(v for v in n.outputs if plan.memory.reuse.get(v) in in_state)
    users = graph.users()
    for n in graph.nodes:  # what backward hands to the update: gradients, held or not
        if n.phase is Phase.BACKWARD:
            for v in n.outputs:
                if any(u.phase is Phase.UPDATE for u in users.get(v, ())):
                    kinds.setdefault(v, "gradients")
    out = [Lifetime(v, kinds[v], -1, end, None) for v in graph.inputs]
    for i, n in enumerate(graph.nodes):
        if is_view(n):
            continue
        for v in n.outputs:
            if v in in_state:
                continue
            kind = kinds.get(v) or ("saved activations" if v in saved else "temporaries")
            out.append(Lifetime(v, kind, i, handed.get(v, min(last.get(v, i), end)), n))
    return out


def stacked(lives: list[Lifetime], n_nodes: int) -> np.ndarray:
    """Bytes live after each node, one row per kind (`KINDS`)."""
    rows = np.zeros((len(KINDS), max(n_nodes, 1)), np.int64)
    for life in lives:
        rows[KINDS.index(life.kind), max(life.born, 0) : life.died + 1] += life.value.nbytes
    return rows


def live_at(lives: list[Lifetime], i: int) -> list[Lifetime]:
    """The values live after node `i`, largest first; among equals, what the step made (the
    values a user can do something about) before what it was given."""
    alive = [life for life in lives if life.born <= i <= life.died]
    return sorted(alive, key=lambda life: (-life.value.nbytes, -KINDS.index(life.kind)))


def describe(life: Lifetime) -> str:
    """One live value as the figure lists it: type, bytes, kind, the op that made it, where."""
    n = life.producer
    what = f"{n.op} ({n.phase})" if n is not None else "input"
    where = f" {n.where}" if n is not None and n.where else ""
    return f"{life.value.type_str} {size_text(life.value.nbytes)} {life.kind}: {what}{where}"


def _mib(n: Any) -> Any:
    return n / 2**20


def timeline_figure(plan: Any, prof: Profile | None = None) -> Any:
    """Live MiB over the plan's nodes: stacked by kind (each value from its node to its last
    reader), the memory plan's line (arena and fresh allocations, plus the inputs), the
    measured tracemalloc samples, and one peak: the planned peak `report()` prints, at the node
    where the plan reaches it, with the values live there."""
    require_matplotlib()
    from matplotlib.figure import Figure

    graph, memory = plan.graph, plan.memory
    lives = lifetimes(plan)
    rows = stacked(lives, len(graph.nodes))
    x = np.arange(rows.shape[1])
    fig = Figure(figsize=(11, 5.4))
    ax = fig.add_axes((0.07, 0.1, 0.55, 0.78))
    ax.stackplot(x, _mib(rows), labels=[f"{k} (values)" for k in KINDS], colors=KIND_COLOURS,
                 step="post", alpha=0.85)  # fmt: skip
    inputs = sum(v.nbytes for v in graph.inputs)
    planned = [_mib(inputs + b) for b in memory.timeline]
    ax.step(x[: len(planned)], planned, where="post", color="black", lw=1.2,
            label="memory plan: inputs + arena + fresh")  # fmt: skip
    prof = prof or profile(plan)
    ax.plot(x[: len(prof.bytes_after)], _mib(np.array(prof.bytes_after)), "o", ms=2.5,
            color="#6a3d9a", label="measured (tracemalloc)")  # fmt: skip
    peak = memory.peak_at
    top = _mib(inputs + memory.peak)
    ax.plot([peak], [top], "v", color="#e31a1c", ms=7, label="planned peak")
    right = peak > len(x) / 2  # the label on the side with room
    ax.annotate(f"planned peak {size_text(memory.peak)} (+ inputs {size_text(inputs)})",
                (peak, top), fontsize=8, xytext=(-6 if right else 6, 6),
                textcoords="offset points", ha="right" if right else "left")  # fmt: skip
    ax.set_title(f"{plan.name}: live memory over the plan ({plan.backend} backend, "
                 f"{len(graph.nodes)} nodes)", fontsize=10, loc="left")  # fmt: skip
    ax.set_xlabel("node of the plan (in schedule order)")
    ax.set_ylabel("live MiB")
    ax.set_xlim(0, max(len(x) - 1, 1))
    ax.set_ylim(0, max(top, float(_mib(rows.sum(axis=0)).max()), max(planned, default=0)) * 1.12)
    _phase_strip(ax, graph)
    ax.axvline(memory.commit, color="#555555", lw=0.8, ls="--",
               label="commit point: state written in place after it")  # fmt: skip
    ax.legend(loc="lower left", bbox_to_anchor=(1.02, 0.0), fontsize=7)
    alive = live_at(lives, peak)
    text = [f"live at the planned peak (node {peak}), largest first:"]
    text += [describe(life) for life in alive[:14]]
    if len(alive) > 14:
        text.append(f"... and {len(alive) - 14} more")
    fig.text(0.64, 0.88, "\n".join(text), fontsize=6.2, va="top", family="monospace", wrap=True)
    return fig


def _phase_strip(ax: Any, graph: ir.Graph) -> None:
    """A thin band under the plot: each node's phase colour (one bar set per phase)."""
    spans: dict[Any, list[tuple[int, int]]] = {}
    for i, n in enumerate(graph.nodes):
        spans.setdefault(n.phase, []).append((i, 1))
    low, high = ax.get_ylim()
    for phase, bars in spans.items():
        ax.broken_barh(bars, (low, (high - low) * 0.015), color=PHASE_COLOURS.get(phase, "#999"),
                       lw=0)  # fmt: skip


def memory_timeline(plan: Any, path: str | None = None) -> Any:
    """The timeline figure (a matplotlib Figure), saved to `path` if given (format by suffix)."""
    fig = timeline_figure(plan)
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig

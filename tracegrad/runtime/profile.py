"""Where a compiled step's time and memory go: `step.profile()` runs its plan instrumented and
returns a `Profile`, which `export_chrome_trace(path)` writes in the Chrome trace event format
(as `torch.profiler`'s does), for Perfetto (ui.perfetto.dev) or chrome://tracing: a slice per
statement of the plan (its op, module path, user line and bytes), nested in a slice per module
call, and the step's compilation on a track of its own.

Runtime layer: it runs a `runtime.plan.Plan`'s compiled function on a buffer it lends itself,
so nothing the user holds changes.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracegrad.core.vocabulary import Kind


@dataclass
class Profile:
    """Instrumented runs of a plan: each statement's seconds (its fastest run), the traced bytes
    after each (tracemalloc, plus the arena and the inputs, as the planned figures count them)
    and the peak of the traced run (arena plus tracemalloc's peak, as `MeasuredRun` measures a
    call's). `plan`: the plan it ran; `runs`: how many timed runs each time is the fastest of."""

    plan: Any = None
    bytes_after: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    peak: int | None = None
    runs: int = 0

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write the Chrome trace event format (JSON) to `path`: open it in Perfetto or
        chrome://tracing."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": self.events(), "displayTimeUnit": "ms"}, f)

    def events(self) -> list[dict]:
        """The trace's events: process 1 is one call of the plan, its statements end to end in
        schedule order (each its fastest time) inside their modules' slices; process 2 the
        step's compilation, in seconds since the first event of it."""
        plan = self.plan
        name = getattr(plan, "name", "step")
        meta = [_meta("process_name", 1, 0, f"tracegrad: {name}, one call"),
                _meta("thread_name", 1, 1, f"plan statements (fastest of {self.runs} runs)"),
                _meta("process_name", 2, 0, f"tracegrad: {name}, compilation"),
                _meta("thread_name", 2, 1, "compiling")]  # fmt: skip
        return meta + self._statements() + _compilation(plan)

    def _statements(self) -> list[dict]:
        graph, kernels = self.plan.graph, getattr(self.plan, "kernels", {})
        names = graph.names()
        lines = _statement_text(self.plan.source, len(graph.nodes))
        ends = np.cumsum([s * 1e6 for s in self.seconds])  # microseconds, end to end
        starts = np.concatenate([[0.0], ends[:-1]])
        events = []
        for i, n in enumerate(graph.nodes):
            body = n.attrs.get("body") if n.prim.kind is Kind.COMPOSITE else None
            op = "fused{" + ",".join(m.op for m in body.nodes) + "}" if body is not None else n.op
            view = n.prim.is_view(n.inputs, n.attrs)
            events.append({
                "name": op, "cat": f"statement,{n.phase}", "ph": "X", "pid": 1, "tid": 1,
                "ts": float(starts[i]), "dur": float(ends[i] - starts[i]),
                "args": {"node": i, "module": n.module, "line": n.source, "phase": str(n.phase),
                         "results": " ".join(f"{names[v]}:{v.type_str}" for v in n.outputs),
                         "bytes": 0 if view else sum(v.nbytes for v in n.outputs),
                         "kernel": n in kernels, "statement": lines.get(i, "")},
            })  # fmt: skip
        return _module_slices(graph, starts, ends) + events


def _meta(what: str, pid: int, tid: int, name: str) -> dict:
    return {"name": what, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _module_slices(graph: Any, starts: np.ndarray, ends: np.ndarray) -> list[dict]:
    """A slice per maximal run of consecutive statements in one module, at every level of its
    path (`blocks`, `blocks.0`, `blocks.0.attn`), so that the viewer nests them."""
    paths = [n.module.split(".") if n.module else [] for n in graph.nodes]
    out = []
    for depth in range(1, max(map(len, paths), default=0) + 1):
        i = 0
        while i < len(paths):
            key = paths[i][:depth]
            if len(key) < depth:
                i += 1
                continue
            j = i
            while j + 1 < len(paths) and paths[j + 1][:depth] == key:
                j += 1
            out.append({"name": ".".join(key), "cat": "module", "ph": "X", "pid": 1, "tid": 1,
                        "ts": float(starts[i]), "dur": float(ends[j] - starts[i]),
                        "args": {"statements": j - i + 1}})  # fmt: skip
            i = j + 1
    return out


def _compilation(plan: Any) -> list[dict]:
    """The plan's compilation (passes, lowering, codegen; kernels compiled in the background),
    in microseconds since it began."""
    events = getattr(plan, "events", [])
    if not events:
        return []
    origin = min(start for _, start, _ in events)
    return [{"name": what, "cat": "compile", "ph": "X", "pid": 2, "tid": 1,
             "ts": (start - origin) * 1e6, "dur": seconds * 1e6}
            for what, start, seconds in events]  # fmt: skip


def _statement_text(source: str, n: int) -> dict[int, str]:
    """Node index -> the plan's statements for it (`_line_nodes` in reverse)."""
    text = source.splitlines()
    out: dict[int, list[str]] = {}
    for lineno, node in _line_nodes(source).items():
        if 0 <= node < n:
            out.setdefault(node, []).append(text[lineno - 1].strip())
    return {k: "\n".join(v) for k, v in out.items()}


def _line_nodes(source: str) -> dict[int, int]:
    """Line number in the plan's source -> index of the node its statement belongs to. A node's
    statements end with the one carrying its comment; a `del` after it belongs to it too."""
    owner, node = {}, 0
    for lineno, text in enumerate(source.splitlines()[1:], start=2):
        stripped = text.strip()
        if stripped.startswith("del "):
            owner[lineno] = node - 1
        elif stripped.startswith("_commit()"):  # the commit point: part of the next node
            owner[lineno] = node
        elif not stripped.startswith("return"):
            owner[lineno] = node
            if "  # " in text:
                node += 1
    return owner


def plan_inputs(plan: Any, arg_leaves: Sequence[Any] | None = None) -> list[np.ndarray]:
    """The plan function's inputs for a call's argument leaves (`Plan.inputs`), or without
    them zeros for the arguments and the state's current values."""
    if arg_leaves is not None:
        return plan.inputs(arg_leaves)
    inputs = [np.zeros(v.shape, v.dtype) for v in plan.graph.inputs]
    for k, (ref, via_grad) in enumerate(plan.capture.reads, start=len(plan.capture.args)):
        if ref.tensor is not None:  # captured state: its current value (arguments: zeros)
            inputs[k] = ref.tensor._grad._value if via_grad else ref.tensor._value
    return inputs


def profile(plan: Any, repeat: int = 3, arg_leaves: Sequence[Any] | None = None) -> Profile:
    """Run the plan's function `repeat` times on a call's arguments (`arg_leaves`, as
    `tracer.signature` flattens them) or else zeros for them, and the state's current values, in
    the arena between steps (the state it would update in place is copied first, and nothing
    is written back), timing every statement (keeping each one's fastest), then once more under
    tracemalloc for the bytes after each and the peak: tracemalloc slows what allocates,
    kernels included (Numba reports its allocations to it), so no time is taken under it.
    Zeros can take other paths than real data does (subnormal values take the CPU's slow
    path), hence the arguments."""
    graph, run = plan.graph, plan.run
    inputs = plan_inputs(plan, arg_leaves)
    for k in getattr(plan, "written", ()):  # what the plan updates in place: a copy
        inputs[k] = np.array(inputs[k])
    fixed = run.layout.nbytes + sum(v.nbytes for v in graph.inputs)
    owner = _line_nodes(plan.source)
    runs = []
    views, lent = run.arena.lend(run.layout)  # between steps: lent, or a buffer of its own
    try:
        with np.errstate(all="ignore"):  # zeros may divide by zero: nobody reads the values
            for traced in [False] * repeat + [True]:
                args = (run.run, views, inputs, owner, len(graph.nodes), fixed, traced)
                runs.append(_instrumented(*args))
    finally:
        if lent:
            run.arena.give_back()
    traced = runs[-1]
    timed = runs[:-1] or [traced]
    # each statement's fastest run: a busy machine slows some statements of each run
    seconds = [min(t) for t in zip(*(r.seconds for r in timed), strict=True)]
    peak = None if traced.peak is None else run.layout.nbytes + traced.peak
    return Profile(plan, traced.bytes_after, seconds, peak, len(timed))


def _instrumented(fn: Any, views: list, inputs: list, owner: dict[int, int], n: int,
                  fixed: int, traced_memory: bool) -> Profile:  # fmt: skip
    """Samples (node, traced bytes, time) at every line event of the plan's frame, into arrays
    allocated beforehand so that sampling allocates nothing tracemalloc would count; bytes and
    the peak (above what was traced before) only with `traced_memory` (tracemalloc on)."""
    size = max(owner, default=0) + 8  # straight-line code: each line runs at most once
    nodes, traced, times = np.full(size, n), np.zeros(size, np.int64), np.zeros(size)
    count = np.zeros(1, np.int64)
    code = inspect.unwrap(fn).__code__  # the plan's own function (`codegen.run_plan`)

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event in ("line", "return") and count[0] < size:
            k = count[0]
            nodes[k] = owner.get(frame.f_lineno, n) if event == "line" else n
            traced[k] = tracemalloc.get_traced_memory()[0]
            times[k] = time.perf_counter()
            count[0] += 1
        return local

    def global_(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    started = traced_memory and not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    if traced_memory:
        tracemalloc.reset_peak()
    previous = sys.gettrace()
    sys.settrace(global_)
    try:
        fn(views, *inputs)
    finally:
        sys.settrace(previous)
        peak = tracemalloc.get_traced_memory()[1] - base if traced_memory else None
        if started:
            tracemalloc.stop()
    prof = Profile(None, [0] * n, [0.0] * n, peak)
    for k in range(int(count[0]) - 1):
        node, nxt = int(nodes[k]), int(nodes[k + 1])
        if 0 <= node < n:
            prof.seconds[node] += float(times[k + 1] - times[k])
            if nxt > node:  # the first sample after the node's statements
                prof.bytes_after[node] = fixed + int(traced[k + 1]) - base
    for i in range(1, n):  # a node with no statement of its own keeps the one before
        prof.bytes_after[i] = prof.bytes_after[i] or prof.bytes_after[i - 1]
    return prof

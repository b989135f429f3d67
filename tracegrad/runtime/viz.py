"""Looking at a compiled step: its memory over the plan (planned, stacked by kind, and measured),
one self-contained HTML report, and the `TRACEGRAD_DUMP` directory.

Runtime layer: it reads a `runtime.plan.Plan` (graph, memory plan, source, pass stats, capture) and
runs its compiled function once, instrumented, on a buffer of its own, so nothing the user holds
changes. matplotlib is imported only where a figure is drawn (the `viz` extra).
"""

from __future__ import annotations

import base64
import html
import io
import linecache
import os
import re
import sys
import time
import tracemalloc
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from passes.base import is_view, last_uses
from tracegrad.core import ir
from tracegrad.core.drawing import PHASE_COLOURS

VIZ_EXTRA = 'pip install "tracegrad[viz]"'


def require_matplotlib() -> Any:
    """matplotlib, or an error that names the extra that installs it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"this picture needs matplotlib: {VIZ_EXTRA}") from None
    return matplotlib
from tracegrad.core.vocabulary import Kind, Phase

KINDS = ["batch inputs", "parameters", "gradients", "optimizer state", "saved activations",
         "temporaries"]  # fmt: skip
KIND_COLOURS = ["#bbbbbb", "#1f78b4", "#ff7f00", "#33a02c", "#e31a1c", "#fdd49e"]


# --- what lives when ------------------------------------------------------------------------


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
        kinds.setdefault(next(writes), _tensor_kind(ref.tensor))
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
    they own none) from their node to their last reader, or the end if the step returns them."""
    graph = plan.graph
    end = len(graph.nodes) - 1
    last = last_uses(graph)
    kinds = _state_kinds(plan)
    saved = set(graph.residuals())
    born = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    handed = {old: born[new] - 1 for new, old in plan.memory.reuse.items()}  # buffer taken over
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


# --- one instrumented call --------------------------------------------------------------------


@dataclass
class Profile:
    """One instrumented run of a plan: traced bytes after each node (tracemalloc, plus the
    arena and the inputs, as the planned figures count them) and each node's seconds."""

    bytes_after: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def _line_nodes(source: str) -> dict[int, int]:
    """Line number in the plan's source -> index of the node its statement belongs to. A node's
    statements end with the one carrying its comment; a `del` after it belongs to it too."""
    owner, node = {}, 0
    for lineno, text in enumerate(source.splitlines()[1:], start=2):
        stripped = text.strip()
        if stripped.startswith("del "):
            owner[lineno] = node - 1
        elif not stripped.startswith("return"):
            owner[lineno] = node
            if "  # " in text:
                node += 1
    return owner


def profile(plan: Any, repeat: int = 3) -> Profile:
    """Run the plan's function `repeat` times on zeros for its arguments and the state's current
    values, in the arena between steps (the plan never writes its inputs, and nothing is
    written back), timing every statement (keeping each one's fastest), then once more under
    tracemalloc for the bytes after each: tracemalloc slows what allocates, kernels included
    (Numba reports its allocations to it), so no time is taken under it."""
    graph, run = plan.graph, plan.run
    n_args = len(plan.capture.args)
    inputs = [np.zeros(v.shape, v.dtype) for v in graph.inputs]
    for k, (ref, via_grad) in enumerate(plan.capture.reads, start=n_args):
        if ref.tensor is not None:  # captured state: its current value (arguments: zeros)
            inputs[k] = ref.tensor._grad._value if via_grad else ref.tensor._value
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
    # each statement's fastest run: a busy machine slows some statements of each run
    return Profile(
        runs[-1].bytes_after, [min(t) for t in zip(*(r.seconds for r in runs[:-1]), strict=True)]
    )


def _instrumented(fn: Any, views: list, inputs: list, owner: dict[int, int], n: int,
                  fixed: int, traced_memory: bool) -> Profile:  # fmt: skip
    """Samples (node, traced bytes, time) at every line event of the plan's frame, into arrays
    allocated beforehand so that sampling allocates nothing tracemalloc would count; bytes only
    with `traced_memory` (tracemalloc on)."""
    size = max(owner, default=0) + 8  # straight-line code: each line runs at most once
    nodes, traced, times = np.full(size, n), np.zeros(size, np.int64), np.zeros(size)
    count = np.zeros(1, np.int64)
    code = fn.__code__

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
    previous = sys.gettrace()
    sys.settrace(global_)
    try:
        fn(views, *inputs)
    finally:
        sys.settrace(previous)
        if started:
            tracemalloc.stop()
    prof = Profile([0] * n, [0.0] * n)
    for k in range(int(count[0]) - 1):
        node, nxt = int(nodes[k]), int(nodes[k + 1])
        if 0 <= node < n:
            prof.seconds[node] += float(times[k + 1] - times[k])
            if nxt > node:  # the first sample after the node's statements
                prof.bytes_after[node] = fixed + int(traced[k + 1]) - base
    for i in range(1, n):  # a node with no statement of its own keeps the one before
        prof.bytes_after[i] = prof.bytes_after[i] or prof.bytes_after[i - 1]
    return prof


# --- the timeline figure ----------------------------------------------------------------------


def _mib(n: Any) -> Any:
    return n / 2**20


def _size(n: float) -> str:
    """Bytes in the unit that shows them."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _where(life: Lifetime) -> str:
    n = life.producer
    what = f"{n.op} ({n.phase})" if n is not None else "input"
    return f"{life.value.type_str} {_size(life.value.nbytes)} {life.kind}: {what}" + (
        f" {n.source}" if n is not None and n.source else ""
    )


def timeline_figure(plan: Any, prof: Profile | None = None) -> Any:
    """Live MiB over the plan's nodes: stacked by kind (each value from its node to its last
    reader), the memory plan's line (arena and fresh allocations, plus the inputs), the
    measured tracemalloc samples, and the peak with the values live at it."""
    require_matplotlib()
    from matplotlib.figure import Figure

    graph = plan.graph
    lives = lifetimes(plan)
    rows = stacked(lives, len(graph.nodes))
    x = np.arange(rows.shape[1])
    fig = Figure(figsize=(11, 5.2))
    ax = fig.add_axes((0.07, 0.1, 0.55, 0.8))
    ax.stackplot(
        x,
        _mib(rows),
        labels=[f"{k} (values)" for k in KINDS],
        colors=KIND_COLOURS,
        step="post",
        alpha=0.85,
    )
    inputs = sum(v.nbytes for v in graph.inputs)
    planned = [_mib(inputs + b) for b in plan.memory.timeline]
    ax.step(x[: len(planned)], planned, where="post", color="black", lw=1.2,
            label="memory plan: inputs + arena + fresh")  # fmt: skip
    prof = prof or profile(plan)
    ax.plot(x[: len(prof.bytes_after)], _mib(np.array(prof.bytes_after)), "o", ms=2.5,
            color="#6a3d9a", label="measured (tracemalloc)")  # fmt: skip
    total = rows.sum(axis=0)
    peak = int(np.argmax(total))
    ax.axvline(peak, color="#e31a1c", ls=":", lw=1)
    ax.annotate(f"peak {_size(total[peak])}", (peak, _mib(total[peak])), fontsize=8,
                xytext=(4, 4), textcoords="offset points")  # fmt: skip
    _phase_strip(ax, graph)
    ax.set_xlabel("node of the plan (in schedule order)")
    ax.set_ylabel("live MiB")
    ax.set_xlim(0, max(len(x) - 1, 1))
    ax.legend(loc="lower left", bbox_to_anchor=(1.02, 0.0), fontsize=7)
    top = live_at(lives, peak)
    text = [f"live at the peak (node {peak}), largest first:"]
    text += [_where(life) for life in top[:14]]
    if len(top) > 14:
        text.append(f"... and {len(top) - 14} more")
    fig.text(0.64, 0.9, "\n".join(text), fontsize=6.2, va="top", family="monospace", wrap=True)
    return fig


def _phase_strip(ax: Any, graph: ir.Graph) -> None:
    """A thin band under the plot: each node's phase colour."""
    for i, n in enumerate(graph.nodes):
        ax.axvspan(i, i + 1, ymin=0, ymax=0.015, color=PHASE_COLOURS.get(n.phase, "#999"), lw=0)


def memory_timeline(plan: Any, path: str | None = None) -> Any:
    """The timeline figure (a matplotlib Figure), saved to `path` if given (format by suffix)."""
    fig = timeline_figure(plan)
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


# --- the report ---------------------------------------------------------------------------------


class Report(str):
    """`step.report()`: the text (so `print` and string methods work as before) with the plan
    behind it, for `to_html`."""

    plan: Any
    name: str

    def __new__(cls, text: str, plan: Any, name: str = "step") -> Report:
        self = super().__new__(cls, text)
        self.plan, self.name = plan, name
        return self

    def __repr__(self) -> str:
        return str(self)

    def to_html(self, path: str | None = None) -> str:
        """One self-contained HTML page (no network): passes, saved values, the graph (SVG, pan
        and zoom), the memory timeline, the slowest statements and kernels, the plan's source
        linked to the user's lines. Written to `path` too, if given."""
        page = html_page(self.plan, str(self), self.name)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page


def _table(head: list[str], rows: list[list[Any]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _anchor(source: str | None) -> str:
    if not source:
        return ""
    key = re.sub(r"[^A-Za-z0-9]", "-", source)
    return f'<a href="#u-{key}">{html.escape(source)}</a>'


def _user_lines(graph: ir.Graph) -> str:
    """Each user line the graph came from, with its text when the file is readable."""
    seen = dict.fromkeys(n.source for n in _members(graph) if n.source)
    rows = []
    for src in seen:
        file, _, line = src.rpartition(":")
        text = linecache.getline(file, int(line)).strip() if line.isdigit() else ""
        key = re.sub(r"[^A-Za-z0-9]", "-", src)
        rows.append(f'<tr id="u-{key}"><td>{html.escape(src)}</td>'
                    f"<td><code>{html.escape(text)}</code></td></tr>")  # fmt: skip
    return f"<table>{''.join(rows)}</table>"


def _members(graph: ir.Graph) -> list[ir.Node]:
    out = []
    for n in graph.nodes:
        body = n.attrs.get("body") if n.prim.kind is Kind.COMPOSITE else None
        out += body.nodes if isinstance(body, ir.Graph) else [n]
    return out


def _source_html(source: str) -> str:
    """The plan's source, each node's comment linking to the user's line."""
    out = []
    for line in source.splitlines():
        code, sep, comment = line.partition("  # ")
        text = html.escape(code)
        if sep:
            m = re.search(r"(\S+:\d+)$", comment)
            note = html.escape(comment)
            if m:
                note = html.escape(comment[: m.start()]) + _anchor(m.group(1))
            text += f'<span class="c">  # {note}</span>'
        out.append(text)
    return '<pre class="src">' + "\n".join(out) + "</pre>"


def _statements(plan: Any, prof: Profile) -> str:
    """The slowest nodes of the instrumented run: kernels, matmuls, NumPy calls."""
    graph = plan.graph
    total = sum(prof.seconds) or 1.0
    order = sorted(range(len(graph.nodes)), key=lambda i: -prof.seconds[i])
    rows = []
    for i in order[:15]:
        n = graph.nodes[i]
        what = ir.fmt_attr(n.attrs["body"]) if n.prim.kind is Kind.COMPOSITE else ""
        op = "kernel" if n.prim.kind is Kind.COMPOSITE else n.op
        rows.append([i, html.escape(op), html.escape(what[:60]), n.phase,
                     html.escape(", ".join(v.type_str for v in n.outputs)),
                     f"{prof.seconds[i] * 1e3:.2f}", f"{100 * prof.seconds[i] / total:.0f}%",
                     _anchor(n.source)])  # fmt: skip
    head = ["node", "op", "fused ops", "phase", "result", "ms", "share", "user line"]
    return (f"<p>Instrumented runs, each statement's fastest (on this machine): "
            f"{total * 1e3:.1f} ms in all.</p>" + _table(head, rows))  # fmt: skip


def _kernels(plan: Any, prof: Profile) -> str:
    """Every compiled kernel, slowest first."""
    graph = plan.graph
    found = [i for i, n in enumerate(graph.nodes) if n.prim.kind is Kind.COMPOSITE]
    if not found:
        return "<p>No kernels: this plan runs NumPy calls only.</p>"
    rows = []
    for i in sorted(found, key=lambda i: -prof.seconds[i]):
        n = graph.nodes[i]
        body = n.attrs["body"]
        rows.append([i, len(body.nodes), html.escape(ir.fmt_attr(body)), n.phase,
                     html.escape(", ".join(v.type_str for v in n.outputs)),
                     f"{prof.seconds[i] * 1e3:.2f}", _anchor(n.source)])  # fmt: skip
    head = ["node", "ops", "fused ops", "phase", "results", "ms", "user line"]
    total = sum(prof.seconds[i] for i in found)
    return f"<p>{len(found)} kernels, {total * 1e3:.1f} ms in all.</p>" + _table(head, rows)


def _saved(plan: Any) -> str:
    graph = plan.graph
    producers = {v: m for m in _members(graph) for v in m.outputs}
    saved = sorted(graph.residuals(), key=lambda v: -v.nbytes)
    rows = [[html.escape(v.type_str), _size(v.nbytes), html.escape(producers[v].op),
             _anchor(producers[v].source)] for v in saved]  # fmt: skip
    return _table(["value", "bytes", "made by", "user line"], rows)


def _passes(plan: Any) -> str:
    rows = [[s.name, s.nodes_before, s.nodes_after, f"{_mib(s.bytes_saved):.2f}",
             html.escape(s.note)] for s in plan.stats]  # fmt: skip
    return _table(["pass", "nodes before", "nodes after", "MiB saved", "note"], rows)


CSS = """body{font:14px system-ui,sans-serif;margin:1.5em;max-width:1400px}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-size:13px}pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}
.c{color:#777}.c a{color:#2060a0}#graph{border:1px solid #ccc;height:70vh;overflow:hidden;
cursor:grab}#graph svg{width:100%;height:100%}img{max-width:100%}"""

PAN_ZOOM = """(function(){var box=document.getElementById('graph');var svg=box.querySelector('svg');
if(!svg)return;var bb=svg.viewBox.baseVal;if(!bb||!bb.width){return;}
var r0=box.getBoundingClientRect();var v={x:bb.x,y:bb.y,w:bb.width,
h:Math.min(bb.height,bb.width*r0.height/Math.max(r0.width,1))};svg.removeAttribute('width');
svg.removeAttribute('height');
function show(){svg.setAttribute('viewBox',v.x+' '+v.y+' '+v.w+' '+v.h);}
box.addEventListener('wheel',function(e){e.preventDefault();var k=e.deltaY>0?1.2:1/1.2;
var r=box.getBoundingClientRect();var fx=(e.clientX-r.left)/r.width,fy=(e.clientY-r.top)/r.height;
v.x+=v.w*fx*(1-k);v.y+=v.h*fy*(1-k);v.w*=k;v.h*=k;show();},{passive:false});
var drag=null;box.addEventListener('mousedown',function(e){drag={x:e.clientX,y:e.clientY};});
window.addEventListener('mouseup',function(){drag=null;});
box.addEventListener('mousemove',function(e){if(!drag)return;var r=box.getBoundingClientRect();
v.x-=(e.clientX-drag.x)*v.w/r.width;v.y-=(e.clientY-drag.y)*v.h/r.height;
drag={x:e.clientX,y:e.clientY};show();});show();})();"""


def html_page(plan: Any, text: str, name: str = "step") -> str:
    """The report page; every picture inline."""
    prof = profile(plan)
    svg = plan.graph.to_svg()
    buf = io.BytesIO()
    timeline_figure(plan, prof).savefig(buf, format="png", dpi=100)
    png = base64.b64encode(buf.getvalue()).decode()
    name = html.escape(name)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>tracegrad report: {name}"
        f"</title><style>{CSS}</style></head><body>",
        f"<h1>tracegrad report: {name}</h1><pre>{html.escape(text)}</pre>",
        "<h2>Passes</h2>", _passes(plan),
        "<h2>Saved for backward (largest first)</h2>", _saved(plan),
        "<h2>Slowest statements</h2>", _statements(plan, prof),
        "<h2>Kernels (slowest first)</h2>", _kernels(plan, prof),
        "<h2>Memory timeline</h2>",
        f"<img alt='memory timeline' src='data:image/png;base64,{png}'>",
        "<h2>Graph</h2><p>Wheel to zoom, drag to pan; hover over an op for its types, phase "
        "and line. Red outline: makes a value saved for backward.</p>",
        f"<div id='graph'>{svg}</div>",
        "<h2>The plan</h2>", _source_html(plan.source),
        "<h2>User lines</h2>", _user_lines(plan.graph),
        f"<script>{PAN_ZOOM}</script></body></html>",
    ]  # fmt: skip
    return "\n".join(parts)


# --- TRACEGRAD_DUMP -----------------------------------------------------------------------------


_dumps: dict[tuple[str, str], int] = {}  # (root, function name) -> plans dumped there so far


def dump(plan: Any, text: str, root: str, name: str) -> str:
    """Write graph.txt, graph.svg, plan.py, timeline.png and report.html for one plan into
    `root/<name>-<n>/` (n counts this process's plans of functions so named); returns that
    directory."""
    _dumps[root, name] = index = _dumps.get((root, name), 0) + 1
    where = os.path.join(root, f"{name}-{index}")
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "graph.txt"), "w", encoding="utf-8") as f:
        f.write(str(plan.graph) + "\n")
    with open(os.path.join(where, "plan.py"), "w", encoding="utf-8") as f:
        f.write(plan.source)
    try:
        plan.graph.to_svg(os.path.join(where, "graph.svg"))
        memory_timeline(plan, os.path.join(where, "timeline.png"))
        Report(text, plan, name).to_html(os.path.join(where, "report.html"))
    except ImportError as e:  # the step itself ran: say what is missing rather than fail it
        warnings.warn(f"TRACEGRAD_DUMP wrote only the text files to {where}: {e}", stacklevel=3)
    return where

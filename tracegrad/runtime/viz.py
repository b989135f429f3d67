"""Looking at a compiled step: one self-contained HTML report (`step.to_html`) and the
`TRACEGRAD_DUMP` directory. The pieces live beside it: `profile.py` (instrumented runs, the Chrome
trace), `timeline.py` (memory over the plan) and `core/drawing.py` (the graph by module).

Runtime layer: it reads a `runtime.plan.Plan` (graph, memory plan, source, pass stats, capture,
kernels). matplotlib is imported only where the timeline is drawn (the `viz` extra).
"""

from __future__ import annotations

import base64
import html
import io
import linecache
import os
import re
import warnings
from typing import Any

from tracegrad.core import drawing, ir
from tracegrad.core.vocabulary import Kind
from tracegrad.runtime.profile import Profile, profile
from tracegrad.runtime.report import kernel_summary
from tracegrad.runtime.timeline import (
    KINDS,
    Lifetime,
    describe,
    lifetimes,
    live_at,
    memory_timeline,
    require_matplotlib,
    stacked,
    timeline_figure,
)

__all__ = ["KINDS", "Lifetime", "Profile", "Report", "describe", "dump", "html_page",
           "lifetimes", "live_at", "memory_timeline", "profile", "require_matplotlib", "stacked",
           "timeline_figure"]  # fmt: skip


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
        """One self-contained HTML page (no network): passes, saved values, the graph by module
        (click a module to open it; wheel to zoom, drag to pan), the memory timeline, the slowest
        statements and kernels, the plan's source linked to the user's lines. Written to `path`
        too, if given. Needs matplotlib (the `viz` extra) for the timeline."""
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


def _op_text(n: ir.Node) -> str:
    return ir.fmt_attr(n.attrs["body"]) if n.prim.kind is Kind.COMPOSITE else n.op


def _statements(plan: Any, prof: Profile) -> str:
    """The slowest nodes of the instrumented run: kernels, matmuls, NumPy calls."""
    graph, names = plan.graph, plan.graph.names()
    total = sum(prof.seconds) or 1.0
    order = sorted(range(len(graph.nodes)), key=lambda i: -prof.seconds[i])
    rows = []
    for i in order[:15]:
        n = graph.nodes[i]
        rows.append([i, html.escape(" ".join(names[v] for v in n.outputs)),
                     html.escape(_op_text(n)[:60]), "yes" if n in plan.kernels else "", n.phase,
                     html.escape(n.module or ""), html.escape(n.outputs[0].type_str),
                     f"{prof.seconds[i] * 1e3:.2f}", f"{100 * prof.seconds[i] / total:.0f}%",
                     _anchor(n.source)])  # fmt: skip
    head = ["node", "results", "op", "kernel", "phase", "module", "type", "ms", "share",
            "user line"]  # fmt: skip
    return (f"<p>Instrumented runs, each statement's fastest (on this machine): "
            f"{total * 1e3:.1f} ms in all.</p>" + _table(head, rows))  # fmt: skip


def _kernels(plan: Any, prof: Profile) -> str:
    """Every compiled kernel, slowest first: fused groups and ops with kernels of their own."""
    graph = plan.graph
    found = [i for i, n in enumerate(graph.nodes) if n in plan.kernels]
    if not found:
        return "<p>No kernels: this plan runs NumPy calls only.</p>"
    rows = []
    for i in sorted(found, key=lambda i: -prof.seconds[i]):
        n = graph.nodes[i]
        fused = n.prim.kind is Kind.COMPOSITE
        rows.append([i, "fused group" if fused else "op's own", html.escape(_op_text(n)),
                     n.phase, html.escape(n.module or ""),
                     html.escape(", ".join(v.type_str for v in n.outputs)),
                     f"{prof.seconds[i] * 1e3:.2f}", _anchor(n.source)])  # fmt: skip
    head = ["node", "kernel", "ops", "phase", "module", "results", "ms", "user line"]
    total = sum(prof.seconds[i] for i in found)
    return (f"<p>{html.escape(kernel_summary(plan))}, {total * 1e3:.1f} ms in all.</p>"
            + _table(head, rows))  # fmt: skip


def _modules(plan: Any, prof: Profile) -> str:
    """Time and bytes by module, every level, slowest first."""
    _, table = drawing.groups(plan.graph, prof.seconds)
    rows = [[html.escape(g.label), g.ops, g.kernels, f"{(g.seconds or 0) * 1e3:.2f}",
             drawing.size_text(g.nbytes), drawing.size_text(g.saved)]
            for g in sorted(table.values(), key=lambda g: -(g.seconds or 0))]  # fmt: skip
    head = ["module (or user line)", "ops", "kernels", "ms", "results allocated",
            "saved for backward"]  # fmt: skip
    return _table(head, rows)


def _saved(plan: Any) -> str:
    graph = plan.graph
    producers = {v: m for m in _members(graph) for v in m.outputs}
    saved = sorted(graph.residuals(), key=lambda v: -v.nbytes)
    rows = [[html.escape(v.type_str), drawing.size_text(v.nbytes), html.escape(producers[v].op),
             html.escape(producers[v].module or ""), _anchor(producers[v].source)]
            for v in saved]  # fmt: skip
    return _table(["value", "bytes", "made by", "module", "user line"], rows)


def _passes(plan: Any) -> str:
    rows = [[s.name, s.nodes_before, s.nodes_after, f"{s.bytes_saved / 2**20:.2f}",
             html.escape(s.note)] for s in plan.stats]  # fmt: skip
    return _table(["pass", "nodes before", "nodes after", "MiB saved", "note"], rows)


def _graph_views(plan: Any, prof: Profile) -> str:
    """The graph with nothing open, and with each module open in place: one SVG each, the
    page's script shows one at a time."""
    parts = []
    for path, svg in drawing.views(plan.graph, prof.seconds):
        key = html.escape(drawing.display(path), quote=True)
        hidden = " hidden" if path else ""
        parts.append(f'<div class="tg-view" data-path="{key}"{hidden}>{svg}</div>')
    return "".join(parts)


CSS = """body{font:14px system-ui,sans-serif;margin:1.5em;max-width:1600px}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-size:13px}pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}
.c{color:#777}.c a{color:#2060a0}img{max-width:100%}
#tg-graph{border:1px solid #ccc;height:75vh;min-height:120px;overflow:hidden;cursor:grab;
position:relative;background:#fff}#tg-pane{transform-origin:0 0;position:absolute;left:0;top:0}
.tg_module,.tg_cluster .tg_head{cursor:pointer}.tg_module:hover rect{stroke:#2060a0}
#tg-bar{margin:.4em 0}#tg-bar button{margin-right:.4em}#tg-crumbs a{cursor:pointer;color:#2060a0}
"""

GRAPH_JS = """(function(){
var box=document.getElementById('tg-graph'),pane=document.getElementById('tg-pane');
var crumbs=document.getElementById('tg-crumbs');if(!box||!pane)return;
var views={};pane.querySelectorAll('.tg-view').forEach(function(v){views[v.dataset.path]=v;});
var t={x:0,y:0,k:1};function apply(){pane.style.transform='translate('+t.x+'px,'+t.y+'px) '+
'scale('+t.k+')';}
function parent(p){if(!p||p.indexOf(':')>=0)return '';var i=p.lastIndexOf('.');
return i<0?'':p.slice(0,i);}
function crumb(p){crumbs.innerHTML='';var chain=[],q=p;while(q){chain.unshift(q);q=parent(q);}
chain.unshift('');chain.forEach(function(c,i){var a=document.createElement('a');
a.textContent=c||'step';a.onclick=function(){show(c);};if(i)crumbs.append(' \\u203a ');
crumbs.append(a);});}
function show(p){if(!(p in views))p='';for(var k in views)views[k].hidden=(k!==p);
window.tgPath=p;crumb(p);t={x:0,y:0,k:1};var v=views[p];apply();
box.style.height=Math.min(0.75*innerHeight,v.querySelector('svg').getBoundingClientRect().height+
24)+'px';var r0=box.getBoundingClientRect();
var c=v.querySelector('.tg_cluster[data-module="'+CSS.escape(p)+'"]');apply();if(c){
var r=c.getBoundingClientRect();t.x=Math.min(0,r0.left-r.left+16);
t.y=Math.min(0,r0.top-r.top+16);apply();}}
window.tgShow=show;
pane.addEventListener('click',function(e){if(moved)return;
var m=e.target.closest('.tg_module');if(m){show(m.dataset.module);return;}
var h=e.target.closest('.tg_cluster');if(h&&e.target.closest('.tg_head,text')){
show(parent(h.dataset.module));}});
box.addEventListener('wheel',function(e){e.preventDefault();var k=e.deltaY>0?1/1.15:1.15;
var r=box.getBoundingClientRect(),mx=e.clientX-r.left,my=e.clientY-r.top;
t.x=mx-(mx-t.x)*k;t.y=my-(my-t.y)*k;t.k*=k;apply();},{passive:false});
var drag=null,moved=false;box.addEventListener('mousedown',function(e){
drag={x:e.clientX,y:e.clientY};moved=false;});
window.addEventListener('mouseup',function(){drag=null;});
box.addEventListener('mousemove',function(e){if(!drag)return;var dx=e.clientX-drag.x,
dy=e.clientY-drag.y;if(Math.abs(dx)+Math.abs(dy)>3)moved=true;t.x+=dx;t.y+=dy;
drag={x:e.clientX,y:e.clientY};apply();});
document.getElementById('tg-top').onclick=function(){show('');};
document.getElementById('tg-fit').onclick=function(){var v=views[window.tgPath],
s=v.querySelector('svg'),r=box.getBoundingClientRect(),w=s.getBoundingClientRect();
var k=Math.min(r.width/(w.width/t.k),r.height/(w.height/t.k),1);t={x:0,y:0,k:k};apply();};
document.getElementById('tg-one').onclick=function(){t={x:0,y:0,k:1};apply();};
var start=decodeURIComponent((location.hash.match(/module=([^&]*)/)||[])[1]||'');show(start);
})();"""


def html_page(plan: Any, text: str, name: str = "step") -> str:
    """The report page; every picture inline."""
    require_matplotlib()
    prof = profile(plan)
    buf = io.BytesIO()
    timeline_figure(plan, prof).savefig(buf, format="png", dpi=100)
    png = base64.b64encode(buf.getvalue()).decode()
    name = html.escape(name)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>tracegrad report: {name}"
        f"</title><style>{CSS}</style></head><body>",
        f"<h1>tracegrad report: {name}</h1><pre>{html.escape(text)}</pre>",
        "<h2>Graph</h2><p>One box per module (ops, time, bytes its ops allocate): click one to "
        "open it, click an open module's title to close it. Ops are named by their results as "
        "in graph.txt; colours: forward, backward, update, recomputed; dashed: a fused kernel; "
        "red: values saved for backward. Wheel to zoom, drag to pan; hover for details.</p>",
        "<div id='tg-bar'><button id='tg-top'>close all</button><button id='tg-one'>100%"
        "</button><button id='tg-fit'>fit</button> <span id='tg-crumbs'></span></div>",
        f"<div id='tg-graph'><div id='tg-pane'>{_graph_views(plan, prof)}</div></div>",
        "<h2>Memory timeline</h2>",
        f"<img alt='memory timeline' src='data:image/png;base64,{png}'>",
        "<h2>Passes</h2>", _passes(plan),
        "<h2>Saved for backward (largest first)</h2>", _saved(plan),
        "<h2>Modules (slowest first)</h2>", _modules(plan, prof),
        "<h2>Slowest statements</h2>", _statements(plan, prof),
        "<h2>Kernels (slowest first)</h2>", _kernels(plan, prof),
        "<h2>The plan</h2>", _source_html(plan.source),
        "<h2>User lines</h2>", _user_lines(plan.graph),
        f"<script>{GRAPH_JS}</script></body></html>",
    ]  # fmt: skip
    return "\n".join(parts)


# --- TRACEGRAD_DUMP -----------------------------------------------------------------------------


_dumps: dict[tuple[str, str], int] = {}  # (root, function name) -> plans dumped there so far


def dump(plan: Any, text: str, root: str, name: str) -> str:
    """Write graph.txt, graph.svg, plan.py, trace.json, timeline.png and report.html for one
    plan into `root/<name>-<n>/` (n counts this process's plans of functions so named); returns
    that directory."""
    _dumps[root, name] = index = _dumps.get((root, name), 0) + 1
    where = os.path.join(root, f"{name}-{index}")
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "graph.txt"), "w", encoding="utf-8") as f:
        f.write(str(plan.graph) + "\n")
    with open(os.path.join(where, "plan.py"), "w", encoding="utf-8") as f:
        f.write(plan.source)
    plan.graph.to_svg(os.path.join(where, "graph.svg"))
    profile(plan).export_chrome_trace(os.path.join(where, "trace.json"))
    try:
        memory_timeline(plan, os.path.join(where, "timeline.png"))
        Report(text, plan, name).to_html(os.path.join(where, "report.html"))
    except ImportError as e:  # the step itself ran: say what is missing rather than fail it
        warnings.warn(f"TRACEGRAD_DUMP wrote only graph.txt, graph.svg, plan.py and trace.json "
                      f"to {where}: {e}", stacklevel=3)  # fmt: skip
    return where

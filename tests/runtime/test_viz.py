"""Pictures, reports and profiles of a compiled step: Graph.to_svg by module, the memory
timeline, report() and its HTML page (rendered in headless Chromium when it is installed), the
Chrome trace, TRACEGRAD_DUMP, `python -m tracegrad`, the kernel-compilation progress line."""

from __future__ import annotations

import html
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
from passes.base import is_view
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.core import drawing
from tracegrad.nn import functional as F
from tracegrad.runtime import report as text_report
from tracegrad.runtime import viz

ROOT = Path(__file__).resolve().parents[2]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason='matplotlib missing: pip install ".[viz]"')
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not on PATH (apt-get install chromium)"
)
ENGINES = [
    "layered",
    pytest.param(
        "dot",
        marks=pytest.mark.skipif(
            not shutil.which("dot"), reason="no dot: apt-get install graphviz"
        ),
    ),  # fmt: skip
]


def make_step(backend: str = "numba", batch: int = 64, width: int = 16):
    """A GELU MLP step with SGD momentum: forward, backward and update phases, fused groups."""
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, width), nn.GELU(), nn.Linear(width, 3))
    gm = tg.GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @tg.trace(backend=backend)
    def train_step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return train_step, model, (x, y)


@pytest.fixture
def step(monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)  # every fused group becomes a kernel
    train_step, model, args = make_step()
    train_step(*args)
    train_step(*args)
    return train_step


@pytest.fixture
def no_dot(monkeypatch):
    """Pictures as a machine without Graphviz draws them."""
    monkeypatch.setattr(drawing, "shutil", type("NoDot", (), {"which": staticmethod(
        lambda name: None)}))  # fmt: skip


def graph_names(graph) -> set[str]:
    """The value names str(graph) (graph.txt) shows: the results of every line."""
    return set(re.findall(r"\b([a-z]+):(?:f|i|u|bool)\w*\[", str(graph)))


def svg_elements(svg: str, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [e for e in root.iter() if cls in (e.get("class") or "").split()]


def tooltip(e: ET.Element, svg: str) -> str:
    title = e.find("{http://www.w3.org/2000/svg}title")
    if title is not None and title.text:
        return title.text
    m = re.search(rf'<g id="a_{e.get("id")}"><a xlink:title="([^"]*)"', svg)  # dot's own
    return html.unescape(m.group(1)) if m else ""


@pytest.mark.parametrize("engine", ENGINES)
def test_expanded_svg_has_one_box_per_statement_named_as_graph_txt(step, engine, tmp_path):
    graph = step.graph
    assert any(n.op == "fused" for n in graph.nodes)
    svg = graph.to_svg(tmp_path / "g.svg", engine=engine, expand=True)
    assert (tmp_path / "g.svg").read_text() == svg
    boxes = svg_elements(svg, "tg_node")
    names = graph.names()
    by_name = {names[n.outputs[0]]: n for n in graph.nodes}
    assert sorted(e.get("id") for e in boxes) == sorted(by_name)
    assert {e.get("id") for e in boxes} <= graph_names(graph)
    for e in boxes:
        n, tip = by_name[e.get("id")], tooltip(e, svg)
        assert n.op in tip or n.op == "fused"
        assert str(n.phase) in tip and n.source in tip and (n.module or "(none)") in tip
        assert n.outputs[0].type_str in tip
    saved = {id(n) for n in graph.nodes for v in n.outputs if v in set(graph.residuals())}
    assert svg.count("saved for backward:") == len(saved) > 0
    for phase in ("forward", "backward", "update"):
        assert drawing.PHASE_COLOURS[phase] in svg
    clusters = {e.get("data-module") for e in svg_elements(svg, "tg_cluster")}
    assert {"0", "1", "2"} <= clusters  # the Sequential's layers


@pytest.mark.parametrize("engine", ENGINES)
def test_collapsed_svg_has_one_box_per_top_level_module(step, engine):
    graph = step.graph
    svg = graph.to_svg(engine=engine)
    modules = {e.get("data-module"): e for e in svg_elements(svg, "tg_module")}
    assert {"0", "1", "2"} <= set(modules) and not svg_elements(svg, "tg_cluster")
    ops = sum(len(n.attrs["body"].nodes) if n.op == "fused" else 1 for n in graph.nodes
              if n.module == "2")  # fmt: skip
    assert f"{ops} ops" in "".join(modules["2"].itertext())
    opened = graph.to_svg(engine=engine, expand=["2"])
    inside = {e.get("id") for e in svg_elements(opened, "tg_node")}
    names = graph.names()
    assert {names[n.outputs[0]] for n in graph.nodes if n.module == "2"} <= inside
    with pytest.raises(ValueError, match="no module or user line 'nope'"):
        graph.to_svg(engine=engine, expand=["nope"])


def test_layered_layout_keeps_boxes_apart_and_clusters_around_their_boxes(step):
    sc = drawing.scene(step.graph, expand=True)
    drawing.layout(sc)
    boxes = list(sc.root.boxes())
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
            assert apart, (a.key, b.key)
    for c in sc.root.clusters():
        for b in c.boxes():
            assert c.x <= b.x and b.x + b.w <= c.x + c.w and c.y <= b.y and b.y + b.h <= c.y + c.h
    for a, b, _ in sc.edges:  # an edge along the schedule points down
        if a.order < b.order:
            assert b.y > a.y


@pytest.mark.skipif(not shutil.which("dot"), reason="no dot: apt-get install graphviz")
def test_a_graph_dot_lays_out_too_slowly_is_drawn_with_the_layered_layout(step, monkeypatch):
    from tracegrad.core import drawing

    monkeypatch.setattr(drawing, "DOT_SECONDS", 1e-6)
    with pytest.warns(UserWarning, match="took over 1e-06 s"):
        svg = step.graph.to_svg(engine="dot")
    assert svg == step.graph.to_svg(engine="layered")


def test_to_svg_rejects_an_unknown_engine(step):
    with pytest.raises(ValueError, match="unknown engine"):
        step.graph.to_svg(engine="neato")


def test_lifetimes_stack_every_live_value_by_kind(step):
    plan = step.latest
    graph = plan.graph
    lives = viz.lifetimes(plan)
    kinds = {life.value: life.kind for life in lives}
    assert {kinds[v] for v in graph.inputs[: len(plan.capture.args)]} == {"batch inputs"}
    assert {"parameters", "gradients", "optimizer state"} <= set(kinds.values())
    views = {v for n in graph.nodes if n.prim.is_view(n.inputs, n.attrs) for v in n.outputs}
    for v in set(graph.residuals()) - views:  # every saved value that owns bytes is stacked
        assert kinds[v] == "saved activations"
    rows = viz.stacked(lives, len(graph.nodes))
    # the stack's total after node i, counted again by hand from the schedule
    last = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            last[v] = i
    end = len(graph.nodes) - 1
    for v in graph.outputs:
        last[v] = end
    reused = set(plan.memory.reuse.values())

    def in_state(v):  # written into a state input's buffer (the update in place)
        while v in plan.memory.reuse:
            v = plan.memory.reuse[v]
        return v in graph.inputs

    for i in range(len(graph.nodes)):
        live = sum(v.nbytes for v in graph.inputs)
        for j, n in enumerate(graph.nodes[: i + 1]):
            if is_view(n):
                continue
            for v in n.outputs:
                if in_state(v):
                    continue
                if v in reused:
                    taker = next(k for k, x in plan.memory.reuse.items() if x is v)
                    dies = next(t for t, m in enumerate(graph.nodes) if taker in m.outputs) - 1
                else:
                    dies = min(last.get(v, j), end)
                live += v.nbytes if i <= dies else 0
        assert rows[:, i].sum() == live


def test_measured_profile_follows_the_plan_and_changes_nothing(monkeypatch):
    train_step, model, args = make_step(backend="numpy", batch=2048, width=64)
    train_step(*args)
    before = [p.numpy().copy() for p in model.parameters()]
    plan = train_step.latest
    prof = train_step.profile()
    for p, old in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), old)
    fixed = sum(v.nbytes for v in plan.graph.inputs)
    planned = fixed + plan.memory.peak
    assert 0.8 * planned <= max(prof.bytes_after) <= 1.25 * planned
    assert abs(prof.peak - plan.run.peak) <= 0.05 * plan.run.peak  # as a call measures it
    assert prof.peak >= max(prof.bytes_after) - fixed  # with what ops allocate inside
    assert len(prof.seconds) == len(plan.graph.nodes) and sum(prof.seconds) > 0
    matmuls = [s for s, n in zip(prof.seconds, plan.graph.nodes, strict=True) if n.op == "matmul"]
    assert max(matmuls) > 0  # the slow statements are timed where they run
    starts = []  # tracemalloc slows what allocates: one run counts bytes, the others time
    monkeypatch.setattr(tracemalloc, "start", lambda real=tracemalloc.start: (
        starts.append(1), real())[1])  # fmt: skip
    viz.profile(plan, repeat=3)
    assert len(starts) == 1


def test_profile_runs_a_calls_arguments_or_zeros_and_changes_nothing(monkeypatch):
    """Given arguments, the plan runs on them (zeros can take slower paths than data: subnormal
    gradients); without, on zeros; either way the parameters stay as they were."""
    from tracegrad.runtime import profile as profiling

    train_step, model, (x, y) = make_step(backend="numpy")
    train_step(x, y)
    before = [p.numpy().copy() for p in model.parameters()]
    seen = []
    real = profiling._instrumented
    monkeypatch.setattr(profiling, "_instrumented", lambda fn, views, inputs, *rest: (
        seen.append(inputs[:2]), real(fn, views, inputs, *rest))[1])  # fmt: skip
    prof = train_step.profile(repeat=1, args=(x, y))
    assert len(seen) == 2 and all(a is x and b is y for a, b in seen)
    assert len(prof.seconds) == len(train_step.graph.nodes)
    seen.clear()
    train_step.profile(repeat=1)
    assert not seen[0][0].any() and seen[0][0].shape == x.shape
    for p, old in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), old)
    with pytest.raises(ValueError, match="no plan runs these arguments"):
        train_step.profile(args=(x[:5], y[:5]))
    w = tg.tensor(np.ones((8, 3), np.float32), requires_grad=True)
    loss = tg.trace(lambda x: (tg.tensor(x) @ w).sum())  # a forward: its backward apart
    loss(x).backward()
    assert len(loss.profile(repeat=1).seconds) == len(loss.graph.nodes)
    with pytest.raises(ValueError, match="call profile\\(\\) without arguments"):
        loss.profile(args=(x,))


def test_profile_exports_a_chrome_trace_of_the_plans_statements(step, tmp_path):
    prof = step.profile(repeat=2)
    prof.export_chrome_trace(tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    graph, names = step.graph, step.graph.names()
    statements = [e for e in events if e.get("cat", "").startswith("statement")]
    assert len(statements) == len(graph.nodes)
    assert [e["args"]["node"] for e in statements] == list(range(len(graph.nodes)))
    end = 0.0
    for e, n, seconds in zip(statements, graph.nodes, prof.seconds, strict=True):
        assert e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 1
        assert e["name"].startswith("fused{") if n.op == "fused" else e["name"] == n.op
        assert e["args"]["module"] == n.module and e["args"]["line"] == n.source
        assert e["args"]["results"].split(":")[0] == names[n.outputs[0]]
        assert e["args"]["bytes"] == (0 if is_view(n) else sum(v.nbytes for v in n.outputs))
        assert e["args"]["kernel"] == (n in step.latest.kernels)
        assert e["ts"] == pytest.approx(end) and e["dur"] == pytest.approx(seconds * 1e6)
        end = e["ts"] + e["dur"]
    modules = [e for e in events if e.get("cat") == "module"]
    assert {e["name"] for e in modules} == {n.module for n in graph.nodes} - {None, ""}
    for m in modules:  # each module slice holds exactly a run of its statements
        inside = [s for s in statements if m["ts"] - 1e-6 <= s["ts"] and
                  s["ts"] + s["dur"] <= m["ts"] + m["dur"] + 1e-6]  # fmt: skip
        assert len(inside) == m["args"]["statements"]
        assert all((s["args"]["module"] or "").split(".")[: m["name"].count(".") + 1]
                   == m["name"].split(".") for s in inside)  # fmt: skip
    compiling = [e for e in events if e.get("cat") == "compile"]
    assert compiling and all(e["pid"] == 2 for e in compiling)
    assert any("kernels" in e["name"] for e in compiling)
    assert {e["args"]["name"] for e in events if e["ph"] == "M"} >= {
        "tracegrad: train_step, one call", "tracegrad: train_step, compilation"}  # fmt: skip


@needs_mpl
def test_timeline_shows_one_peak_the_reports_and_a_title(step, tmp_path):
    fig = step.memory_timeline(tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    plan = step.latest
    ax = fig.axes[0]
    assert ax.get_title(loc="left").startswith("train_step: live memory over the plan")
    peaks = [line for line in ax.lines if line.get_label() == "planned peak"]
    assert len(peaks) == 1 and not [line for line in ax.lines if line.get_linestyle() == ":"]
    inputs = sum(v.nbytes for v in plan.graph.inputs)
    x, y = peaks[0].get_data()
    assert list(x) == [plan.memory.peak_at] and y[0] == pytest.approx((inputs + plan.memory.peak)
                                                                      / 2**20)  # fmt: skip
    texts = "\n".join(t.get_text() for t in fig.texts + ax.texts)
    assert texts.count("peak") == 2  # the marker's label and the list of what is live there
    assert f"planned peak {drawing.size_text(plan.memory.peak)}" in texts
    assert f"live at the planned peak (node {plan.memory.peak_at})" in texts
    biggest = viz.live_at(viz.lifetimes(plan), plan.memory.peak_at)[0]
    assert viz.describe(biggest) in texts


def test_report_counts_each_kernel_once(step):
    plan = step.latest
    kinds = {n.op for n in plan.kernels}
    assert "fused" in kinds and kinds - {"fused"}  # fused groups and ops' own kernels
    header = str(step.report()).splitlines()[0]
    assert f"nodes, {len(plan.kernels)} kernels (" in header
    if not HAS_MPL:
        return
    page = step.to_html()
    section = page.split("<h2>Kernels (slowest first)</h2>")[1].split("<h2>")[0]
    assert section.count("<tr>") == 1 + len(plan.kernels)
    assert f"<p>{len(plan.kernels)} kernels (" in section


@pytest.fixture
def held_kernels(monkeypatch):
    """Background compilation, its kernels held back until the test sets the event."""
    monkeypatch.setenv("TRACEGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    release, real = threading.Event(), lowering.lower

    def held_back(graph, backend, compile=True, background=False):
        if background:
            assert release.wait(60)
        return real(graph, backend, compile, background)

    monkeypatch.setattr(lowering, "lower", held_back)
    return release


def test_measured_peak_is_of_the_plan_the_report_describes(held_kernels):
    train_step, _, args = make_step(batch=512, width=64)
    for _ in range(3):
        train_step(*args)  # the NumPy stand-in, its kernels still compiling
    held_kernels.set()
    text = str(train_step.report())
    plan = train_step.latest
    assert plan.kernels and plan.calls == 3
    line = next(s for s in text.splitlines() if s.startswith("measured peak"))
    assert "an instrumented run for this report: no call has run this plan yet" in line
    measured = float(line.rsplit(": ", 1)[1].split()[0])
    assert abs(measured - plan.memory.peak / 2**20) <= 0.1 * plan.memory.peak / 2**20 + 0.05
    assert re.search(r"calls 1-3 ran the same graph as NumPy calls while its kernels compiled "
                     r"\(ready after [\d.]+ s\); this plan runs from call 4 on", text)  # fmt: skip
    train_step(*args)  # the first call on the kernels measures itself
    assert "measured peak (tracemalloc, call 4): " in str(train_step.report())
    train_step(*args)
    assert "measured peak (tracemalloc, call 4): " in str(train_step.report())


def test_a_plan_compiled_before_its_first_call_says_nothing_of_a_stand_in(step):
    text = str(step.report())
    assert "measured peak (tracemalloc, call 1): " in text and "NumPy calls" not in text


def test_report_prints_and_writes_one_page_from_the_step(step, tmp_path):
    report = step.report()
    assert str(report) == text_report.report(step.latest) == repr(report)
    if not HAS_MPL:
        with pytest.raises(ImportError, match=r"tracegrad\[viz\]"):
            step.to_html()
        return
    page = step.to_html(tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text() == page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from the network
    assert "data:image/png;base64," in page
    views = re.findall(r'<div class="tg-view" data-path="([^"]*)"', page)
    assert views[0] == "" and {"0", "1", "2"} <= set(views)
    saved = page.split("Saved for backward")[1].split("<h2>")[0]
    assert saved.count("<tr>") == 1 + len(step.graph.residuals())
    slowest = page.split("Slowest statements")[1].split("<h2>")[0]
    assert " ms in all" in slowest and slowest.count("<tr>") == 1 + min(15, len(step.graph.nodes))
    modules = page.split("Modules (slowest first)")[1].split("<h2>")[0]
    assert all(f"<td>{m}</td>" in modules for m in ("0", "1", "2"))
    assert "def train_step(_arena" in page


def test_pictures_of_the_graph_need_no_matplotlib(step, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'pip install "tracegrad\[viz\]"'):
        step.memory_timeline()
    assert svg_elements(step.graph.to_svg(engine="layered"), "tg_module")


@needs_mpl
def test_dump_writes_each_signature(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEGRAD_DUMP", str(tmp_path))
    train_step, _, (x, y) = make_step(backend="numpy")
    train_step(x, y)
    train_step(x, y)  # same plan: nothing new
    train_step(x[:10], y[:10])
    assert [Path(d).name for d in train_step.dumped] == ["train_step-1", "train_step-2"]
    for d in train_step.dumped:
        files = sorted(os.listdir(d))
        assert files == ["graph.svg", "graph.txt", "plan.py", "report.html", "timeline.png",
                         "trace.json"]  # fmt: skip
    second = Path(train_step.dumped[1])
    assert (second / "plan.py").read_text() == train_step.source
    assert (second / "graph.txt").read_text() == str(train_step.graph) + "\n"
    assert json.loads((second / "trace.json").read_text())["traceEvents"]
    another, _, _ = make_step(backend="numpy")  # a function of the same name: its own place
    another(x, y)
    assert [Path(d).name for d in another.dumped] == ["train_step-3"]


def test_cli_help_and_report(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "tracegrad", "--help"], capture_output=True,
                         text=True, env=env)  # fmt: skip
    assert out.returncode == 0 and "report" in out.stdout
    if not HAS_MPL:
        return
    script = tmp_path / "tiny.py"
    script.write_text(
        "import sys, numpy as np, tracegrad as tg\n"
        "w = tg.tensor(np.ones(3, np.float32), requires_grad=True)\n"
        "@tg.trace(backend='numpy')\n"
        "def step(x):\n"
        "    loss = (w * x).sum()\n"
        "    loss.backward()\n"
        "    return loss\n"
        "step(np.arange(3, dtype=np.float32))\n"
        "print('argv', sys.argv[1:])\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "tracegrad", "report", str(script), "a", "-o", str(tmp_path / "o")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "argv ['a']" in out.stdout
    report = tmp_path / "o" / "step-1" / "report.html"
    assert str(report) in out.stderr and report.exists()


def test_progress_line_only_when_compiling_is_slow(monkeypatch):
    quiet = io.StringIO()
    p = lowering.Progress(3, quiet)
    for _ in range(3):
        p.step()
    p.close()
    assert quiet.getvalue() == ""
    monkeypatch.setattr(lowering, "PROGRESS_AFTER", 0.0)
    loud = io.StringIO()
    p = lowering.Progress(3, loud)
    for _ in range(3):
        p.step()
    p.close()
    assert "compiling kernels 1/3" in loud.getvalue()
    assert loud.getvalue().endswith("compiled 3 kernels in 0.0 s\n")


def test_progress_line_from_a_real_compile(monkeypatch, capsys):
    monkeypatch.setattr(lowering, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    train_step, _, args = make_step()
    train_step(*args)
    kernels = sum(n.prim.kind == "composite" for n in train_step.graph.nodes)
    said = re.search(r"tracegrad: compiled (\d+) kernels", capsys.readouterr().err)
    assert said and 1 <= int(said.group(1)) <= kernels  # distinct kernels: layers share


# --- in a browser -------------------------------------------------------------------------------

PROBE = """<script>(function(){var out={console:[]};
function visible(){return document.querySelector('.tg-view:not([hidden])');}
function shown(){var v=visible();return {path:v.dataset.path,
 modules:[].map.call(v.querySelectorAll('.tg_module'),function(e){return e.dataset.module;}),
 clusters:[].map.call(v.querySelectorAll('.tg_cluster'),function(e){return e.dataset.module;}),
 nodes:[].map.call(v.querySelectorAll('.tg_node'),function(e){return e.dataset.name;})};}
function click(m){var e=visible().querySelector('.tg_module[data-module="'+m+'"]');
 if(e)e.dispatchEvent(new MouseEvent('click',{bubbles:true}));return !!e;}
out.top=shown();var s=visible().querySelector('svg');
var t=s.querySelector('.tg_node text, .tg_module text');
out.font=parseFloat(getComputedStyle(t).fontSize)*s.getScreenCTM().a;
out.height=s.getBoundingClientRect().height;
out.steps=[];(__CLICKS__).forEach(function(m){out.steps.push([m,click(m),shown()]);});
var last=out.steps[out.steps.length-1][0];
var head=visible().querySelector('.tg_cluster[data-module="'+last+'"] text');
if(head)head.dispatchEvent(new MouseEvent('click',{bubbles:true}));out.closed=shown();
out.all=[].map.call(document.querySelectorAll('.tg_node'),function(e){return e.dataset.name;});
var pre=document.createElement('pre');pre.id='tg-test';pre.textContent=JSON.stringify(out);
document.body.appendChild(pre);})();</script></body>"""


def in_chromium(page: Path, clicks: list[str], tmp_path: Path) -> dict:
    """Load the report in headless Chromium, click the modules `clicks` in turn, close the last,
    and read back what each view showed; no console message may appear."""
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", PROBE.replace(
        "__CLICKS__", json.dumps(clicks)), 1))  # fmt: skip
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1400,1000", "--enable-logging=stderr", "--v=0", "--dump-dom",
         probe.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert [line for line in out.stderr.splitlines() if ":CONSOLE" in line] == []
    found = re.search(r'<pre id="tg-test">(.*?)</pre>', out.stdout, re.S)
    assert found, out.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def gpt_step(monkeypatch):
    """The GPT step of benchmarks/models.py (narrower: the structure is what is drawn)."""
    pytest.importorskip("tqdm", reason="the examples extra is not installed")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_models", ROOT / "benchmarks/models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    monkeypatch.setitem(models.GPT, "d", 32)
    monkeypatch.setitem(models.GPT, "context", 32)
    run = models.build_tg("gpt", traced=True)
    run()
    run()
    return run.traced, models.GPT["layers"]


@needs_chromium
@needs_mpl
@pytest.mark.parametrize("engine", ENGINES)
def test_gpt_report_opens_module_by_module_in_chromium(monkeypatch, tmp_path, engine, request):
    if engine == "layered":
        request.getfixturevalue("no_dot")
    step, layers = gpt_step(monkeypatch)
    page = tmp_path / "report.html"
    step.to_html(page)
    seen = in_chromium(page, ["blocks", "blocks.0"], tmp_path)
    graph = step.graph
    top = seen["top"]
    assert top["path"] == "" and {"tok", "pos", "blocks", "ln", "head"} <= set(top["modules"])
    assert seen["font"] >= 11  # readable without zooming
    assert seen["height"] < 1500  # the collapsed step fits a screen or two
    (_, found, blocks), (_, found0, block0) = seen["steps"]
    assert found and found0
    assert blocks["clusters"] == ["blocks"]
    assert {f"blocks.{i}" for i in range(layers)} <= set(blocks["modules"])
    assert block0["clusters"] == ["blocks", "blocks.0"]
    names = graph.names()
    own = {names[n.outputs[0]] for n in graph.nodes if n.module == "blocks.0"}
    assert own and own <= set(block0["nodes"])  # its ops, by their graph.txt names
    assert {"blocks.0.ln1", "blocks.0.qkv"} <= set(block0["modules"])
    assert seen["closed"]["path"] == "blocks"  # its title closes it
    assert set(seen["all"]) <= graph_names(graph)  # every box is named as in graph.txt
    views = set(re.findall(r'class="tg-view" data-path="([^"]*)"', page.read_text()))
    assert {f"blocks.{i}" for i in range(layers)} <= views


@needs_chromium
@needs_mpl
@pytest.mark.parametrize("engine", ENGINES)
def test_digits_report_renders_in_chromium(monkeypatch, tmp_path, engine, request):
    pytest.importorskip("sklearn", reason="the examples extra is not installed")
    if engine == "layered":
        request.getfixturevalue("no_dot")
    spec = importlib.util.spec_from_file_location("train_digits", ROOT / "examples/train_digits.py")
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    traced = []
    original = tg.trace
    monkeypatch.setattr(tg, "trace", lambda fn=None, **kw: traced.append(original(fn, **kw))
                        or traced[-1])  # fmt: skip
    digits.train(max_steps=2, progress=False)
    (step,) = traced
    page = tmp_path / "report.html"
    step.to_html(page)
    assert ('class="graph"' in page.read_text()) == (engine == "dot")  # dot's own group
    modules = sorted({n.module.split(".")[0] for n in step.graph.nodes if n.module})
    seen = in_chromium(page, [modules[0]], tmp_path)
    assert set(modules) <= set(seen["top"]["modules"])
    ((_, found, opened),) = seen["steps"]
    names = step.graph.names()
    assert found and {names[n.outputs[0]] for n in step.graph.nodes
                      if n.module == modules[0]} <= set(opened["nodes"])  # fmt: skip

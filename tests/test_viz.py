"""Pictures and reports of a compiled step: Graph.to_svg, step.memory_timeline, report().to_html
(rendered in headless Chromium when it is installed), TRACEGRAD_DUMP, `python -m tracegrad`,
the kernel-compilation progress line, and the error naming the `viz` extra."""

from __future__ import annotations

import html
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
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

ROOT = Path(__file__).resolve().parent.parent
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason='matplotlib missing: pip install ".[viz]"')


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


def drawn_ops(graph) -> dict:
    """The ops a picture shows by their element ids: fused groups' members instead of the
    group."""
    out = {}
    for i, n in enumerate(graph.nodes):
        if n.prim.kind == "composite":
            out.update((f"op{i}m{j}", m) for j, m in enumerate(n.attrs["body"].nodes))
        else:
            out[f"op{i}"] = n
    return out


def svg_nodes(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [e for e in root.iter() if "tg_node" in (e.get("class") or "").split()]


def tooltip(e: ET.Element) -> str:
    return " ".join(t for t in e.itertext())  # <title> (matplotlib) or one in <a> (dot)


ENGINES = [
    pytest.param("matplotlib", marks=needs_mpl),
    pytest.param("dot", marks=pytest.mark.skipif(not shutil.which("dot"), reason="no dot")),
]


@pytest.mark.parametrize("engine", ENGINES)
def test_svg_has_one_element_per_op_with_its_tooltip(step, engine, tmp_path):
    graph = step.graph
    assert any(n.prim.kind == "composite" for n in graph.nodes)  # clusters to draw
    svg = graph.to_svg(tmp_path / "g.svg", engine=engine)
    assert (tmp_path / "g.svg").read_text() == svg
    elements = svg_nodes(svg)
    ops = drawn_ops(graph)
    assert sorted(e.get("id") for e in elements) == sorted(ops)
    for e in elements:
        n = ops[e.get("id")]
        tip = tooltip(e) if engine == "matplotlib" else _dot_tooltip(svg, e.get("id"))
        assert n.op in tip and n.phase in tip and n.source in tip
        assert n.outputs[0].type_str in tip
    producers = {v: m for m in ops.values() for v in m.outputs}
    keepers = {id(producers[v]) for v in graph.residuals()}
    marked = svg.count("saved for backward:")
    assert marked == len(keepers) > 0
    for phase in ("forward", "backward", "update"):
        assert drawing.PHASE_COLOURS[phase] in svg
    assert svg.count("fused (") == sum(n.prim.kind == "composite" for n in graph.nodes)


def _dot_tooltip(svg: str, key: str) -> str:
    m = re.search(rf'<g id="a_{key}"><a xlink:title="([^"]*)"', svg)
    return html.unescape(m.group(1)) if m else ""


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
    for i in range(len(graph.nodes)):
        live = sum(v.nbytes for v in graph.inputs)
        for j, n in enumerate(graph.nodes[: i + 1]):
            if is_view(n):
                continue
            for v in n.outputs:
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
    prof = viz.profile(plan)
    for p, old in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), old)
    fixed = sum(v.nbytes for v in plan.graph.inputs)
    planned = fixed + plan.memory.peak
    assert 0.8 * planned <= max(prof.bytes_after) <= 1.25 * planned
    assert len(prof.seconds) == len(plan.graph.nodes) and sum(prof.seconds) > 0
    matmuls = [s for s, n in zip(prof.seconds, plan.graph.nodes, strict=True) if n.op == "matmul"]
    assert max(matmuls) > 0  # the slow statements are timed where they run
    starts = []  # tracemalloc slows what allocates: one run counts bytes, the others time
    monkeypatch.setattr(viz.tracemalloc, "start", lambda real=viz.tracemalloc.start: (
        starts.append(1), real())[1])  # fmt: skip
    viz.profile(plan, repeat=3)
    assert len(starts) == 1


@needs_mpl
def test_memory_timeline_marks_the_peak(step, tmp_path):
    fig = step.memory_timeline(tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    texts = "\n".join(t.get_text() for t in fig.texts + fig.axes[0].texts)
    lives = viz.lifetimes(step.latest)
    peak = int(np.argmax(viz.stacked(lives, len(step.graph.nodes)).sum(axis=0)))
    assert f"live at the peak (node {peak})" in texts
    biggest = viz.live_at(lives, peak)[0]
    assert viz._where(biggest) in texts


def test_report_prints_as_before_and_writes_one_page(step, tmp_path):
    report = step.report()
    assert str(report) == text_report.report(step.latest) == repr(report)
    if not HAS_MPL:
        with pytest.raises(ImportError, match=r"tracegrad\[viz\]"):
            report.to_html()
        return
    page = report.to_html(tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text() == page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from the network
    assert "data:image/png;base64," in page and len(svg_nodes(_svg(page))) == len(
        drawn_ops(step.graph)
    )
    saved = page.split("Saved for backward")[1].split("<h2>")[0]
    assert saved.count("<tr>") == 1 + len(step.graph.residuals())
    slowest = page.split("Slowest statements")[1].split("<h2>")[0]
    assert " ms in all" in slowest and slowest.count("<tr>") == 1 + min(15, len(step.graph.nodes))
    kernels = page.split("Kernels (slowest first)")[1].split("<h2>")[0]
    n_kernels = sum(n.prim.kind == "composite" for n in step.graph.nodes)
    assert kernels.count("<tr>") == 1 + n_kernels and f"{n_kernels} kernels" in kernels
    assert "def train_step(_arena" in page


def _svg(page: str) -> str:
    return page[page.index("<svg") : page.index("</svg>") + 6]


def test_matplotlib_missing_names_the_extra(step, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'pip install "tracegrad\[viz\]"'):
        step.memory_timeline()
    with pytest.raises(ImportError, match=r"tracegrad\[viz\]"):
        step.graph.to_svg(engine="matplotlib")


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
        assert files == ["graph.svg", "graph.txt", "plan.py", "report.html", "timeline.png"]
    second = Path(train_step.dumped[1])
    assert (second / "plan.py").read_text() == train_step.source
    assert (second / "graph.txt").read_text() == str(train_step.graph) + "\n"
    another, _, _ = make_step(backend="numpy")  # a function of the same name: its own place
    another(x, y)
    assert [Path(d).name for d in another.dumped] == ["train_step-3"]


@needs_mpl
def test_readme_pictures_script(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("pictures", ROOT / "examples/pictures.py")
    pictures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pictures)
    monkeypatch.setattr(sys, "argv", ["pictures.py", "-o", str(tmp_path)])
    pictures.main()
    for name in ("graph.png", "timeline.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


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


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (apt-get install chromium)")
@pytest.mark.skipif(not HAS_MPL, reason='matplotlib missing: pip install ".[viz]"')
@pytest.mark.parametrize("without_dot", [False, True])
def test_digits_report_renders_in_chromium(monkeypatch, tmp_path, without_dot):
    pytest.importorskip("sklearn", reason="the examples extra is not installed")
    if without_dot:  # the matplotlib picture, as a pip-only install draws it
        monkeypatch.setattr(drawing, "shutil", type("NoDot", (), {"which": staticmethod(
            lambda name: None)}))  # fmt: skip
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
    step.report().to_html(page)
    assert ("Matplotlib" in page.read_text()) == without_dot
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    console = [line for line in out.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    dom = out.stdout
    assert "<h1>tracegrad report: train_step</h1>" in dom
    shown = re.findall(r'<g id="([^"]+)" class="[^"]*\btg_node\b', dom)
    assert sorted(shown) == sorted(drawn_ops(step.graph)) != []

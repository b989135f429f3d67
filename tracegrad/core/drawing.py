"""Pictures of a graph (`Graph.to_svg`): Graphviz lays it out when its `dot` program is installed,
otherwise a layered layout (networkx's topological generations) drawn with matplotlib, so a
pip-only install still gets one. Either way the SVG has one `tg_node` element per op (members of
a fused group inside the group's cluster), coloured by phase, the producers of values saved for
backward outlined in red, and a tooltip per op: op, result types, phase, the user's line.

Core layer: it reads the graph duck-typed (`ir` imports it) and knows the phases; matplotlib is
imported only when it draws (the `viz` extra)."""

from __future__ import annotations

import html
import io
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from tracegrad.core.vocabulary import Kind, Phase

Graph = Node = Value = Any  # ir's types: not imported, since ir.Graph.to_svg imports this module

PHASE_COLOURS = {
    Phase.FORWARD: "#a6cee3",
    Phase.BACKWARD: "#fdbf6f",
    Phase.UPDATE: "#b2df8a",
    Phase.RECOMPUTE: "#cab2d6",
    Phase.REBUILD: "#fb9a99",
}
INPUT_COLOUR = "#eeeeee"
SAVED_COLOUR = "#d62728"
VIZ_EXTRA = 'pip install "tracegrad[viz]"'


def require_matplotlib() -> Any:
    """matplotlib, or an error that names the extra that installs it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"this picture needs matplotlib: {VIZ_EXTRA}") from None
    return matplotlib


@dataclass
class Box:
    """One drawn op (or graph input): what the picture shows of it."""

    key: str
    label: str
    tooltip: str
    phase: Phase | None  # None: a graph input
    saved: bool = False


@dataclass
class Cluster:
    """A fused group: its members, drawn together."""

    key: str
    label: str
    members: list[Box] = field(default_factory=list)
    inner: list[tuple[str, str]] = field(default_factory=list)  # data edges between members


@dataclass
class Scene:
    """What to draw: top-level items (boxes and clusters) and the edges between them."""

    items: list[Box | Cluster]
    edges: list[tuple[str, str, bool]]  # (from item, to item, carries a saved value)

    @property
    def ops(self) -> list[Box]:
        out: list[Box] = []
        for it in self.items:
            if isinstance(it, Cluster):
                out += it.members
            elif it.phase is not None:
                out.append(it)
        return out


def scene(graph: Graph) -> Scene:
    """The graph as boxes, clusters (one per fused node) and item-to-item edges."""
    names = graph.names()
    saved = set(graph.residuals())
    owner: dict[Value, str] = {}  # value -> the top-level item that makes it
    items: list[Box | Cluster] = []
    for i, v in enumerate(graph.inputs):
        key = f"in{i}"
        label, tip = f"{names[v]}\n{v.type_str}", f"input {names[v]}: {v.type_str}"
        items.append(Box(key, label, tip, None, v in saved))
        owner[v] = key
    edges: dict[tuple[str, str], bool] = {}
    for i, n in enumerate(graph.nodes):
        body = n.attrs.get("body") if n.prim.kind is Kind.COMPOSITE else None
        key = f"op{i}"
        if body is not None:
            c = Cluster(key, f"fused ({len(body.nodes)} ops)")
            c.members = [_box(f"{key}m{j}", m, names, saved) for j, m in enumerate(body.nodes)]
            made = {v: f"{key}m{j}" for j, m in enumerate(body.nodes) for v in m.outputs}
            c.inner = list(
                dict.fromkeys(
                    (made[v], f"{key}m{j}")
                    for j, m in enumerate(body.nodes)
                    for v in m.inputs
                    if v in made
                )
            )
            items.append(c)
        else:
            items.append(_box(key, n, names, saved))
        for v in n.inputs:
            if v in owner:
                edges[(owner[v], key)] = edges.get((owner[v], key), False) or v in saved
        owner.update((v, key) for v in n.outputs)
    return Scene(items, [(a, b, s) for (a, b), s in edges.items()])


def _box(key: str, n: Node, names: dict[Value, str], saved: set[Value]) -> Box:
    types = ", ".join(f"{names.get(v, '?')}:{v.type_str}" for v in n.outputs)
    keeps = [names.get(v, "?") for v in n.outputs if v in saved]
    tip = f"{n.op} -> {types}\nphase: {n.phase}\n{n.source or 'no source line'}"
    if keeps:
        tip += f"\nsaved for backward: {', '.join(keeps)}"
    shape = n.outputs[0].type_str if n.outputs else ""
    return Box(key, f"{n.op}\n{shape}", tip, n.phase, bool(keeps))


def to_svg(graph: Graph, path: str | None = None, engine: str | None = None) -> str:
    """SVG text of the graph (written to `path` too, if given). `engine` is "dot" or
    "matplotlib"; by default dot when it is installed."""
    engine = engine or ("dot" if shutil.which("dot") else "matplotlib")
    if engine not in ("dot", "matplotlib"):
        raise ValueError(f"to_svg: unknown engine {engine!r} (use 'dot' or 'matplotlib')")
    sc = scene(graph)
    svg = _dot_svg(sc) if engine == "dot" else _matplotlib_svg(sc)
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
    return svg


# --- Graphviz -------------------------------------------------------------------------------


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_node(b: Box) -> str:
    fill = PHASE_COLOURS.get(b.phase, INPUT_COLOUR)
    border = f', color="{SAVED_COLOUR}", penwidth=2.5' if b.saved else ""
    shape = "ellipse" if b.phase is None else "box"
    cls = "tg_input" if b.phase is None else "tg_node"
    return (
        f"  {b.key} [id={_q(b.key)}, class={_q(cls)}, shape={shape}, style=filled, "
        f'fillcolor="{fill}", label={_q(b.label)}, tooltip={_q(b.tooltip)}{border}];'
    )


def dot_text(sc: Scene) -> str:
    """Graphviz text of a scene: fused groups as clusters, edges carrying saved values red."""
    lines = ["digraph tracegrad {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10];']
    entry: dict[str, str] = {}  # cluster -> a member to attach its edges to
    for it in sc.items:
        if isinstance(it, Cluster):
            lines.append(f"  subgraph cluster_{it.key} {{")
            lines.append(f'    label={_q(it.label)}; style="rounded,dashed"; color="#555555";')
            lines += ["  " + _dot_node(m) for m in it.members]
            lines += [f"    {a} -> {b};" for a, b in it.inner]
            lines.append("  }")
            entry[it.key] = it.members[0].key
        else:
            lines.append(_dot_node(it))
    for a, b, saved in sc.edges:
        attrs = [f"ltail=cluster_{a}"] if a in entry else []
        attrs += [f"lhead=cluster_{b}"] if b in entry else []
        if saved:
            attrs.append(f'color="{SAVED_COLOUR}"')
        lines.append(f"  {entry.get(a, a)} -> {entry.get(b, b)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines).replace("rankdir=TB;", "rankdir=TB; compound=true;", 1)


def _dot_svg(sc: Scene) -> str:
    out = subprocess.run(
        ["dot", "-Tsvg"], input=dot_text(sc), capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"dot failed: {out.stderr.strip()}")
    return out.stdout[out.stdout.index("<svg") :]  # no XML prolog: the SVG can be inlined


# --- matplotlib -----------------------------------------------------------------------------

COLUMNS = 6  # members per row inside a cluster
W, H = 1.0, 0.42  # a box, in data units (inches at scale 1)


def layers(sc: Scene) -> list[list[Box | Cluster]]:
    """Items by topological generation (networkx), so every edge points down."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(it.key for it in sc.items)
    g.add_edges_from((a, b) for a, b, _ in sc.edges)
    by_key = {it.key: it for it in sc.items}
    order = {it.key: i for i, it in enumerate(sc.items)}
    return [
        [by_key[k] for k in sorted(gen, key=order.get)] for gen in nx.topological_generations(g)
    ]


def _size(it: Box | Cluster) -> tuple[float, float]:
    if isinstance(it, Cluster):
        cols = min(len(it.members), COLUMNS)
        rows = -(-len(it.members) // COLUMNS)
        return cols * W * 0.9 + 0.2, rows * H + 0.35
    return W, H


def figure(graph: Graph) -> Any:
    """The matplotlib Figure of the graph's layered layout."""
    return _figure(scene(graph))[0]


def _figure(sc: Scene) -> tuple[Any, list[tuple[Any, Box]]]:
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch, Patch

    rows = layers(sc)
    gap = 0.45
    widths = [sum(_size(it)[0] for it in row) + gap * (len(row) - 1) for row in rows]
    heights = [max(_size(it)[1] for it in row) for row in rows]
    width = max(widths, default=1.0) + 0.4
    height = sum(heights) + gap * len(rows) + 1.6  # the top 1.0: the legend
    fig = Figure(figsize=(max(width, 6.0), height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-max(width, 6.0) / 2, max(width, 6.0) / 2)
    ax.set_ylim(-height + 0.6, 1.0)
    ax.axis("off")
    centre: dict[str, tuple[float, float, float, float]] = {}  # key -> (x, y, w, h)
    tips: list[tuple[Any, Box]] = []
    y = 0.0
    for row, row_w, row_h in zip(rows, widths, heights, strict=True):
        x = -row_w / 2
        for it in row:
            w, h = _size(it)
            centre[it.key] = (x + w / 2, y - h / 2, w, h)
            x += w + gap
        y -= row_h + gap
    for a, b, saved in sc.edges:  # edges first: boxes are drawn over them
        xa, ya, _, ha = centre[a]
        xb, yb, _, hb = centre[b]
        ax.annotate("", (xb, yb + hb / 2), (xa, ya - ha / 2), arrowprops={
            "arrowstyle": "-|>", "lw": 1.4 if saved else 0.6, "shrinkA": 0, "shrinkB": 0,
            "color": SAVED_COLOUR if saved else "#777777"})  # fmt: skip

    def box(b: Box, x: float, y: float, w: float, h: float, font: float) -> None:
        patch = FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
            fc=PHASE_COLOURS.get(b.phase, INPUT_COLOUR),
            ec=SAVED_COLOUR if b.saved else "#333333", lw=2.2 if b.saved else 0.6,
        )  # fmt: skip
        patch.set_gid(b.key)
        ax.add_patch(patch)
        tips.append((patch, b))
        ax.text(x, y, b.label, ha="center", va="center", fontsize=font)

    for it in sc.items:
        x, y, w, h = centre[it.key]
        if isinstance(it, Cluster):
            ax.add_patch(
                FancyBboxPatch(
                    (x - w / 2, y - h / 2),
                    w,
                    h,
                    fc="none",
                    ec="#555555",
                    ls="--",
                    boxstyle="round,pad=0,rounding_size=0.1",
                )
            )
            ax.text(x - w / 2 + 0.08, y + h / 2 - 0.12, it.label, fontsize=5.5, va="center")
            for j, m in enumerate(it.members):
                col, row = j % COLUMNS, j // COLUMNS
                mx = x - w / 2 + 0.1 + (col + 0.5) * W * 0.9
                my = y + h / 2 - 0.3 - (row + 0.5) * H
                box(m, mx, my, W * 0.82, H * 0.8, 4.5)
        else:
            box(it, x, y, w * 0.95, h, 5.5)
    handles = [Patch(fc=c, ec="#333333", label=p) for p, c in PHASE_COLOURS.items()]
    handles.append(
        Patch(fc="white", ec=SAVED_COLOUR, lw=2, label="makes a value saved for backward")
    )
    ax.legend(handles=handles, loc="upper left", fontsize=6, frameon=False)
    return fig, tips


def _matplotlib_svg(sc: Scene) -> str:
    """The figure as SVG, with each box's element given its class and a <title> tooltip."""
    matplotlib = require_matplotlib()
    fig, tips = _figure(sc)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tracegrad"}):
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    by_key = {b.key: b for _, b in tips}

    def titled(m: re.Match) -> str:
        b = by_key[m.group(1)]
        cls = "tg_input" if b.phase is None else "tg_node"
        return f'<g id="{b.key}" class="{cls}"><title>{html.escape(b.tooltip)}</title>'

    svg = re.sub(r'<g id="((?:in|op)\d+(?:m\d+)?)">', titled, svg)
    return svg[svg.index("<svg") :]

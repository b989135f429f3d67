"""Pictures of a graph (`Graph.to_svg`), grouped the way the model was written.

Every node of a traced step knows the module it was made in (`Node.module`: `blocks.2.attn`).
A picture nests the nodes in clusters by that path, and draws a module that is not expanded as
one box with its op count, the bytes its ops allocate and (given a profile) their time, as
TensorBoard's graph and Model Explorer show layers; ops made outside every module are grouped
by their user line. By default only the top level is drawn (`expand` opens modules). An op is
one box per statement of the plan, keyed by its first result's name in `str(graph)`, so that a
picture and graph.txt can be read side by side; a fused kernel is one (dashed) box.

Graphviz's `dot` lays the picture out when it is installed; otherwise a layered layout of our
own: each box in the layer after the last box it reads from that ran before it in the schedule
(an edge against the schedule, a gradient flowing back into a module, runs along the side),
each row ordered by where its inputs are. Either way the SVG has no script; each box is a `<g>`
of class `tg_node` (op), `tg_input`, `tg_module` (a collapsed module) or `tg_cluster` (an
expanded one), with a `<title>` tooltip and `data-` attributes that runtime/viz.py's page uses.

Core layer: it reads the graph duck-typed (`ir` imports this module) and imports nothing of
tracegrad but the vocabulary."""

from __future__ import annotations

import html
import linecache
import re
import shutil
import subprocess
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracegrad.core.vocabulary import Kind, Phase

Graph = Node = Value = Any  # ir's types: not imported, since ir.Graph.to_svg imports this module
Path = tuple[str, ...]  # a group: module path components, or (user line,) for loose ops

PHASE_COLOURS = {
    Phase.FORWARD: "#a6cee3",
    Phase.BACKWARD: "#fdbf6f",
    Phase.UPDATE: "#b2df8a",
    Phase.RECOMPUTE: "#cab2d6",
    Phase.REBUILD: "#fb9a99",
}
INPUT_COLOUR = "#eeeeee"
MODULE_COLOUR = "#ffffff"
CLUSTER_COLOURS = ("#f4f6fa", "#e9edf4")  # nested clusters alternate
SAVED_COLOUR = "#d62728"
EDGE_COLOUR = "#8a8a8a"
SCALAR_COLOUR = "#c8c8c8"  # edges that carry only 0-d values (hyperparameters, step counts)
EDGE_STYLES = ("saved", "data", "scalar")  # an edge carrying several values shows the first
FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
FONT_SIZE = 12  # px at 100%: what the HTML report shows without zooming
CHAR_W, LINE_H = 0.61 * FONT_SIZE, 15.0  # a monospace character's advance; a line of text
PAD, GAP_X, GAP_Y, HEAD = 8.0, 18.0, 30.0, 24.0
DOT_SECONDS = 60  # then our layered layout draws the graph instead
KERNEL_OPS_SHOWN = 30  # characters of a fused kernel's op list shown in its box


# --- what is drawn ----------------------------------------------------------------------------


@dataclass
class Group:
    """A module (or the loose ops of one user line): its ops and what they cost."""

    path: Path
    label: str
    ops: int = 0
    kernels: int = 0
    nbytes: int = 0
    saved: int = 0
    seconds: float | None = None
    first: int = 1 << 60  # schedule index of its first node
    first_forward: int = 1 << 60  # and of its first forward computation: where the model is
    phases: dict[str, int] = field(default_factory=dict)

    @property
    def order(self) -> int:
        """Where the group stands in the schedule: its first forward node, if it has one."""
        return self.first_forward if self.first_forward < 1 << 60 else self.first

    def stats(self) -> str:
        parts = [f"{self.ops} op{'s' * (self.ops != 1)}"]
        if self.seconds is not None:
            parts.append(f"{self.seconds * 1e3:.2f} ms")
        parts.append(size_text(self.nbytes))
        return " · ".join(parts)

    def tooltip(self) -> str:
        phases = ", ".join(f"{k} {v}" for k, v in self.phases.items())
        lines = [self.label, f"{self.ops} ops ({phases}), {self.kernels} kernels",
                 f"results allocated: {size_text(self.nbytes)}; held for backward: "
                 f"{size_text(self.saved)}"]  # fmt: skip
        if self.seconds is not None:
            lines.append(f"time: {self.seconds * 1e3:.3f} ms (instrumented run)")
        return "\n".join(lines)


@dataclass(eq=False)
class Box:
    """One drawn box: an op (a plan statement), a graph input or a collapsed group."""

    key: str  # ops and inputs: the (first) result's name in str(graph)
    kind: str  # "op", "kernel", "input" or "module"
    lines: list[str]
    tooltip: str
    fill: str
    order: float  # schedule index of its first node (an input: just before its first reader)
    saved: bool = False
    group: Group | None = None  # kind "module": the group it stands for
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0
    y: float = 0.0


@dataclass(eq=False)
class Cluster:
    """An expanded group (or the whole picture: `group` None) and what is drawn inside."""

    group: Group | None
    items: list[Box | Cluster] = field(default_factory=list)
    depth: int = 0
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0
    y: float = 0.0

    @property
    def order(self) -> float:
        return min((it.order for it in self.items), default=0.0)

    @property
    def key(self) -> str:
        return "c:" + ".".join(self.group.path) if self.group else "c:"

    def boxes(self) -> Iterator[Box]:
        for it in self.items:
            yield from it.boxes() if isinstance(it, Cluster) else (it,)

    def clusters(self) -> Iterator[Cluster]:
        yield self
        for it in self.items:
            if isinstance(it, Cluster):
                yield from it.clusters()


@dataclass
class Scene:
    """A picture before layout: the nested clusters and the box-to-box edges."""

    root: Cluster
    edges: list[tuple[Box, Box, str]]  # (from, to, what: "saved", "data" or "scalar")
    groups: dict[Path, Group]


def size_text(n: float) -> str:
    """Bytes in the unit that shows them."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def module_path(module: str | None) -> Path:
    return tuple(module.split(".")) if module else ()


def node_groups(graph: Graph) -> list[Path]:
    """Each node's group: its module path; a node outside every module (or in the root module
    itself) goes to the group of its user line when that line made more than one such node."""
    paths = [module_path(n.module) for n in graph.nodes]
    loose: dict[str, int] = {}
    for n, p in zip(graph.nodes, paths, strict=True):
        if not p and n.source:
            loose[n.source] = loose.get(n.source, 0) + 1
    return [
        (n.source,) if not p and loose.get(n.source, 0) > 1 else p
        for n, p in zip(graph.nodes, paths, strict=True)
    ]


def _is_line(path: Path) -> bool:
    return len(path) == 1 and ":" in path[0]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def display(path: Path) -> str:
    """A group as `expand` takes it: a module path, or a user line."""
    return path[0] if _is_line(path) else ".".join(path)


def _group_label(path: Path) -> str:
    if _is_line(path):
        file, _, line = path[0].rpartition(":")
        code = linecache.getline(file, int(line)).strip() if line.isdigit() else ""
        return f"{path[0]}  {_clip(code, 32)}" if code else path[0]
    return ".".join(path)


def groups(
    graph: Graph, seconds: Sequence[float] | None = None
) -> tuple[list[Path], dict[Path, Group]]:
    """Each node's group and every group (with its ancestors) with its totals."""
    paths = node_groups(graph)
    saved = set(graph.residuals())
    out: dict[Path, Group] = {}
    for i, (n, p) in enumerate(zip(graph.nodes, paths, strict=True)):
        body = _body(n)
        ops = len(body.nodes) if body is not None else 1
        view = n.prim.is_view(n.inputs, n.attrs)
        made = 0 if view else sum(v.nbytes for v in n.outputs)
        for k in range(1, len(p) + 1):
            g = out.setdefault(p[:k], Group(p[:k], _group_label(p[:k])))
            g.ops += ops
            g.kernels += body is not None
            g.nbytes += made
            g.saved += sum(v.nbytes for v in n.outputs if v in saved)
            g.first = min(g.first, i)
            if n.phase is Phase.FORWARD and not view:  # views of inputs run first
                g.first_forward = min(g.first_forward, i)
            g.phases[str(n.phase)] = g.phases.get(str(n.phase), 0) + ops
            if seconds is not None:
                g.seconds = (g.seconds or 0.0) + seconds[i]
    return paths, out


def _body(n: Node) -> Graph | None:
    return n.attrs.get("body") if n.prim.kind is Kind.COMPOSITE else None


@dataclass
class Facts:
    """What every picture of one graph reads: each node's group, the groups, the values' names,
    the values saved for backward, where each graph input is drawn and its first reader."""

    paths: list[Path]
    table: dict[Path, Group]
    names: dict
    saved: set
    homes: dict  # graph input -> the group of its readers
    first: dict  # value -> index of the first node that reads it

    @classmethod
    def of(cls, graph: Graph, seconds: Sequence[float] | None = None) -> Facts:
        paths, table = groups(graph, seconds)
        readers: dict[Value, list[Path]] = {}
        first: dict[Value, int] = {}
        for i, (n, p) in enumerate(zip(graph.nodes, paths, strict=True)):
            for v in n.inputs:
                readers.setdefault(v, []).append(p)
                first.setdefault(v, i)
        homes = {v: _common(readers.get(v, [()])) for v in graph.inputs}
        return cls(paths, table, graph.names(), set(graph.residuals()), homes, first)


def scene(
    graph: Graph,
    expand: Iterable[str] | bool | None = None,
    seconds: Sequence[float] | None = None,
    facts: Facts | None = None,
) -> Scene:
    """The picture of `graph` with the modules in `expand` (module paths, or user lines of
    loose ops; True: all) open and every other group drawn as one box. `seconds`: each node's
    time (a profile), shown per group; `facts`: `Facts.of(graph, seconds)`, if at hand."""
    facts = facts or Facts.of(graph, seconds)
    paths, table, names, saved = facts.paths, facts.table, facts.names, facts.saved
    if expand is True:
        opened = set(table)
    else:
        opened = {p[:k] for e in expand or () for p in [_as_path(e, table)] for k in
                  range(1, len(p) + 1)}  # fmt: skip
    root = Cluster(None)
    clusters: dict[Path, Cluster] = {(): root}
    collapsed: dict[Path, Box] = {}

    def container(p: Path) -> Cluster:
        if p not in clusters:
            parent = container(p[:-1])
            clusters[p] = Cluster(table[p], depth=len(p))
            parent.items.append(clusters[p])
        return clusters[p]

    def place(p: Path, make: Any) -> Box:
        """The box for something of group `p`: its own (made by `make`) if `p` is open, else
        the box of its outermost closed group."""
        for k in range(1, len(p) + 1):
            if p[:k] not in opened:
                if p[:k] not in collapsed:
                    g = table[p[:k]]
                    collapsed[p[:k]] = Box("m:" + ".".join(p[:k]), "module",
                                           [g.label, g.stats()], g.tooltip(), MODULE_COLOUR,
                                           g.order, g.saved > 0, g)  # fmt: skip
                    container(p[: k - 1]).items.append(collapsed[p[:k]])
                return collapsed[p[:k]]
        box = make()
        container(p).items.append(box)
        return box

    owner: dict[Value, Box] = {}
    for v in graph.inputs:  # drawn in the group of its readers, just before the first
        if not v.shape:  # a hyperparameter (learning rate): read everywhere, says little
            continue
        order = facts.first.get(v, len(graph.nodes)) - 0.5
        owner[v] = place(facts.homes[v], lambda v=v, o=order: _input_box(v, names, v in saved, o))
    edges: dict[tuple[Box, Box], str] = {}
    for i, (n, p) in enumerate(zip(graph.nodes, paths, strict=True)):
        box = place(p, lambda n=n, i=i: _op_box(n, i, names, saved, seconds))
        for v in n.inputs:
            src = owner.get(v)
            if src is not None and src is not box:
                what = "saved" if v in saved else "data" if v.shape else "scalar"
                edges[src, box] = min(edges.get((src, box), what), what, key=EDGE_STYLES.index)
        owner.update((v, box) for v in n.outputs)
    return Scene(root, [(a, b, s) for (a, b), s in edges.items()], table)


def _as_path(name: str, table: dict[Path, Group]) -> Path:
    path = (name,) if (name,) in table else module_path(name)
    if path not in table:
        some = ", ".join(sorted(display(p) for p in table)[:8])
        raise ValueError(f"to_svg: no module or user line {name!r} in this graph ({some}, ...)")
    return path


def _common(paths: list[Path]) -> Path:
    out: list[str] = []
    for parts in zip(*paths, strict=False):
        if len(set(parts)) > 1:
            break
        out.append(parts[0])
    return tuple(out)


def _input_box(v: Value, names: dict, saved: bool, order: float) -> Box:
    tip = f"input {names[v]}: {v.type_str}" + ("\nsaved for backward" if saved else "")
    return Box(names[v], "input", [names[v], v.type_str], tip, INPUT_COLOUR, order, saved)


def _op_box(n: Node, i: int, names: dict, saved: set,
            seconds: Sequence[float] | None) -> Box:  # fmt: skip
    outs = [names[v] for v in n.outputs]
    lhs = " ".join(f"{names[v]}:{v.type_str}" for v in n.outputs)
    rhs = " ".join(str(v.const) if v.const is not None and v.const.ndim == 0 else
                   names.get(v, "?") for v in n.inputs)  # fmt: skip
    body = _body(n)
    op = "fused" if body is not None else n.op
    tip = [f"{lhs} = {op} {rhs}", f"phase: {n.phase}", f"module: {n.module or '(none)'}",
           n.source or "no user line"]  # fmt: skip
    if body is not None:
        tip.insert(1, f"a kernel of {len(body.nodes)} ops: " + ",".join(m.op for m in body.nodes))
    if seconds is not None:
        tip.append(f"time: {seconds[i] * 1e3:.3f} ms (instrumented run)")
    keeps = [names[v] for v in n.outputs if v in saved]
    if keeps:
        tip.append(f"saved for backward: {', '.join(keeps)}")
    shown = " ".join(outs[:3]) + (" …" if len(outs) > 3 else "")
    if body is not None:
        ops = ",".join(m.op for m in body.nodes)
        second = "{" + (ops if len(ops) <= KERNEL_OPS_SHOWN else ops[: KERNEL_OPS_SHOWN - 1] +
                        "…") + "}"  # fmt: skip
    else:
        second = n.outputs[0].type_str if n.outputs else ""
    fill = PHASE_COLOURS.get(n.phase, INPUT_COLOUR)
    kind = "kernel" if body is not None else "op"
    return Box(outs[0], kind, [f"{shown} = {op}", second], "\n".join(tip), fill, i, bool(keeps))


# --- our own layered layout -------------------------------------------------------------------


def layout(sc: Scene) -> None:
    """Sizes and absolute positions (top-left corners) of every box and cluster. Rows are
    depths: each box one row below the deepest box it reads from along the schedule, then as
    low as its readers allow; a cluster spans the rows of its boxes, and items of a cluster
    whose rows overlap stand side by side (first fit), so a module's forward and backward ops
    are one cluster and the modules nest like the model's calls."""
    chains: dict[Box, list[Cluster]] = {}  # box -> the clusters holding it, outermost first

    def walk(c: Cluster, chain: list[Cluster]) -> None:
        for it in c.items:
            if isinstance(it, Cluster):
                walk(it, [*chain, it])
            else:
                chains[it] = chain

    walk(sc.root, [sc.root])
    depth = _depths(sc, list(chains))
    for b in chains:
        _size(b)
    tops, heights, bottoms = {}, {}, {}  # per depth: room for headers above, boxes, margins
    for b, chain in chains.items():
        d = depth[b]
        opens = sum(1 for c in chain[1:] if _span(c, depth)[0] == d)
        closes = sum(1 for c in chain[1:] if _span(c, depth)[1] == d)
        tops[d] = max(tops.get(d, 0.0), opens * (HEAD + PAD))
        heights[d] = max(heights.get(d, 0.0), b.h)
        bottoms[d] = max(bottoms.get(d, 0.0), closes * PAD)
    row_y, y = {}, PAD
    for d in sorted(heights):
        row_y[d] = y + tops[d]
        y = row_y[d] + heights[d] + bottoms[d] + GAP_Y
    for b in chains:
        b.y = row_y[depth[b]]
    _columns(sc.root, depth)
    _absolute(sc.root, 0.0, 0.0)
    sc.root.h = max(y - GAP_Y + PAD, 2 * PAD)


def _depths(sc: Scene, boxes: list[Box]) -> dict[Box, int]:
    """Each box's row: the longest path to it along the schedule's edges (an edge against the
    schedule is a gradient flowing back, drawn along the side), then lowered to just above its
    first reader, so that an input or a parameter's transpose sits beside its use."""
    preds: dict[Box, list[Box]] = {}
    succs: dict[Box, list[Box]] = {}
    for a, b, _ in sc.edges:
        if a.order < b.order:
            preds.setdefault(b, []).append(a)
            succs.setdefault(a, []).append(b)
    boxes = sorted(boxes, key=lambda b: b.order)
    depth: dict[Box, int] = {}
    for b in boxes:
        depth[b] = max((depth[a] + 1 for a in preds.get(b, ())), default=0)
    for b in reversed(boxes):
        if b in succs:
            depth[b] = min(depth[s] for s in succs[b]) - 1
    return depth


def _span(it: Box | Cluster, depth: dict[Box, int]) -> tuple[int, int]:
    """The rows an item covers (cached on clusters by `_columns`' caller's loop)."""
    if isinstance(it, Box):
        return depth[it], depth[it]
    rows = [depth[b] for b in it.boxes()]
    return min(rows), max(rows)


def _size(b: Box) -> None:
    b.w = max(len(line) for line in b.lines) * CHAR_W + 2 * PAD
    b.h = len(b.lines) * LINE_H + 2 * PAD - 4


def _header(c: Cluster) -> str:
    return f"[−] {c.group.label} · {c.group.stats()}" if c.group else ""


def _columns(c: Cluster, depth: dict[Box, int]) -> None:
    """Place `c`'s items in columns, first fit by their rows (x relative to `c`), size `c`
    and give it its rows' extent (y absolute, as the boxes' are)."""
    spans = {}
    for it in c.items:
        if isinstance(it, Cluster):
            _columns(it, depth)
        spans[id(it)] = _span(it, depth)
    columns: list[list[Any]] = []
    for it in sorted(c.items, key=lambda it: (spans[id(it)], it.order)):
        lo, hi = spans[id(it)]
        for col in columns:
            if all(spans[id(o)][1] < lo or spans[id(o)][0] > hi for o in col):
                col.append(it)
                break
        else:
            columns.append([it])
    x = PAD
    for col in columns:
        width = max(it.w for it in col)
        for it in col:
            it.x = x + (width - it.w) / 2
        x += width + GAP_X
    c.w = max(x - GAP_X + PAD, len(_header(c)) * CHAR_W + 2 * PAD)
    if c.group is not None and c.items:
        c.y = min(it.y for it in c.items) - HEAD - PAD
        c.h = max(it.y + it.h for it in c.items) + PAD - c.y


def _absolute(c: Cluster, x: float, y: float) -> None:
    """x offsets from relative to absolute (y is absolute already)."""
    c.x = x
    for it in c.items:
        if isinstance(it, Cluster):
            _absolute(it, x + it.x, y)
        else:
            it.x += x


def _edge_path(a: Box, b: Box) -> tuple[str, tuple[float, float], tuple[float, float]]:
    """An SVG path from a to b: down from a's bottom to b's top when b is below, else along
    the right side; and the arrow's tip and direction."""
    if b.y >= a.y + a.h + 4:
        x1, y1, x2, y2 = a.x + a.w / 2, a.y + a.h, b.x + b.w / 2, b.y
        d = min(40.0, (y2 - y1) / 2)
        path = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + d:.1f} {x2:.1f},{y2 - d:.1f} {x2:.1f},{y2:.1f}"
        return path, (x2, y2), (0.0, 1.0)
    x1, y1, x2, y2 = a.x + a.w, a.y + a.h / 2, b.x + b.w, b.y + b.h / 2
    bulge = max(x1, x2) + 30 + 0.08 * abs(y2 - y1)
    return f"M{x1:.1f},{y1:.1f} C{bulge:.1f},{y1:.1f} {bulge:.1f},{y2:.1f} {x2:.1f},{y2:.1f}", (
        x2, y2), (-1.0, 0.0)  # fmt: skip


def _edge_style(what: str) -> tuple[str, float, bool]:
    """Colour, width and dashing of an edge: red for saved values, light and dashed for
    scalars."""
    return {"saved": (SAVED_COLOUR, 1.8, False), "data": (EDGE_COLOUR, 1.0, False),
            "scalar": (SCALAR_COLOUR, 1.0, True)}[what]  # fmt: skip


def _arrow(tip: tuple[float, float], direction: tuple[float, float], colour: str) -> str:
    (x, y), (dx, dy) = tip, direction
    px, py = -dy, dx
    pts = [(x, y), (x - 7 * dx + 3.5 * px, y - 7 * dy + 3.5 * py),
           (x - 7 * dx - 3.5 * px, y - 7 * dy - 3.5 * py)]  # fmt: skip
    return f'<polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" fill="{colour}"/>'


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _attrs(b: Box | Cluster, ids: bool) -> str:
    if isinstance(b, Cluster):
        return f' class="tg_cluster" data-module="{_esc(display(b.group.path))}"'
    if b.kind == "module":
        return f' class="tg_module" data-module="{_esc(display(b.group.path))}"'
    cls = "tg_input" if b.kind == "input" else "tg_node"
    ident = f' id="{b.key}"' if ids else ""
    return f'{ident} class="{cls}" data-name="{b.key}"'


def _text(lines: list[str], x: float, y: float, anchor: str = "middle", bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    spans = "".join(f'<tspan x="{x:.1f}" dy="{0 if k == 0 else LINE_H:.0f}">{_esc(t)}</tspan>'
                    for k, t in enumerate(lines))  # fmt: skip
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{weight}>{spans}</text>'


def _layered_svg(sc: Scene, ids: bool = True) -> str:
    layout(sc)
    out: list[str] = []
    for c in sc.root.clusters():
        if c.group is None:
            continue
        fill = CLUSTER_COLOURS[c.depth % 2]
        out.append(f"<g{_attrs(c, ids)}><title>{_esc(c.group.tooltip())}</title>"
                   f'<rect x="{c.x:.1f}" y="{c.y:.1f}" width="{c.w:.1f}" height="{c.h:.1f}" '
                   f'rx="8" fill="{fill}" stroke="#7a869a"/>'
                   f'<rect class="tg_head" x="{c.x:.1f}" y="{c.y:.1f}" width="{c.w:.1f}" '
                   f'height="{HEAD:.0f}" rx="8" fill="#dde3ee" stroke="#7a869a"/>'
                   + _text([_header(c)], c.x + PAD, c.y + HEAD - 8, "start", True)
                   + "</g>")  # fmt: skip
    for a, b, what in sc.edges:
        colour, width, dash = _edge_style(what)
        d, tip, direction = _edge_path(a, b)
        dashes = ' stroke-dasharray="4,3"' if dash else ""
        out.append(
            f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{width}"{dashes}/>'
            + _arrow(tip, direction, colour)
        )
    for b in sc.root.boxes():
        stroke = SAVED_COLOUR if b.saved and b.kind != "module" else "#333333"
        width = 2.5 if b.saved and b.kind != "module" else 1.0
        dash = ' stroke-dasharray="5,3"' if b.kind == "kernel" else ""
        radius = b.h / 2 if b.kind == "input" else 4 if b.kind != "module" else 6
        heavy = b.kind == "module"
        out.append(f"<g{_attrs(b, ids)}><title>{_esc(b.tooltip)}</title>"
                   f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" '
                   f'rx="{radius:.1f}" fill="{b.fill}" stroke="{stroke}" '
                   f'stroke-width="{2 if heavy else width}"{dash}/>'
                   + _text(b.lines, b.x + b.w / 2, b.y + PAD + LINE_H - 4, bold=heavy)
                   + "</g>")  # fmt: skip
    w, h = sc.root.w + 60, sc.root.h
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="tg_graph" width="{w:.0f}" '
            f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" font-family="{FONT}" '
            f'font-size="{FONT_SIZE}">' + "".join(out) + "</svg>")  # fmt: skip


# --- Graphviz -------------------------------------------------------------------------------


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot_text(sc: Scene) -> str:
    """Graphviz text of a scene: expanded modules as nested clusters."""
    font = f'fontname="{FONT}", fontsize={FONT_SIZE}'
    lines = [
        "digraph tracegrad {",
        f'  rankdir=TB; ranksep=0.35; nodesep=0.2; fontname="{FONT}"; fontsize={FONT_SIZE};',
        f'  node [{font}, shape=box, style="rounded,filled"];',
        "  edge [arrowsize=0.6];",
    ]

    def emit(c: Cluster, indent: str) -> None:
        for it in c.items:
            if isinstance(it, Cluster):
                lines.append(f"{indent}subgraph {_q('cluster_' + it.key)} {{")
                fill = CLUSTER_COLOURS[it.depth % 2]
                lines.append(f'{indent}  id={_q(it.key)}; class="tg_cluster"; '
                             f"label={_q(_header(it))}; "
                             f'style="rounded,filled"; fillcolor="{fill}"; color="#7a869a"; '
                             "labeljust=l;")  # fmt: skip
                emit(it, indent + "  ")
                lines.append(f"{indent}}}")
            else:
                lines.append(indent + _dot_node(it))

    emit(sc.root, "  ")
    for a, b, what in sc.edges:
        colour, width, dash = _edge_style(what)
        attrs = [f'color="{colour}"', f"penwidth={width}"] + ["style=dashed"] * dash
        if a.order >= b.order:  # against the schedule (a gradient flowing back): no rank
            attrs.append("constraint=false")
        lines.append(f"  {_q(a.key)} -> {_q(b.key)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines)


def _dot_node(b: Box) -> str:
    cls = {"module": "tg_module", "input": "tg_input"}.get(b.kind, "tg_node")
    style = {"kernel": "rounded,filled,dashed", "module": "rounded,filled,bold"}.get(
        b.kind, "rounded,filled"
    )
    extra = f', color="{SAVED_COLOUR}", penwidth=2.5' if b.saved and b.kind != "module" else ""
    return (f"{_q(b.key)} [id={_q(b.key)}, class={_q(cls)}, label={_q(chr(10).join(b.lines))}, "
            f'fillcolor="{b.fill}", style="{style}"{extra}];')  # fmt: skip


def _dot_svgs(scenes: list[Scene], ids: bool = True) -> list[str]:
    """All scenes in one run of `dot` (it reads several graphs), each SVG given our `data-`
    attributes; our layered layout instead if dot takes longer than DOT_SECONDS (its layout
    time grows steeply with the edges: an unrolled recurrent net's thousands of them)."""
    try:
        out = subprocess.run(["dot", "-Tsvg"], input="\n".join(dot_text(sc) for sc in scenes),
                             capture_output=True, text=True, check=False,
                             timeout=DOT_SECONDS)  # fmt: skip
    except subprocess.TimeoutExpired:
        edges = sum(len(sc.edges) for sc in scenes)
        warnings.warn(f"to_svg: Graphviz's dot took over {DOT_SECONDS} s to lay out {edges} "
                      "edges; drawn with the layered layout instead", stacklevel=3)  # fmt: skip
        return [_layered_svg(sc, ids) for sc in scenes]
    if out.returncode != 0:
        raise RuntimeError(f"dot failed: {out.stderr.strip()}")
    svgs = ["<svg" + part.split("</svg>")[0] + "</svg>" for part in out.stdout.split("<svg")[1:]]
    return [_dot_attributes(svg, sc, ids) for svg, sc in zip(svgs, scenes, strict=True)]


def _dot_attributes(svg: str, sc: Scene, ids: bool) -> str:
    items: dict[str, Box | Cluster] = {b.key: b for b in sc.root.boxes()}
    items.update((c.key, c) for c in sc.root.clusters() if c.group is not None)

    def tag(m: re.Match) -> str:  # our attributes, and the tooltip as the first <title>
        it = items.get(html.unescape(m.group(1)))
        if it is None:
            return m.group(0)
        tip = it.tooltip if isinstance(it, Box) else it.group.tooltip()
        return f"<g{_attrs(it, ids)}>{m.group(2)}<title>{_esc(tip)}</title>"

    svg = re.sub(r'<g id="([^"]+)" class="(?:node|cluster) tg_\w+">(\s*)<title>[^<]*</title>',
                 tag, svg)  # fmt: skip
    if not ids:  # one of several pictures in a page: dot's own ids would repeat
        svg = re.sub(r'(<g) id="[^"]*"', r"\1", svg)
    return svg.replace("<svg ", '<svg class="tg_graph" ', 1)


# --- entry points ---------------------------------------------------------------------------


def engine_for(engine: str | None) -> str:
    engine = engine or ("dot" if shutil.which("dot") else "layered")
    if engine not in ("dot", "layered"):
        raise ValueError(f"to_svg: unknown engine {engine!r} (use 'dot' or 'layered')")
    return engine


def to_svg(graph: Graph, path: str | None = None, engine: str | None = None,
           expand: Iterable[str] | bool | None = None,
           seconds: Sequence[float] | None = None) -> str:  # fmt: skip
    """SVG text of the graph (written to `path` too, if given), its modules collapsed but those
    in `expand` (True: all). `engine` is "dot" or "layered"; by default dot when installed."""
    engine = engine_for(engine)
    sc = scene(graph, expand, seconds)
    svg = _dot_svgs([sc])[0] if engine == "dot" else _layered_svg(sc)
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
    return svg


def views(graph: Graph, seconds: Sequence[float] | None = None,
          engine: str | None = None) -> list[tuple[Path, str]]:  # fmt: skip
    """The picture with nothing expanded, and with each group expanded in place (its
    enclosing groups too, everything else collapsed): (group, SVG) pairs, the first for ()."""
    engine = engine_for(engine)
    facts = Facts.of(graph, seconds)
    table = facts.table
    paths = [(), *sorted(table, key=lambda p: (table[p].order, len(p)))]
    scenes = [scene(graph, [display(p)] if p else None, seconds, facts) for p in paths]
    svgs = _dot_svgs(scenes, ids=False) if engine == "dot" else [
        _layered_svg(sc, ids=False) for sc in scenes]  # fmt: skip
    return list(zip(paths, svgs, strict=True))

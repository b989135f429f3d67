"""The project's structure: imports run one way through the layers (no cycles, function-local
imports included), and the compiler knows ops only through the op table's records."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from tracegrad.core import primitives as primitives
from tracegrad.core.primitives import Primitive

ROOT = Path(__file__).resolve().parent.parent

# Each folder is a layer; a module may import only from its own layer or a lower one.
LAYERS = {
    0: ["tracegrad.core"],
    1: ["tracegrad.frontend"],
    2: [
        "tracegrad.nn",
        "tracegrad.optim",
        "tracegrad.numpy",
        "tracegrad.distributed",
        "tracegrad.utils",
    ],  # library
    3: ["passes", "tracegrad.compiler"],  # the compiler: sees only the core
    4: ["tracegrad.runtime"],
    5: ["tracegrad", "tracegrad.__main__"],  # the package's front door imports everything
}


def modules() -> dict[str, Path]:
    found = {}
    for package in ("tracegrad", "passes"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (function bodies too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]  # fmt: skip
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def layer(name: str) -> int:
    best = max((p for ps in LAYERS.values() for p in ps if name == p or name.startswith(p + ".")),
               key=len)  # fmt: skip
    return next(k for k, ps in LAYERS.items() if best in ps)


def import_graph() -> nx.DiGraph:
    found = modules()
    g = nx.DiGraph()
    for name, path in found.items():
        g.add_node(name)
        g.add_edges_from((name, t) for t in imports(name, path, set(found)))
    return g


# The op families' VJP rules call each other's ops (one mutually recursive table, imported at the
# end of each family's module): the families count as one module here.
OP_FAMILIES = "tracegrad.core.ops"


def test_no_import_cycles_function_local_imports_included():
    g = import_graph()
    assert g.number_of_edges() > 40  # the parser sees the imports
    families = [n for n in g if n.startswith(OP_FAMILIES + ".")]
    g = nx.relabel_nodes(g, dict.fromkeys(families, OP_FAMILIES))
    g.remove_edges_from(nx.selfloop_edges(g))
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"import cycles: {cycles}"


def test_imports_go_down_the_layers():
    wrong = [(a, b) for a, b in import_graph().edges if layer(b) > layer(a)]
    assert not wrong, f"imports from a higher layer: {wrong}"


def test_the_compiler_sees_only_the_core():
    g = import_graph()
    for name in g:
        if layer(name) == 3:
            seen = {t for t in g.successors(name) if layer(t) != 3}
            assert all(layer(t) == 0 for t in seen), f"{name} imports {seen}"


@pytest.mark.parametrize(
    "module", ["passes", "tracegrad.runtime.trace", "tracegrad.compiler.kernels.fused"]
)
def test_any_module_imports_first_in_a_fresh_interpreter(module):
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=ROOT)


def test_compiler_code_names_no_op():
    """Op names appear in passes/ and compiler/ only as the table's objects (P.mul in a
    rule registered for P.mul), never as strings matched against a node."""
    names = {p.name for p in vars(primitives).values() if isinstance(p, Primitive)}
    quoted = re.compile("[\"'](" + "|".join(sorted(names)) + ")[\"']")
    files = [*(ROOT / "passes").rglob("*.py"), *(ROOT / "tracegrad/compiler").rglob("*.py")]
    lines = [(f.name, i, t) for f in files for i, t in enumerate(f.read_text().splitlines(), 1)]
    hits = [f"{name}:{i}: {text.strip()}" for name, i, text in lines if quoted.search(text)]
    assert not hits, hits


def test_every_module_lives_in_its_layers_folder():
    """The folders are the layers: no module stands loose at the package's top."""
    folders = [p for k, ps in LAYERS.items() if k < 5 for p in ps]
    loose = [
        n
        for n in modules()
        if n not in LAYERS[5] and not any(n == p or n.startswith(p + ".") for p in folders)
    ]
    assert not loose, f"modules outside every layer's folder: {loose}"

"""The symbolic graph: plain Python objects, a jaxpr-like printer and networkx / Graphviz export.

Of tracegrad it imports only the op vocabulary (a node's `Phase`), so the `passes` package can
depend on this module and the op records alone.
"""

from __future__ import annotations

import itertools
import keyword
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tracegrad.core.vocabulary import Phase

_ids = itertools.count()

_SHORT_DTYPES = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "bool",
}


def short_dtype(dtype: Any) -> str:
    name = np.dtype(dtype).name
    return _SHORT_DTYPES.get(name, name)


class Value:
    """A typed edge of the graph: a node output, a graph input or a constant (`const` set)."""

    __slots__ = ("id", "shape", "dtype", "const")

    def __init__(self, shape: Sequence[int], dtype: Any, const: np.ndarray | None = None):
        self.id = next(_ids)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.const = const

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # np.prod makes an array first; passes call this often

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def type_str(self) -> str:
        return f"{short_dtype(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        return f"Value(v{self.id}:{self.type_str})"


class Node:
    """One primitive application. `prim` is the op-table record (anything with `name`, `impl`
    and `infer`: this module knows no particular op); `source` is the user's "file:line" that
    produced it; `phase` is the `Phase` of the step it belongs to (a name that is not one
    raises); `module` is the path of the module it was made in, as `named_modules()` names it
    (`blocks.2.attn`; "" the root module itself, None outside every module): pictures, reports
    and profiles group by it. `update` numbers, for an update node, the optimizer `step()` call
    that made it (in traced order; None outside updates): a step may update a parameter twice,
    and the schedule keeps the two calls' updates apart."""

    __slots__ = ("prim", "inputs", "outputs", "attrs", "source", "phase", "module", "update")

    def __init__(
        self,
        prim: Any,
        inputs: Sequence[Value],
        outputs: Sequence[Value],
        attrs: Mapping[str, Any] | None = None,
        source: str | None = None,
        phase: Phase | str = Phase.FORWARD,
        module: str | None = None,
        update: int | None = None,
    ):
        if isinstance(prim, str):
            raise TypeError(f"Node: pass the primitive, not its name {prim!r}")
        self.prim = prim
        self.phase = phase if phase.__class__ is Phase else Phase(phase)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = dict(attrs or {})
        self.source = source
        self.module = module
        self.update = update

    @property
    def op(self) -> str:
        """The primitive's name, for printing."""
        return self.prim.name

    def replace(self, **changes: Any) -> Node:
        """A copy with some fields changed (`n.replace(inputs=...)`): a pass that rewrites a
        node keeps where it came from (source, phase, module) without naming each."""
        fields = {k: getattr(self, k) for k in self.__slots__}
        fields.update(changes)
        return Node(**fields)

    @property
    def where(self) -> str:
        """The module path and the user's line, as the graph's printout shows them
        ("blocks.0.attn: gpt.py:58")."""
        return ": ".join(x for x in (self.module, self.source) if x)

    def __repr__(self) -> str:
        return f"Node({self.op}, {self.inputs} -> {self.outputs})"


class GraphError(ValueError):
    """A graph that breaks the IR's rules: a value read before it is defined or defined twice,
    a result whose type its op's shape rule does not give."""


class Graph:
    """Inputs, topologically ordered nodes and outputs. Values are shared objects, not copies."""

    def __init__(self, inputs: Sequence[Value], nodes: Sequence[Node], outputs: Sequence[Value]):
        self.inputs = list(inputs)
        self.nodes = list(nodes)
        self.outputs = list(outputs)

    def copy(self) -> Graph:
        return Graph(self.inputs, [_copy_node(n) for n in self.nodes], self.outputs)

    def producers(self) -> dict[Value, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    def users(self) -> dict[Value, list[Node]]:
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def count(self, op: str) -> int:
        """How many nodes apply the op named `op` (for inspection)."""
        return sum(n.op == op for n in self.nodes)

    def residuals(self) -> list[Value]:
        """Forward results that backward or update nodes read: the values saved for backward."""
        forward = {v for n in self.nodes if n.phase is Phase.FORWARD for v in n.outputs}
        seen: dict[Value, None] = {}
        for n in self.nodes:
            if n.phase is not Phase.FORWARD:
                seen.update((v, None) for v in n.inputs if v in forward)
        return list(seen)

    def verify(self) -> Graph:
        """Check single assignment in order (every value read is an input, a constant or an
        earlier result; each is defined once) and re-run every node's shape rule against its
        results' types. Raises GraphError; returns the graph."""
        defined = set(self.inputs)
        if len(defined) != len(self.inputs):
            raise GraphError("a graph input is listed twice")
        for i, n in enumerate(self.nodes):
            where = f"node {i} ({n.op}, {n.source})"
            for v in n.inputs:
                if v.const is None and v not in defined:
                    raise GraphError(f"{where} reads {v} before it is defined")
            try:
                types = n.prim.infer(n.inputs, n.attrs)
            except Exception as e:
                raise GraphError(f"{where}: its shape rule rejects its inputs: {e}") from e
            got = [(v.shape, v.dtype) for v in n.outputs]
            if [(tuple(s), np.dtype(d)) for s, d in types] != got:
                shown = ", ".join(f"{short_dtype(d)}[{','.join(map(str, s))}]" for s, d in types)
                raise GraphError(
                    f"{where} gives {', '.join(v.type_str for v in n.outputs)}; "
                    f"its shape rule says {shown}"
                )
            for v in n.outputs:
                if v in defined or v.const is not None:
                    raise GraphError(f"{where} defines {v}, which is already defined")
                defined.add(v)
        for v in self.outputs:
            if v.const is None and v not in defined:
                raise GraphError(f"graph output {v} is never defined")
        return self

    def names(self) -> dict[Value, str]:
        """Short names in order of appearance (a, b, ..., z, ba, ...), as jaxpr prints them."""
        names: dict[Value, str] = {}
        fresh = short_names()

        def name(v: Value) -> None:
            if v not in names:
                names[v] = next(fresh)

        for v in self.inputs:
            name(v)
        for n in self.nodes:
            for v in (*n.inputs, *n.outputs):
                name(v)
        return names

    def __str__(self) -> str:
        names = self.names()

        def ref(v: Value) -> str:
            if v.const is not None and v.const.ndim == 0:
                return str(v.const)  # shortest text that round-trips in its own dtype
            return names[v]

        def typed(v: Value) -> str:
            return f"{names[v]}:{v.type_str}"

        lines = ["{ lambda " + " ".join(typed(v) for v in self.inputs) + " ."]
        consts = {v for n in self.nodes for v in n.inputs if v.const is not None and v.const.ndim}
        for v in sorted(consts, key=lambda v: names[v]):
            lines.append(f"    {typed(v)} = const")
        body = []
        for n in self.nodes:
            lhs = " ".join(typed(v) for v in n.outputs)
            attrs = "".join(f" {k}={fmt_attr(a)}" for k, a in n.attrs.items())
            rhs = f"{n.op}{'[' + attrs.strip() + ']' if attrs else ''} " + " ".join(
                ref(v) for v in n.inputs
            )
            body.append((f"    {lhs} = {rhs}", n.where))
        width = min(max((len(t) for t, _ in body), default=0), 64)
        for text, src in body:
            lines.append(f"{text.ljust(width)}  # {src}" if src else text)
        lines.append("  in (" + ", ".join(ref(v) for v in self.outputs) + ") }")
        return "\n".join(lines)

    def evaluate(self, args: Sequence[Any]) -> list[Any]:
        """The outputs for input arrays `args`, from every node's `prim.impl` (`evaluate`)."""
        return evaluate(self, args)

    def to_networkx(self) -> Any:
        """A `networkx.DiGraph`: a vertex per op node and per value (shape, dtype, bytes)."""
        import networkx as nx

        g = nx.DiGraph()
        names = self.names()
        for v in names:
            kind = "input" if v in self.inputs else ("const" if v.const is not None else "value")
            g.add_node(
                names[v],
                kind=kind,
                op=kind,
                shape=v.shape,
                dtype=str(v.dtype),
                bytes=v.nbytes,
                output=v in self.outputs,
            )
        for i, n in enumerate(self.nodes):
            out_bytes = sum(v.nbytes for v in n.outputs)
            key = f"{n.op}_{i}"
            shape = n.outputs[0].shape if n.outputs else ()
            dtype = str(n.outputs[0].dtype) if n.outputs else ""
            g.add_node(
                key, kind="op", op=n.op, shape=shape, dtype=dtype, bytes=out_bytes, source=n.source
            )
            for v in n.inputs:
                g.add_edge(names[v], key)
            for v in n.outputs:
                g.add_edge(key, names[v])
        return g

    def to_svg(self, path: str | None = None, engine: str | None = None,
               expand: Iterable[str] | bool | None = None) -> str:  # fmt: skip
        """A picture of the graph as SVG text (written to `path` too), grouped by module: each
        module one box (op count, bytes) but those in `expand` (paths such as "blocks.0", or
        True: all), drawn as clusters of their ops. Graphviz's `dot` lays it out when installed,
        else a layered layout of our own (`engine="dot"` or `"layered"`). Ops coloured by phase
        and named by their results as `str(graph)` names them; fused kernels dashed; producers
        of values saved for backward outlined in red; a tooltip per box."""
        from tracegrad.core.drawing import to_svg

        return to_svg(self, path, engine, expand)

    def to_dot(self) -> str:
        """Graphviz text: boxes for ops, ellipses for values."""
        names = self.names()
        lines = ["digraph tracegrad {", "  rankdir=TB;"]
        for v, nm in names.items():
            shape = "box3d" if v in self.inputs else "ellipse"
            lines.append(f'  "{nm}" [shape={shape}, label="{nm}: {v.type_str}"];')
        for i, n in enumerate(self.nodes):
            lines.append(f'  "op{i}" [shape=box, style=filled, label="{n.op}"];')
            lines += [f'  "{names[v]}" -> "op{i}";' for v in n.inputs]
            lines += [f'  "op{i}" -> "{names[v]}";' for v in n.outputs]
        lines.append("}")
        return "\n".join(lines)


def evaluate(graph: Graph, args: Sequence[Any]) -> list[Any]:
    """Reference interpreter: run every node's `prim.impl(*inputs, **attrs)`."""
    env: dict[Value, Any] = dict(zip(graph.inputs, args, strict=True))

    def read(v: Value) -> Any:
        return v.const if v.const is not None else env[v]

    for n in graph.nodes:
        result = n.prim.impl(*(read(v) for v in n.inputs), **n.attrs)
        for v, r in zip(n.outputs, _as_tuple(result, len(n.outputs)), strict=True):
            env[v] = np.asarray(r)
            if env[v].dtype != v.dtype or env[v].shape != v.shape:  # the oracle checks types too
                raise TypeError(
                    f"{n.op} at {n.source}: computed {env[v].dtype}{list(env[v].shape)}, "
                    f"the graph says {v.type_str}"
                )
    return [read(v) for v in graph.outputs]


def _as_tuple(result: Any, n: int) -> Iterable[Any]:
    return result if n != 1 or isinstance(result, list) else (result,)


def _copy_node(n: Node) -> Node:
    return n.replace()


def common_module(modules: Iterable[str | None]) -> str | None:
    """The innermost module that holds all of `modules` (paths; None: outside every module):
    where a node made of several nodes (a fused group) belongs."""
    modules = list(modules)
    if not modules or None in modules:
        return None
    common: list[str] = []
    for parts in zip(*(m.split(".") if m else [] for m in modules), strict=False):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return ".".join(common)


RESERVED = frozenset({"np", "out"})  # names the generated plan uses for itself


def short_names() -> Iterator[str]:
    """a..z, ba..zz, baa, ...: never a Python keyword or a reserved name."""
    for n in itertools.count():
        s = ""
        while True:
            s = chr(ord("a") + n % 26) + s
            n //= 26
            if n == 0:
                break
        if not keyword.iskeyword(s) and s not in RESERVED:
            yield s


def fmt_attr(a: Any) -> str:
    if isinstance(a, np.dtype | type):
        return short_dtype(a)
    if isinstance(a, Graph):
        return "{" + ",".join(n.op for n in a.nodes) + "}"
    return repr(a).replace(" ", "")

"""Graph -> a straight-line Python plan: one statement per node, NumPy calls (BLAS matmuls), `del`
at each value's last use, elementwise results written into a dying input's buffer (`out=`) when
that is safe, and other results written into their places in the arena (`_arena`, a list of
views the plan is given). The source is registered with `linecache`, so a traceback
shows the plan's own line, which names the user's source line of that node in a comment.

At the commit point (`memory.commit`: every node that may fail has run) the plan calls
`_commit()`, which the runtime defines (it defers SIGINT until the state is written); from there
on update nodes may write into the state's own buffers."""

from __future__ import annotations

import functools
import linecache
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from passes.memory import MemoryPlan
from tracegrad.core import ir
from tracegrad.core import primitives as P
from tracegrad.core.ops import reductions

_plan_ids = iter(range(1, 1 << 62))


class _Emitter:
    """Names values and attributes in generated source; non-literals go into the namespace."""

    def __init__(self, graph: ir.Graph):
        self.names = graph.names()
        self.namespace: dict[str, Any] = {"np": np, "dtype": np.dtype}
        self.globals_by_id: dict[int, str] = {}

    def ref(self, v: ir.Value, n: ir.Node | None = None) -> str:
        """A value as an argument of node `n`: its name, a literal where `n` is a ufunc and NumPy
        gives the literal the constant's own dtype there (a Python number takes the other
        operands' dtype), else the constant as a typed array from the namespace (an op of our
        own takes arrays: scatter_add's cotangent may be a constant)."""
        if v.const is None:
            return self.names[v]
        if n is not None and isinstance(n.prim.impl, np.ufunc) and _literal_keeps_type(v, n):
            # the Python number's repr round-trips the value, not only the type: str() of
            # np.float32(0.1) is "0.1", which beside float64 would be another number
            return repr(v.const.item())
        return self.constant(v.const, "k")

    def constant(self, obj: Any, prefix: str) -> str:
        if id(obj) not in self.globals_by_id:
            name = f"{prefix}{len(self.globals_by_id)}"
            self.globals_by_id[id(obj)] = name
            self.namespace[name] = obj
        return self.globals_by_id[id(obj)]

    def attr(self, a: Any) -> str:
        text = repr(a)
        try:
            if eval(text, dict(self.namespace)) == a:  # noqa: S307 (our own repr)
                return text
        except Exception:
            pass
        return self.constant(a, "p")

    def function(self, prim: Any) -> str:
        impl = prim.impl
        if getattr(np, getattr(impl, "__name__", ""), None) is impl:
            return f"np.{impl.__name__}"
        return self.constant(impl, f"{identifier(prim.name)}_impl")


def _literal_keeps_type(v: ir.Value, n: ir.Node) -> bool:
    """A 0-d finite constant may be written as a Python literal in `n`'s call when NumPy's
    promotion of the weak literal with `n`'s other operands gives what the typed constant
    gives (NEP 50): 2.0 beside float32 is float32, but np.int64(2) beside uint8 is int64."""
    c = v.const
    if c.ndim != 0 or c.dtype.kind not in "fiub" or (c.dtype.kind == "f" and not np.isfinite(c)):
        return False
    others = [u.dtype for u in n.inputs if u.const is None]
    if not others:
        return False
    return np.result_type(*others, c.item()) == np.result_type(*others, c.dtype)


def _buffer(em: _Emitter, v: ir.Value, memory: MemoryPlan, places: dict[ir.Value, int]) -> str:
    """Where result `v` is written: a dying input's buffer or its place in the arena ("" if
    NumPy allocates it)."""
    if v in memory.reuse:
        return em.names[memory.reuse[v]]
    return f"_arena[{places[v]}]" if v in places else ""


def _kernel_call(
    em: _Emitter, n: ir.Node, kernel: Callable, memory: MemoryPlan, places: dict[ir.Value, int]
) -> list[str]:
    """Take each result's buffer (or a new NumPy array), then run the kernel."""
    lines = []
    for v in n.outputs:
        buffer = _buffer(em, v, memory, places) or f"np.empty({v.shape}, {em.attr(v.dtype)})"
        lines.append(f"{em.names[v]} = {buffer}")
    # constants go in typed, as 0-d arrays, writeable and contiguous as a kernel's signature
    # takes them (a read-only one would be copied at every call)
    args = [em.names[v] if v.const is None else em.constant(_as_kernel_takes(v.const), "k")
            for v in n.inputs]  # fmt: skip
    args += [em.names[v] for v in n.outputs]
    launch = getattr(kernel, "launch", kernel)  # a fused kernel's call with its layout bound
    lines.append(f"{em.constant(launch, 'kernel')}({', '.join(args)})")
    return lines


def _as_kernel_takes(const: np.ndarray) -> np.ndarray:
    """A constant as a kernel takes it: itself if writeable and C-contiguous, else one copy."""
    if const.flags.c_contiguous and const.flags.writeable:
        return const
    return np.array(const, order="C")


# Cheaper spellings of the same call: a plan of small arrays spends more in a call's Python
# than in its work, and `np.sum` or `np.transpose` dispatch through Python wrappers to what
# these call directly (same dtypes, same results). sum's own function stays where it takes a
# matrix-vector product or adds columns (`reductions.own_sum`).
_REDUCES = {P.sum: "np.add.reduce", P.prod: "np.multiply.reduce", P.max: "np.maximum.reduce",
            P.min: "np.minimum.reduce"}  # fmt: skip
_METHODS = {P.transpose.impl: (np.ndarray.transpose, "axes"),
            P.reshape.impl: (np.ndarray.reshape, "shape")}  # fmt: skip


def _call(em: _Emitter, n: ir.Node, memory: MemoryPlan, places: dict[ir.Value, int]) -> str:
    args = [em.ref(v, n) for v in n.inputs]
    out = n.outputs[0]
    impl = n.prim.impl
    method = _METHODS.get(impl) if len(n.inputs) == 1 and n.inputs[0].const is None else None
    if method is not None and set(n.attrs) == {method[1]}:  # a view of an array, as its method
        return f"{em.names[out]} = {args[0]}.{method[0].__name__}({em.attr(n.attrs[method[1]])})"
    if n.prim is P.getitem and len(n.inputs) == 1 and n.inputs[0].const is None:
        # an index of slices and numbers, as the subscript the op's impl builds from it
        return f"{em.names[out]} = {args[0]}[{em.attr(tuple(n.attrs['template']))}]"
    args += [f"{k}={em.attr(a)}" for k, a in n.attrs.items()]
    buffer = _buffer(em, out, memory, places)
    if buffer:
        args.append(f"out={buffer}")
    function = _REDUCES.get(n.prim)
    x = n.inputs[0] if n.prim is P.sum else None
    if x is not None and reductions.own_sum(x.shape, x.dtype, n.attrs.get("axis")):
        function = None  # sum's own function: a matrix-vector product, or columns added
    function = function or em.function(n.prim)
    return f"{em.names[out]} = {function}({', '.join(args)})"


def generate(
    graph: ir.Graph, name: str, memory: MemoryPlan, kernels: dict[ir.Node, Callable]
) -> tuple[str, dict[str, Any]]:
    """The plan's Python source and the namespace it runs in; its first parameter is the list
    of arena views, in the order of `memory.offsets`."""
    em = _Emitter(graph)
    places = {v: i for i, v in enumerate(memory.offsets)}
    lines = [f"def {name}({', '.join(['_arena', *(em.names[v] for v in graph.inputs)])}):"]
    em.namespace["_commit"] = _no_commit  # the runtime puts its own in the namespace
    for i, n in enumerate(graph.nodes):
        if i == memory.commit:
            lines.append("    _commit()  # the commit point: nothing after it may fail")
        if n.outputs[0] in memory.joined:  # its parts were made in their places in it
            body = [f"{em.names[n.outputs[0]]} = {_buffer(em, n.outputs[0], memory, places)}"]
        elif n in kernels:
            body = _kernel_call(em, n, kernels[n], memory, places)
        else:
            body = [_call(em, n, memory, places)]
        comment = f"{n.phase}: {n.source}" if n.source else n.phase
        if n in kernels:
            what = ir.fmt_attr(n.attrs["body"]) if "body" in n.attrs else f"{n.op} kernel"
            comment = f"{what} {comment}"
        lines += [f"    {stmt}" for stmt in body[:-1]] + [f"    {body[-1]}  # {comment}"]
        dead = [em.names[v] for v in memory.dead_after.get(i, ())]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    if memory.commit >= len(graph.nodes):
        lines.append("    _commit()  # the commit point: nothing after it may fail")
    outs = [em.ref(v) if v.const is None else em.constant(v.const, "k") + ".copy()"
            for v in graph.outputs]  # fmt: skip
    lines.append(f"    return ({''.join(o + ', ' for o in outs)})")
    return "\n".join(lines) + "\n", em.namespace


def _no_commit() -> None:
    """The commit point of a plan run outside the runtime: nothing to defer."""


def compile_source(source: str, namespace: dict[str, Any], name: str) -> Callable:
    """exec the plan under a fake file name whose lines linecache can show in tracebacks; the
    function returned runs it as a generator (`run_plan`)."""
    source += "    yield  # never reached: the plan is a generator (codegen.run_plan)\n"
    filename = f"<tracegrad plan {next(_plan_ids)}: {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace["__name__"] = "tracegrad.plan"  # NumPy's warnings in a plan are an op's (__init__)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (our own generated code)
    function = namespace[name]
    weakref.finalize(function, linecache.cache.pop, filename, None)  # dies with the plan
    return functools.update_wrapper(functools.partial(run_plan, function), function)


def run_plan(plan: Callable, *args: Any) -> Any:
    """Run a generated plan to its return value, its frame off the interpreter's stack.
    CPython keeps frames on a stack of 16 KiB chunks, and maps a chunk afresh (and unmaps it
    after) whenever a call's frame does not fit in the last one. A plan's frame is large (a
    local per value): when it filled the last chunk to near its end, each of the plan's calls
    into Python (kernel launchers, NumPy's wrappers) mapped a chunk and faulted it in, or not,
    depending on how deep the caller's stack was. A generator's frame lives in the generator
    object instead."""
    try:
        plan(*args).send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("a plan never yields")


def identifier(name: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return name if name.isidentifier() else f"plan_{name}"

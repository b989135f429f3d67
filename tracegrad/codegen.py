"""Graph -> a straight-line Python plan: one statement per node, NumPy calls (BLAS matmuls), `del`
at each value's last use, elementwise results written into a dying input's buffer (`out=`) when
that is safe, and other results written into their places in the arena (`_arena`, a list of
views the plan is given). The source is registered with `linecache`, so a traceback
shows the plan's own line, which names the user's source line of that node in a comment."""

from __future__ import annotations

import linecache
import math
import threading
import tracemalloc
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import passes
from passes.memory import MemoryPlan, plan_memory

from . import ir
from .primitives import PRIMITIVES

_plan_ids = iter(range(1, 1 << 62))


class _Emitter:
    """Names values and attributes in generated source; non-literals go into the namespace."""

    def __init__(self, graph: ir.Graph):
        self.names = graph.names()
        self.namespace: dict[str, Any] = {"np": np, "dtype": np.dtype}
        self.globals_by_id: dict[int, str] = {}

    def ref(self, v: ir.Value) -> str:
        if v.const is None:
            return self.names[v]
        if v.const.ndim == 0 and v.const.dtype.kind in "fib":
            return str(v.const)  # shortest text that round-trips in the constant's own dtype
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

    def function(self, op: str) -> str:
        impl = PRIMITIVES[op].impl
        if getattr(np, getattr(impl, "__name__", ""), None) is impl:
            return f"np.{impl.__name__}"
        self.namespace[f"{op}_impl"] = impl
        return f"{op}_impl"


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
    args = [em.names[v] if v.const is None else em.constant(v.const, "k") for v in n.inputs]
    args += [em.names[v] for v in n.outputs]  # constants go in typed, as 0-d arrays
    lines.append(f"{em.constant(kernel, 'kernel')}({', '.join(args)})")
    return lines


def _call(em: _Emitter, n: ir.Node, memory: MemoryPlan, places: dict[ir.Value, int]) -> str:
    args = [em.ref(v) for v in n.inputs]
    args += [f"{k}={em.attr(a)}" for k, a in n.attrs.items()]
    out = n.outputs[0]
    buffer = _buffer(em, out, memory, places)
    if buffer:
        args.append(f"out={buffer}")
    return f"{em.names[out]} = {em.function(n.op)}({', '.join(args)})"


def generate(
    graph: ir.Graph, name: str, memory: MemoryPlan, kernels: dict[ir.Node, Callable]
) -> tuple[str, dict[str, Any]]:
    """The plan's Python source and the namespace it runs in; its first parameter is the list
    of arena views, in the order of `memory.offsets`."""
    em = _Emitter(graph)
    places = {v: i for i, v in enumerate(memory.offsets)}
    lines = [f"def {name}({', '.join(['_arena', *(em.names[v] for v in graph.inputs)])}):"]
    for i, n in enumerate(graph.nodes):
        if n in kernels:
            body = _kernel_call(em, n, kernels[n], memory, places)
        else:
            body = [_call(em, n, memory, places)]
        comment = f"{n.phase}: {n.source}" if n.source else n.phase
        if n in kernels:
            comment = f"{ir._fmt_attr(n.attrs['body'])} {comment}"
        lines += [f"    {stmt}" for stmt in body[:-1]] + [f"    {body[-1]}  # {comment}"]
        dead = [em.names[v] for v in memory.dead_after.get(i, ())]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    outs = [em.ref(v) + (".copy()" if v.const is not None else "") for v in graph.outputs]
    lines.append(f"    return ({''.join(o + ', ' for o in outs)})")
    return "\n".join(lines) + "\n", em.namespace


def compile_source(source: str, namespace: dict[str, Any], name: str) -> Callable:
    """exec the plan under a fake file name whose lines linecache can show in tracebacks."""
    filename = f"<tracegrad plan {next(_plan_ids)}: {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (our own generated code)
    return namespace[name]


class ArenaLayout:
    """Where each buffer of one plan lives in the arena: (offset, shape, dtype)."""

    def __init__(self, memory: MemoryPlan):
        self.places = [(memory.offsets[v], v.shape, v.dtype) for v in memory.offsets]
        self.nbytes = memory.arena

    def views(self, buffer: np.ndarray) -> list[np.ndarray]:
        return [
            buffer[o : o + math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)
            for o, shape, dtype in self.places
        ]


class Arena:
    """The buffer every plan of the process places its values in, sized by the largest plan
    that has run. It is lent to one call at a time; a call made while it is lent
    (another thread's) gets a buffer of its own."""

    def __init__(self) -> None:
        self.buffer = np.empty(0, np.uint8)
        self.views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layout -> views
        self.lock = threading.Lock()

    def lend(self, layout: ArenaLayout) -> tuple[list[np.ndarray], bool]:
        """Views of the arena for `layout`, and whether the arena itself was lent (then the
        caller must `give_back()`)."""
        if not self.lock.acquire(blocking=False):
            return layout.views(_aligned_empty(layout.nbytes)), False
        try:
            if self.buffer.nbytes < layout.nbytes:
                self.views.clear()
                self.buffer = np.empty(0, np.uint8)  # free the old buffer before taking the new
                self.buffer = _aligned_empty(layout.nbytes)
            views = self.views.get(layout)
            if views is None:
                views = self.views[layout] = layout.views(self.buffer)
        except BaseException:  # MemoryError: lend nothing, and stay lendable
            self.lock.release()
            raise
        return views, True

    def give_back(self) -> None:
        self.lock.release()


def _aligned_empty(nbytes: int) -> np.ndarray:
    """`nbytes` through NumPy (so tracemalloc sees them), starting on a 64-byte boundary."""
    raw = np.empty(nbytes + passes.memory.ALIGN, np.uint8)
    start = -raw.ctypes.data % passes.memory.ALIGN
    return raw[start : start + nbytes]


_arena_ref: weakref.ref | None = None  # plans hold the arena; this module only watches it


def shared_arena() -> Arena:
    """The arena of the plans alive now; freed with the last of them."""
    global _arena_ref
    arena = _arena_ref() if _arena_ref is not None else None
    if arena is None:
        arena = Arena()
        _arena_ref = weakref.ref(arena)
    return arena


class MeasuredRun:
    """Runs a plan in the arena, then `finish(inputs, outputs)` while the arena is still lent
    (it copies what leaves the step out of it). Measures the peak with tracemalloc on the first
    call and whenever the user is tracing memory anyway (tracing every call would slow every
    step): the arena bytes the plan uses plus what the step allocates besides."""

    def __init__(self, run: Callable, layout: ArenaLayout):
        self.run, self.layout, self.arena = run, layout, shared_arena()
        self.peak, self.calls = None, 0

    def __call__(self, inputs: list[np.ndarray], finish: Callable) -> Any:
        self.calls += 1
        measure = self.peak is None or tracemalloc.is_tracing()
        started = measure and not tracemalloc.is_tracing()
        views, lent = self.arena.lend(self.layout)
        try:
            if started:
                tracemalloc.start()
            if measure:
                base = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
            return finish(inputs, self.run(views, *inputs))
        finally:
            if measure:
                self.peak = self.layout.nbytes + tracemalloc.get_traced_memory()[1] - base
                if started:
                    tracemalloc.stop()
            if lent:
                self.arena.give_back()


def compile_plan(cap: Any, backend: str, pipeline: Sequence[Callable] | None, name: str) -> Any:
    from .tracer import Plan

    if pipeline is None:
        pipeline = passes.DEFAULT + ([passes.fuse] if backend == "numba" else [])
    graph, stats = passes.run(cap.graph, pipeline)
    graph, kernels = lower(graph, backend)
    memory = plan_memory(graph)
    name = _identifier(name)
    source, namespace = generate(graph, name, memory, kernels)
    run = MeasuredRun(compile_source(source, namespace, name), ArenaLayout(memory))
    return Plan(cap, run, graph, source, stats, memory, backend)


# A fused group over fewer elements runs as NumPy calls: its kernel would save microseconds a
# step (40 us on a 4096x10 softmax tail) and cost 0.1-0.5 s to compile, and a plan with only such
# groups never starts Numba (0.7 s in a new process).
KERNEL_MIN = 1 << 16


def lower(graph: ir.Graph, backend: str) -> tuple[ir.Graph, dict[ir.Node, Callable]]:
    """Compile each fused body into a kernel; a body the backend cannot compile, or too small to
    gain from it (or any body, on the NumPy backend), is spliced back as its member nodes."""
    nodes, kernels = [], {}
    for n in graph.nodes:
        if n.op != "fused":
            nodes.append(n)
            continue
        body = n.attrs["body"]
        try:
            if backend != "numba" or _elements(body) < KERNEL_MIN:
                raise NotImplementedError(backend)
            from .kernels import compile_group

            kernels[n] = compile_group(body.inputs, body.nodes, body.outputs)
            nodes.append(n)
        except NotImplementedError:
            nodes.extend(body.nodes)
    return ir.Graph(graph.inputs, nodes, graph.outputs), kernels


def _elements(body: ir.Graph) -> int:
    return max(v.size for n in body.nodes for v in (*n.inputs, *n.outputs))


def _identifier(name: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return name if name.isidentifier() else f"plan_{name}"


def _mb(n: int) -> str:
    return f"{round(n / 2**20, 1) + 0.0:.1f} MiB"  # + 0.0: no "-0.0"


def report(plan: Any) -> str:
    """Passes (nodes before/after, bytes saved), values saved for backward, planned and measured
    peak bytes of the step."""
    graph = plan.graph
    kernels = sum(n.op == "fused" for n in graph.nodes)  # groups left fused were compiled
    lines = [
        f"tracegrad plan ({plan.backend} backend): {len(graph.nodes)} nodes, {kernels} kernels"
    ]
    lines.append("passes:")
    for s in plan.stats:
        note = f"  ({s.note})" if s.note else ""
        lines.append(
            f"  {s.name:<10} nodes {s.nodes_before:>5} -> {s.nodes_after:<5} "
            f"saved {_mb(s.bytes_saved):>10}{note}"
        )
    saved = passes.saved_values(graph)
    producers = graph.producers()
    for n in graph.nodes:  # name the op inside a kernel, not just "fused"
        if n.op == "fused":
            producers.update(n.attrs["body"].producers())
    lines.append(f"saved for backward: {len(saved)} values, {_mb(sum(v.nbytes for v in saved))}")
    for v in saved:
        n = producers[v]
        lines.append(f"  {v.type_str:<20} {_mb(v.nbytes):>10}  {n.op:<10} {n.source}")
    memory = plan.memory
    lines.append(
        f"planned peak: {_mb(memory.peak)} (arena {_mb(memory.arena)}, held between steps; "
        f"{_mb(memory.peak - memory.arena)} more allocated during the step)"
    )
    peak = plan.run.peak
    measured = "not measured yet" if peak is None else _mb(peak)
    lines.append(f"measured peak (tracemalloc, call {plan.run.calls}): {measured}")
    return "\n".join(lines)

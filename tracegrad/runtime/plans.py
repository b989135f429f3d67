"""The runtime of compiled steps: `@trace` (a plan per input signature, chosen by its guards),
the arena every plan places its buffers in, the measured run, and `report()`.

The top floor: it drives the tracer (front end), the passes and code generation (compiler).
"""

from __future__ import annotations

import functools
import linecache
import math
import os
import sys
import threading
import time
import traceback
import tracemalloc
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import passes
from passes.base import is_view
from passes.budget import Budget
from passes.memory import ALIGN, MemoryPlan, plan_memory
from tracegrad.compiler.codegen import (
    PROGRESS_AFTER,
    compile_source,
    generate,
    identifier,
    kernel_groups,
    lower,
    native_nodes,
)
from tracegrad.compiler.kernels.blas import quiet_openblas
from tracegrad.core import ir
from tracegrad.core.errors import MemoryBudgetError
from tracegrad.frontend import pytree
from tracegrad.frontend.tensor import Tensor
from tracegrad.frontend.tracer import Capture, TraceError, capture, signature
from tracegrad.runtime import viz


class Plan:
    """One signature's compiled step: a callable over arrays plus the capture's bookkeeping.
    While its kernels compile in the background (`pending`), it runs the same optimized graph
    as NumPy calls, and switches to the kernels at the first call after they are ready."""

    def __init__(self, cap: Capture, name: str, graph: ir.Graph, kernels: dict, stats: list,
                 backend: str, budget: Budget | None = None, memory: MemoryPlan | None = None,
                 pending: BackgroundLowering | None = None):  # fmt: skip
        self.capture, self.name, self.stats, self.backend = cap, name, stats, backend
        self.budget = budget  # the memory-budget pass that planned it, if one was asked for
        self.pending = pending
        self._build(graph, kernels, memory or plan_memory(graph, kernels))

    def _build(self, graph: ir.Graph, kernels: dict, memory: MemoryPlan) -> None:
        self.graph, self.memory, self.kernel_count = graph, memory, len(kernels)
        self.source, namespace = generate(graph, self.name, memory, kernels)
        self.run = MeasuredRun(compile_source(self.source, namespace, self.name),
                               ArenaLayout(memory), self.pending is None)  # fmt: skip
        self.input_backed = _input_backed(graph)

    def adopt_kernels(self, wait: bool = False) -> None:
        """Switch to the kernels compiled in the background if they are ready (after waiting
        for them, if `wait`). If compiling failed, warn and go on with NumPy."""
        pending = self.pending
        if pending is None or not (wait or pending.done.is_set()):
            return
        pending.start()
        pending.done.wait()
        self.pending = None
        if pending.error is not None:
            message = f"the step's kernels failed to compile ({pending.error!r})"
            warnings.warn(f"tracegrad: {message}; it goes on running NumPy calls", RuntimeWarning,
                          stacklevel=3)  # fmt: skip
            self.run.measure_first = True  # the stand-in is the plan from now on
            return
        self._build(*pending.result, plan_memory(*pending.result))
        if pending.seconds >= PROGRESS_AFTER:
            print(f"tracegrad: {self.name}: kernels ready after {pending.seconds:.1f} s of "
                  "compiling in the background; the step runs them from now on",
                  file=sys.stderr)  # fmt: skip

    def __call__(self, arg_leaves: Sequence[Any]) -> Any:
        self.adopt_kernels()
        cap = self.capture
        inputs = [_array(arg_leaves[i]) for i in cap.args]
        for ref, via_grad in cap.reads:
            t = ref.resolve(arg_leaves)
            inputs.append(t._grad._value if via_grad else t._value)
        try:
            return self.run(inputs, functools.partial(self._finish, arg_leaves))
        except Exception as e:
            _name_user_line(e)
            raise
        finally:
            if self.pending is not None:
                self.pending.start()

    def _finish(self, arg_leaves: Sequence[Any], inputs: list[np.ndarray], outs: Sequence) -> Any:
        """Now that the step has run to its end: copy the results out of the arena and store the
        state writes in place, as eager in-place ops do. An output that is (a view of) an input
        is copied first: a write before it must not change it (`prev <- p; p <- p + 1`)."""
        cap = self.capture
        outs = [_typed(a, v) for a, v in zip(outs, self.graph.outputs, strict=True)]
        outs = [np.array(a) if i in self.input_backed else a for i, a in enumerate(outs)]
        owned = {id(a) for a in inputs}
        results = [Tensor._wrap(_fresh(a, owned)) for a in outs[: cap.n_results]]
        writes = iter(outs[cap.n_results :])
        for ref in cap.value_writes:
            _write(ref.resolve(arg_leaves), next(writes))
        for ref, to_none in cap.grad_writes:
            t = ref.resolve(arg_leaves)
            if not isinstance(t, Tensor):
                continue  # an ndarray argument has no grad to keep
            if to_none:
                t._grad = None
            elif t._grad is not None:
                _write(t._grad, next(writes))
            else:
                t._grad = Tensor._wrap(np.array(next(writes)))
        return pytree.unflatten(cap.result_tree, results)


def _name_user_line(e: Exception) -> None:
    """Add to an exception raised inside a plan the user's line of the node that failed (the
    plan's statements name it in their comments)."""
    frames = [(f, n) for f, n in traceback.walk_tb(e.__traceback__)
              if f.f_code.co_filename.startswith("<tracegrad plan")]  # fmt: skip
    if not frames or not hasattr(e, "add_note"):
        return
    frame, lineno = frames[-1]
    line = linecache.getline(frame.f_code.co_filename, lineno).strip()
    statement, _, comment = line.partition("  # ")
    where = comment.rsplit(" ", 1)[-1] if comment else "?"
    e.add_note(f"raised by the traced step at {where} (plan line {lineno}: {statement})")


def _write(t: Tensor | np.ndarray, value: np.ndarray) -> None:
    """A state write, in place like eager's (a `detach()`ed alias or the array from `.numpy()`
    sees it, and the plan's arena can hold the new value); a read-only buffer is replaced. An
    ndarray argument is written in place, as NumPy's in-place operators would."""
    if isinstance(t, np.ndarray):
        if t.flags.writeable:
            np.copyto(t, value)
        return
    t._version[0] += 1
    if isinstance(t._value, np.ndarray) and t._value.flags.writeable:
        np.copyto(t._value, value)
    else:
        t._value = np.array(value)


def _input_backed(graph: ir.Graph) -> set[int]:
    """Positions of the outputs that are graph inputs or views of them."""
    producer = graph.producers()
    inputs = set(graph.inputs)

    def backed(v: ir.Value) -> bool:
        n = producer.get(v)
        return v in inputs or (n is not None and is_view(n) and backed(n.inputs[0]))

    return {i for i, v in enumerate(graph.outputs) if backed(v)}


def _typed(a: Any, v: ir.Value) -> np.ndarray:
    """The plan's result in its graph dtype: state must never drift (float32 to float64) because
    some NumPy call promoted a scalar."""
    a = np.asarray(a)
    return a if a.dtype == v.dtype else a.astype(v.dtype)


def _array(x: Any) -> np.ndarray:
    return x._value if isinstance(x, Tensor) else np.asarray(x)


def _fresh(a: np.ndarray, owned: set[int]) -> np.ndarray:
    """A buffer nothing else shares: plan outputs may be inputs, or views of them or of the
    arena."""
    return (
        np.array(a) if id(a) in owned or not isinstance(a, np.ndarray) or a.base is not None else a
    )


RETRACES_WARNED = 8  # plans for one signature: past this, retracing is likely a mistake
SIGNATURES_WARNED = 8  # distinct input signatures: past this, shapes are likely unbucketed
MAX_SIGNATURES = 32  # plans kept per traced function; the least recently used go first


class Traced:
    """A function traced once per input signature; see `trace`."""

    def __init__(self, fn: Callable, backend: str, passes: Sequence[Callable] | None,
                 memory_budget: int | str | None = None):  # fmt: skip
        if backend not in ("numpy", "numba"):
            raise ValueError(f"trace: unknown backend {backend!r} (use 'numpy' or 'numba')")
        self.fn, self.backend, self.passes = fn, backend, passes
        if memory_budget is not None:
            parse_budget(memory_budget)  # a bad budget fails here; a share is taken per trace
        self.memory_budget = memory_budget
        self.plans: OrderedDict[Any, list[Plan]] = OrderedDict()
        self.latest: Plan | None = None
        self.warned: set[str] = set()
        self.dynamic: frozenset[int] = frozenset()  # float arguments that are plan inputs
        self.static: set[int] = set()  # float arguments the step uses as Python numbers
        self.floats_seen: dict[int, float] = {}
        self.dumped: list[str] = []  # directories TRACEGRAD_DUMP wrote, one per plan
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, key = signature(args, kwargs, self.dynamic)
        plans = self.plans.get(key, [])
        plan = next((p for p in plans if p.capture.guards_hold()), None)
        new = plan is None
        if new:
            if plans:
                self._say_why(plans[-1].capture)
            self._more_dynamic(leaves)
            plan = self._compile(self._capture(args, kwargs))
            leaves, key = signature(args, kwargs, self.dynamic)  # floats may have become inputs
            self._keep(key, plan)
        self.plans.move_to_end(key)
        self.latest = plan
        result = plan(leaves)
        if new and os.environ.get("TRACEGRAD_DUMP"):  # after the call: its measured peak
            plan.adopt_kernels(wait=True)
            where = os.environ["TRACEGRAD_DUMP"]
            self.dumped.append(viz.dump(plan, report(plan), where, self.fn.__name__))
        return result

    def _more_dynamic(self, leaves: list[Any]) -> None:
        """A Python float argument that takes a second value becomes an input of the plan
        (PyTorch's "automatic dynamic"), so that varying it (a learning rate, a temperature)
        does not trace again for each value."""
        new = set()
        for i, x in enumerate(leaves):
            if type(x) is float and i not in self.dynamic and i not in self.static:
                if self.floats_seen.setdefault(i, x) != x:
                    new.add(i)
        self.dynamic |= new

    def _capture(self, args: tuple, kwargs: dict) -> Capture:
        """Capture with the dynamic floats as inputs; if the step uses one as a Python number
        (control flow, math.*), that float is baked in from then on: one trace per value."""
        try:
            return capture(self.fn, args, kwargs, self.dynamic)
        except TraceError:
            if not self.dynamic:
                raise
            self.static |= self.dynamic
            self.dynamic = frozenset()
            self._warn(
                f"{self.fn.__name__}: a float argument that changes between calls is used as a "
                "Python number inside the step (in an `if`, float() or math.*), so each value "
                "is traced and compiled anew; pass it as a 0-d tensor to avoid that"
            )
            return capture(self.fn, args, kwargs)

    def _keep(self, key: Any, plan: Plan) -> None:
        plans = self.plans.setdefault(key, [])
        plans.append(plan)
        if len(plans) == RETRACES_WARNED:
            self._warn(
                f"{self.fn.__name__} was traced {RETRACES_WARNED} times for one signature: what "
                "its guards check keeps changing (the grads being None or not, a baked-in "
                "hyperparameter such as momentum); each new trace compiles"
            )
        if len(self.plans) == SIGNATURES_WARNED:
            self._warn(
                f"{self.fn.__name__} was traced for {SIGNATURES_WARNED} input signatures "
                "(shapes, dtypes, other arguments): each compiles, and only the last "
                f"{MAX_SIGNATURES} are kept; pad or bucket shapes that vary"
            )
        while len(self.plans) > MAX_SIGNATURES:
            self.plans.popitem(last=False)

    def _say_why(self, cap: Capture) -> None:
        """Warn, once per value, when a baked-in Python number changed and forces a new trace."""
        for w in cap.watched:
            if w.warn and not w.holds():
                self._warn(
                    f"{self.fn.__name__} is traced again because {w.describe} changed "
                    f"({w.value!r} -> {w.get()!r}): the trace bakes Python numbers in and each "
                    "new value compiles a new plan; pass it as an argument (a tensor) instead"
                )

    def _warn(self, message: str) -> None:
        if message.split(" (")[0] not in self.warned:
            self.warned.add(message.split(" (")[0])
            warnings.warn(message, stacklevel=4)

    def _compile(self, cap: Capture) -> Plan:
        budget = None if self.memory_budget is None else parse_budget(self.memory_budget)
        return compile_plan(cap, self.backend, self.passes, self.fn.__name__, budget)

    def _plan(self) -> Plan:
        """The latest plan, with its kernels: what the step runs from now on."""
        if self.latest is None:
            raise RuntimeError("this traced function has not been called yet: nothing to show")
        self.latest.adopt_kernels(wait=True)
        return self.latest

    def wait_for_kernels(self) -> None:
        """Wait until the latest plan's kernels, compiling in the background, are ready; the
        next call runs them. Steps before that run the same plan as NumPy calls."""
        if self.latest is not None:
            self.latest.adopt_kernels(wait=True)

    @property
    def graph(self) -> ir.Graph:
        """The optimized graph of the latest signature."""
        return self._plan().graph

    @property
    def source(self) -> str:
        """The generated Python source of the latest plan."""
        return self._plan().source

    def report(self) -> viz.Report:
        """The latest plan's report: prints as text; `.to_html(path)` writes the page."""
        return viz.Report(report(self._plan()), self._plan(), self.fn.__name__)

    def memory_timeline(self, path: str | None = None) -> Any:
        """The latest plan's live bytes over its nodes, as a matplotlib Figure (saved to
        `path` if given); needs `pip install "tracegrad[viz]"`."""
        return viz.memory_timeline(self._plan(), path)


def trace(
    fn: Callable | None = None,
    *,
    backend: str = "numba",
    passes: Sequence[Callable] | None = None,
    memory_budget: int | str | None = None,
) -> Any:
    """Compile a training step: `@trace`, or `@trace(backend="numpy", passes=[...])`.

    `memory_budget` (bytes, "300MB", "1.5GiB" or "40%" of the memory available when tracing)
    bounds the step's working memory: the plan recomputes forward values in backward until its
    planned peak fits, or tracing raises `MemoryBudgetError` with the smallest that does."""
    if fn is None:
        return lambda f: Traced(f, backend, passes, memory_budget)
    return Traced(fn, backend, passes, memory_budget)


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


def parse_budget(budget: int | str) -> int:
    """Bytes from an int, "300MB" / "1.5GiB" (decimal and binary units), or "40%" of the
    memory available now."""
    if isinstance(budget, int | np.integer) and not isinstance(budget, bool) and budget > 0:
        return int(budget)
    if isinstance(budget, str):
        text = budget.strip().upper().replace(" ", "")
        number = text.rstrip("KMGTIBP%")
        unit = text[len(number) :]
        try:
            value = float(number)
        except ValueError:
            value = -1.0
        if value > 0 and unit == "%" and value <= 100:
            return int(available_memory() * value / 100)
        if value > 0 and unit in _UNITS:
            return int(value * _UNITS[unit])
    raise ValueError(
        f"memory_budget: {budget!r} is not a positive number of bytes, a size such as '300MB' "
        "or '1.5GiB', or a share such as '40%'"
    )


def available_memory() -> int:
    """Bytes the system can give without swapping (MemAvailable), or free physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


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
    """The buffer every plan of the process places its values in, sized by the largest live
    plan that has run (a plan replaced by its kernels' plan, or dropped, no longer counts). It
    is lent to one call at a time; a call made while it is lent (another thread's) gets a
    buffer of its own."""

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
            needed = max([layout.nbytes, *(other.nbytes for other in self.views)])
            if self.buffer.nbytes != needed:
                self.views.clear()
                self.buffer = np.empty(0, np.uint8)  # free the old buffer before taking the new
                self.buffer = _aligned_empty(needed)
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
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
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
    step): the arena bytes the plan uses plus what the step allocates besides. A stand-in
    (`measure_first=False`: NumPy calls until the kernels are ready) measures only in the latter
    case: tracing its first call, the one whose latency a user waits for, took the GPT's from
    0.8 to 1.1-1.2 s; the kernels' plan is measured on its own first call."""

    def __init__(self, run: Callable, layout: ArenaLayout, measure_first: bool = True):
        self.run, self.layout, self.arena = run, layout, shared_arena()
        self.peak, self.calls, self.measure_first = None, 0, measure_first

    def __call__(self, inputs: list[np.ndarray], finish: Callable) -> Any:
        self.calls += 1
        measure = (self.peak is None and self.measure_first) or tracemalloc.is_tracing()
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


class BackgroundLowering:
    """`lower(graph, "numba")` in a thread, its new kernels compiling in child processes (one per
    core), while the step runs NumPy: the first call does not wait for Numba (0.15-0.6 s a
    kernel; 6.8 s of the GPT's 7.7 s first call in benchmarks/models.py). It starts when the
    first call has returned, which the compilers beside it would slow (GPT: 2.5-5.2 s)."""

    def __init__(self, graph: ir.Graph):
        self.result: tuple[ir.Graph, dict] | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._lower, args=(graph,), daemon=True,
                                        name="tracegrad-kernels")  # fmt: skip
        self._start = threading.Lock()

    def start(self) -> None:
        """Start compiling (once)."""
        with self._start:
            if self._thread.ident is None:
                self._thread.start()

    def _lower(self, graph: ir.Graph) -> None:
        start = time.perf_counter()
        try:
            self.result = lower(graph, "numba", background=True)
        except BaseException as e:  # reported by Plan.adopt_kernels, in the caller's thread
            self.error = e
        finally:
            self.seconds = time.perf_counter() - start
            self.done.set()


def background_compile() -> bool:
    """Whether new plans compile their kernels in the background: unless
    $TRACEGRAD_BACKGROUND_COMPILE is "0" (the test suite sets it, to test plans as compiled)."""
    return os.environ.get("TRACEGRAD_BACKGROUND_COMPILE", "1") != "0"


def compile_plan(
    cap: Capture,
    backend: str,
    pipeline: Sequence[Callable] | None,
    name: str,
    memory_budget: int | None = None,
) -> Plan:
    """Optimize the captured graph, lower it for `backend` and generate the plan's source.
    Under a memory budget, the budget pass runs before `schedule` (or last) and checks each of
    its choices with the rest of the pipeline, lowering and `plan_memory`; its kernels compile
    before the first call (NumPy calls in their place would not keep to the budget)."""
    if pipeline is None:
        pipeline = passes.DEFAULT + ([passes.fuse] if backend == "numba" else [])
    if backend == "numba":
        quiet_openblas()
    name = identifier(name)
    if memory_budget is not None:
        graph, stats, kernels, memory, budget = _fit(cap.graph, backend, pipeline, memory_budget)
        return Plan(cap, name, graph, kernels, stats, backend, budget, memory)
    graph, stats = passes.run(cap.graph, pipeline)
    if (
        backend == "numba"
        and (kernel_groups(graph) or native_nodes(graph))
        and background_compile()
    ):
        return Plan(cap, name, *lower(graph, "numpy"), stats, backend,
                    pending=BackgroundLowering(graph))  # fmt: skip
    return Plan(cap, name, *lower(graph, backend), stats, backend)


def _fit(graph: ir.Graph, backend: str, pipeline: Sequence[Callable], limit: int) -> tuple:
    """Run the pipeline with the budget pass; if lowering (a kernel that would not compile)
    leaves the final plan above the budget after all, solve again for less."""
    pipeline = list(pipeline)
    at = pipeline.index(passes.schedule) if passes.schedule in pipeline else len(pipeline)
    rest = pipeline[at:]

    def peak_of(g: ir.Graph) -> int:
        return plan_memory(*lower(passes.run(g, rest)[0], backend, compile=False)).peak

    target = limit
    for _ in range(3):
        budget = Budget(target, peak_of)
        graph_after, stats = passes.run(graph, [*pipeline[:at], budget, *rest])
        lowered, kernels = lower(graph_after, backend)
        memory = plan_memory(lowered, kernels)
        if memory.peak <= limit:
            budget.limit = limit
            return lowered, stats, kernels, memory, budget
        target -= memory.peak - limit
    raise MemoryBudgetError(
        f"memory budget {_mb(limit)}: the compiled plan peaks at {_mb(memory.peak)}", memory.peak
    )


def _mb(n: int) -> str:
    return f"{round(n / 2**20, 1) + 0.0:.1f} MiB"  # + 0.0: no "-0.0"


def report(plan: Any) -> str:
    """Passes (nodes before/after, bytes saved), values saved for backward, planned and measured
    peak bytes of the step."""
    graph = plan.graph
    lines = [
        f"tracegrad plan ({plan.backend} backend): {len(graph.nodes)} nodes, "
        f"{plan.kernel_count} kernels"
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
    for n in graph.nodes:  # name the op inside a kernel, not the kernel
        if n.prim.kind == "composite":
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
    if plan.budget is not None:
        lines += _budget_lines(plan, producers)
    return "\n".join(lines)


RECOMPUTED_SHOWN = 12  # report lines for recomputed values; the rest are counted


def _budget_lines(plan: Plan, producers: dict) -> list[str]:
    """The budget, what it does not count, and what the budget pass recomputes."""
    b = plan.budget
    held = sum(v.nbytes for v in plan.graph.inputs)
    share = b.extra_s / b.step_s if b.step_s else 0.0
    lines = [
        f"memory budget: {_mb(b.limit)}; planned peak {_mb(plan.memory.peak)} fits "
        f"(parameters, optimizer state and inputs, not counted: {_mb(held)})",
        f"recomputed under the budget: {len(b.recomputed)} values, estimated extra compute "
        f"{b.extra_s * 1e3:.1f} ms ({share:.0%} of the step's estimate)",
    ]
    for v, n in b.recomputed[:RECOMPUTED_SHOWN]:
        lines.append(f"  {v.type_str:<20} {_mb(v.nbytes):>10}  {n.op:<10} {n.source}")
    if len(b.recomputed) > RECOMPUTED_SHOWN:
        lines.append(f"  ... and {len(b.recomputed) - RECOMPUTED_SHOWN} more")
    return lines


__all__ = ["Arena", "Plan", "Traced", "compile_plan", "parse_budget", "report", "shared_arena",
           "trace"]  # fmt: skip

"""One signature's compiled step (`Plan`): built from a capture by `compile_plan`, which runs the
passes and lowering; it reads its inputs, runs in the arena and writes the state back: from the
plan's commit point on, the update nodes write parameters and optimizer state in place (the
memory plan says which), and what is not written in place is copied at the end."""

from __future__ import annotations

import functools
import linecache
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import passes
from passes.base import is_view
from passes.budget import Budget
from passes.memory import MemoryPlan, plan_memory
from tracegrad.compiler import lowering
from tracegrad.compiler.codegen import compile_source, generate, identifier
from tracegrad.core import ir
from tracegrad.core.errors import MemoryBudgetError
from tracegrad.frontend import pytree
from tracegrad.frontend.tensor import Tensor
from tracegrad.frontend.tracer import Capture, keep, put_back
from tracegrad.runtime.arena import ArenaLayout, MeasuredRun
from tracegrad.runtime.background import BackgroundLowering, background_compile
from tracegrad.runtime.commit import enter_commit, leave_commit
from tracegrad.runtime.report import mib


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
        self.calls = 0  # calls of the step that ran this plan, with or without its kernels
        self.built_at_call = 1  # the first call that ran what is built now (kernels: later)
        # its kernels start compiling after this call: the first (the machine is free then),
        # or later when other plans trace and run before the step first ends (a module's)
        self.kernels_after_call = 1
        self.events: list[tuple[str, float, float]] = []  # (what, perf_counter, seconds)
        self.updates = state_updates(cap)
        self._build(
            graph, kernels, memory or plan_memory(graph, kernels, self.updates, cap.n_results)
        )

    def _build(self, graph: ir.Graph, kernels: dict, memory: MemoryPlan) -> None:
        self.graph, self.memory, self.kernels = graph, memory, kernels
        self.source, namespace = generate(graph, self.name, memory, kernels)
        namespace["_commit"] = enter_commit
        self.written = [graph.inputs.index(v) for v in memory.written]
        self.run = MeasuredRun(compile_source(self.source, namespace, self.name),
                               ArenaLayout(memory), self.pending is None)  # fmt: skip
        self.input_backed = _input_backed(graph)

    def adopt_kernels(self, wait: bool = False) -> None:
        """Switch to the kernels compiled in the background if they are ready (after waiting
        for them, if `wait`). If compiling failed, warn and go on with NumPy."""
        pending = self.pending
        if pending is None or not (wait or pending.done.is_set()) or not self.runs_here(True):
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
        self._build(
            *pending.result, plan_memory(*pending.result, self.updates, self.capture.n_results)
        )
        self.built_at_call = self.calls + 1
        self.events.append((f"{len(self.kernels)} kernels compiled in the background",
                            pending.started, pending.seconds))  # fmt: skip
        if pending.seconds >= lowering.PROGRESS_AFTER:
            print(f"tracegrad: {self.name}: kernels ready after {pending.seconds:.1f} s of "
                  "compiling in the background; the step runs them from now on",
                  file=sys.stderr)  # fmt: skip

    def runs_here(self, with_kernels: bool = False) -> bool:
        """False in a process forked after kernels ran (`lowering.FORKED_FROM_OPENMP`), where
        this plan's kernels (or those compiled for it, `with_kernels`) would end the process:
        its step is traced again for NumPy, and a plan running NumPy calls keeps to them."""
        return not ((self.kernels or with_kernels) and lowering.FORKED_FROM_OPENMP)

    def inputs(self, arg_leaves: Sequence[Any]) -> list[np.ndarray]:
        """The plan function's inputs for a call's leaves: the arguments' arrays, then the
        state the trace read (values, or gradients)."""
        inputs = [_array(arg_leaves[i]) for i in self.capture.args]
        for ref, via_grad in self.capture.reads:
            t = ref.resolve(arg_leaves)
            inputs.append(t._grad._value if via_grad else t._value)
        return inputs

    def __call__(self, arg_leaves: Sequence[Any]) -> Any:
        if not self.runs_here():
            raise RuntimeError(
                f"tracegrad: {self.name}: this process was forked from one that had run "
                "compiled kernels on OpenMP threads, which a forked process cannot run; start "
                "worker processes with the 'spawn' or 'forkserver' method"
            )
        self.adopt_kernels()
        self.calls += 1
        cap = self.capture
        inputs = self.inputs(arg_leaves)
        writable(inputs, self.written, self.graph.inputs)
        try:
            try:
                result = self.run(inputs, functools.partial(self._finish, arg_leaves))
            except Exception as e:
                _name_user_line(e)
                raise
            finally:
                if self.pending is not None and self.calls >= self.kernels_after_call:
                    self.pending.start()
            for sync in cap.after:  # Python's copies of state the plan wrote (a schedule's)
                sync()
            put_back(cap.places)
        finally:
            leave_commit()  # a SIGINT deferred since the commit point: the state is whole now
        return result

    def _finish(self, arg_leaves: Sequence[Any], inputs: list[np.ndarray], outs: Sequence) -> Any:
        """Now that the step has run to its end: take the results (in buffers of their own, or
        copied out of the arena) and store the state writes in place, as eager in-place ops do.
        An output that is (a view of) an input is copied first: a write before it must not
        change it (`prev <- p; p <- p + 1`)."""
        cap = self.capture
        outs = [_typed(a, v) for a, v in zip(outs, self.graph.outputs, strict=True)]
        outs = [np.array(a) if i in self.input_backed else a for i, a in enumerate(outs)]
        owned = {id(a) for a in inputs}
        own = self.memory.own_buffers
        results = [
            Tensor._wrap(a if i in own and type(a) is np.ndarray and id(a) not in owned
                         else _fresh(a, owned))
            for i, a in enumerate(outs[: cap.n_results])
        ]  # fmt: skip
        for i in cap.numbers:
            results[i] = results[i].item()
        first: dict[int, int] = {}  # a tensor the step returns twice is one tensor, as eager's
        for i, v in enumerate(self.graph.outputs[: cap.n_results]):
            results[i] = results[first.setdefault(id(v), i)]
        keep(cap.held, results)
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


def state_updates(cap: Capture) -> dict[int, int]:
    """Output position -> input position, for each state value the step writes and reads: the
    plan may write the new value into the old one's buffer (`plan_memory`'s `updates`)."""
    base = len(cap.args)
    reads = {(id(ref.tensor), via_grad): base + k for k, (ref, via_grad) in enumerate(cap.reads)
             if ref.tensor is not None}  # fmt: skip
    pairs, at = {}, cap.n_results
    for ref in cap.value_writes:  # a write into a `.grad`'s own value replaces the grad read
        if ref.tensor is not None and (id(ref.tensor), ref.grad) in reads:
            pairs[at] = reads[id(ref.tensor), ref.grad]
        at += 1
    for ref, to_none in cap.grad_writes:
        if to_none:
            continue  # no output: the grad becomes None
        if ref.tensor is not None and (id(ref.tensor), True) in reads:
            pairs[at] = reads[id(ref.tensor), True]
        at += 1
    return pairs


def writable(inputs: list[Any], written: Sequence[int], types: Sequence[ir.Value]) -> None:
    """Make sure the plan may write the old state values at positions `written` in place: an
    array that is read-only, not contiguous, of another type, or overlapping another input (two
    tensors sharing memory) is replaced by a copy, which the write-back then copies back."""
    if not written:
        return
    shared, reach, first = set(), 0, None  # a sweep: a span starting below the reach overlaps
    for lo, hi, k in sorted((*_bounds(inputs[k]), k) for k in _may_overlap(inputs)):
        if lo < reach:
            shared |= {k, first}
        if hi > reach:
            reach, first = hi, k
    for k in written:
        a, v = inputs[k], types[k]
        if (
            not (
                isinstance(a, np.ndarray)
                and a.flags.writeable
                and a.flags.c_contiguous
                and a.flags.aligned
                and a.dtype == v.dtype
                and a.shape == v.shape
            )
            or k in shared
        ):
            inputs[k] = np.array(a, v.dtype)  # fmt: skip


def _may_overlap(inputs: list[Any]) -> list[int]:
    """The positions of the arrays that may share memory with another: views of one array
    NumPy allocated, or, if some array is on memory NumPy did not allocate (a buffer, a
    pointer), every array. Two arrays over separate allocations of NumPy's cannot overlap, and
    a step reads a thousand of them (asking each for its address costs microseconds)."""
    by_owner: dict[int, list[int]] = {}
    for k, a in enumerate(inputs):
        if not (isinstance(a, np.ndarray) and a.size):
            continue
        owner = a
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if owner.base is not None or not owner.flags.owndata:
            return [k for k, a in enumerate(inputs) if isinstance(a, np.ndarray) and a.size]
        by_owner.setdefault(id(owner), []).append(k)
    return [k for ks in by_owner.values() if len(ks) > 1 for k in ks]


def _bounds(a: np.ndarray) -> tuple[int, int]:
    if a.flags.c_contiguous:
        start = a.__array_interface__["data"][0]
        return start, start + a.nbytes
    return np.lib.array_utils.byte_bounds(a)


def _write(t: Tensor | np.ndarray, value: np.ndarray) -> None:
    """A state write, in place like eager's (a `detach()`ed alias or the array from `.numpy()`
    sees it, and the plan's arena can hold the new value); a read-only buffer is replaced. An
    ndarray argument is written in place, as NumPy's in-place operators would. A value the plan
    wrote in place is there already."""
    if isinstance(t, np.ndarray):
        if t.flags.writeable and t is not value:
            np.copyto(t, value)
        return
    t._version[0] += 1
    if t._value is value:
        return
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
        from tracegrad.compiler.kernels.blas import quiet_openblas  # loads Numba: only now

        quiet_openblas()
    name, start = identifier(name), time.perf_counter()
    if memory_budget is not None:
        graph, stats, kernels, memory, budget = _fit(
            cap.graph, backend, pipeline, memory_budget, state_updates(cap), cap.n_results
        )
        plan = Plan(cap, name, graph, kernels, stats, backend, budget, memory)
    else:
        graph, stats = passes.run(cap.graph, pipeline)
        if lowering.needs_kernels(graph, backend) and background_compile():
            plan = Plan(cap, name, *lowering.lower(graph, "numpy"), stats, backend,
                        pending=BackgroundLowering(graph))  # fmt: skip
        else:
            plan = Plan(cap, name, *lowering.lower(graph, backend), stats, backend)
    made = f" ({len(plan.kernels)} kernels)" if plan.kernels else ""
    plan.events.append((f"passes, lowering{made} and codegen", start, time.perf_counter() - start))
    return plan


def _fit(graph: ir.Graph, backend: str, pipeline: Sequence[Callable], limit: int,
         updates: dict[int, int], results: int) -> tuple:  # fmt: skip
    """Run the pipeline with the budget pass; if lowering (a kernel that would not compile)
    leaves the final plan above the budget after all, solve again for less."""
    pipeline = list(pipeline)
    at = pipeline.index(passes.schedule) if passes.schedule in pipeline else len(pipeline)
    rest = pipeline[at:]

    def peak_of(g: ir.Graph) -> int:
        lowered = lowering.lower(passes.run(g, rest)[0], backend, compile=False)
        return plan_memory(*lowered, updates, results).peak

    target = limit
    for _ in range(3):
        budget = Budget(target, peak_of, set(updates))
        graph_after, stats = passes.run(graph, [*pipeline[:at], budget, *rest])
        lowered, kernels = lowering.lower(graph_after, backend)
        memory = plan_memory(lowered, kernels, updates, results)
        if memory.peak <= limit:
            budget.limit = limit
            return lowered, stats, kernels, memory, budget
        target -= memory.peak - limit
    raise MemoryBudgetError(
        f"memory budget {mib(limit)}: the compiled plan peaks at {mib(memory.peak)}", memory.peak
    )

"""`@trace`: a plan per input signature, chosen by its guards, kept while they hold."""

from __future__ import annotations

import functools
import os
import threading
import time
import types
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tracegrad.core import ir
from tracegrad.core.errors import warn_user
from tracegrad.frontend.autodiff import is_grad_enabled
from tracegrad.frontend.tensor import PROFILERS, Listeners
from tracegrad.frontend.tracer import Capture, TraceError, capture, name_of, signature
from tracegrad.runtime.budget import parse_budget
from tracegrad.runtime.report import report

if TYPE_CHECKING:
    from tracegrad.runtime.compiled_module import CompiledCalls
    from tracegrad.runtime.plan import Plan
    from tracegrad.runtime.profile import Profile
    from tracegrad.runtime.viz import Report

# traces of one signature, and signatures: past these, retracing is likely a mistake (a step
# count, shapes that vary); `torch.compile(fn)` runs those calls eagerly from then on, as
# PyTorch does past its cache_size_limit, and `trace` warns and goes on tracing
RETRACES_WARNED = 8
SIGNATURES_WARNED = 8
MAX_SIGNATURES = 32  # plans kept per traced function; the least recently used go first
PLANS_KEPT = 8  # plans kept per signature, the newest: a Python step count traces at each step


class Traced:
    """A function traced once per input signature; see `trace`."""

    def __init__(self, fn: Callable, backend: str, passes: Sequence[Callable] | None,
                 memory_budget: int | str | None = None, fullgraph: bool = True):  # fmt: skip
        if backend not in ("numpy", "numba"):
            raise ValueError(f"trace: unknown backend {backend!r} (use 'numpy' or 'numba')")
        self.fn, self.backend, self.passes, self.name = fn, backend, passes, name_of(fn)
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
        # False (`torch.compile(fn)`'s default): a signature whose trace refuses runs eagerly,
        # where PyTorch would break the graph; True (`trace`'s): the refusal is raised
        self.fullgraph = fullgraph
        self.eager: set[Any] = set()  # the signatures that run eagerly
        self.traces: Counter[Any] = Counter()  # traces per signature
        # a function whose results autograd tracks (a forward, a loss), called with grad
        # enabled: its plans and their backward (`compiled_module`)
        self.differentiable: CompiledCalls | None = None
        # One call at a time: a call reads the state, runs and writes it back, so two at once
        # would each start from the same parameters and one update would be lost; tracing
        # swaps symbolic values into the state it captures, which another call must not read.
        self.lock = threading.RLock()
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        """`@trace` on a method: bound to the instance, which each call passes first (a
        hashable argument of the signature; what the step reads of it is watched)."""
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if Listeners.tracers:  # inside another traced step: its ops are that step's (inlined)
            return self.fn(*args, **kwargs)
        if PROFILERS:  # torch.profiler records: one event per call (its plan calls no ops)
            start = time.perf_counter_ns()
            try:
                return self._locked_call(args, kwargs)
            finally:
                if PROFILERS:
                    name = getattr(self.fn, "__name__", "step")
                    PROFILERS[-1].op(f"compiled {name}", start, (), "compiled_step")
        return self._locked_call(args, kwargs)

    def _locked_call(self, args: tuple, kwargs: dict) -> Any:
        with self.lock:
            if self.differentiable is not None and is_grad_enabled():
                return self._call_differentiable(args, kwargs)
            return self._call(args, kwargs)

    def _call_differentiable(self, args: tuple, kwargs: dict) -> Any:
        """A call of a function whose backward compiles too; `latest` is its forward plan."""
        result = self.differentiable(args, kwargs)
        if self.differentiable.latest is not None:
            self.latest = self.differentiable.latest.forward
        return result

    def _call(self, args: tuple, kwargs: dict) -> Any:
        try:
            leaves, key = signature(args, kwargs, self.dynamic)
        except TypeError as e:  # an argument that cannot be hashed
            return self._eagerly(None, e, args, kwargs)
        if key in self.eager:
            return self.fn(*args, **kwargs)
        plans = self.plans.get(key, [])
        # the newest first: it was traced because the older ones' guards failed, and a step
        # that settles (its grads set from the second call on) runs the newest from then on
        plan = next((p for p in reversed(plans) if p.runs_here() and p.capture.guards_hold()),
                    None)  # fmt: skip
        new = plan is None
        if new:
            if plans:
                self._say_why(plans[-1].capture)
            why = self._past_the_limit(key)
            if why and not self.fullgraph:
                return self._eagerly(key, TraceError(why), args, kwargs)
            self._more_dynamic(leaves)
            try:
                cap = self._capture(args, kwargs)
            except TraceError as e:  # the state is as it was: the trace restored it
                return self._eagerly(key, e, args, kwargs)
            if cap.needs_backward:  # a forward (a compiled loss): its backward compiles too
                from tracegrad.runtime.compiled_module import differentiable_function

                self.differentiable = differentiable_function(
                    self.fn, cap, self.backend, self.passes, self._budget(), self.fullgraph
                )
                return self._call_differentiable(args, kwargs)
            plan = self._compile(cap)
            leaves, key = signature(args, kwargs, self.dynamic)  # floats may have become inputs
            self._keep(key, plan)
        self.plans.move_to_end(key)
        self.latest = plan
        result = plan(leaves)
        if new and os.environ.get("TRACEGRAD_DUMP"):  # after the call: its measured peak
            from tracegrad.runtime.viz import dump

            plan.adopt_kernels(wait=True)
            where = os.environ["TRACEGRAD_DUMP"]
            self.dumped.append(dump(plan, report(plan), where, self.name))
        return result

    def _eagerly(self, key: Any, why: Exception, args: tuple, kwargs: dict) -> Any:
        """Run this call eagerly, and with a key every call of its signature, saying why; raise
        `why` instead if `fullgraph`."""
        if self.fullgraph:
            raise why
        if key is not None:
            self.eager.add(key)
        warn_user(f"torch.compile({self.name}): this call runs eagerly (PyTorch would "
                  f"break the graph here): {why}")  # fmt: skip
        return self.fn(*args, **kwargs)

    def _past_the_limit(self, key: Any) -> str | None:
        """Why tracing `key` again would pass PyTorch's cache_size_limit, if it would: a guard
        that fails at every call (a Python step count), or a new signature at every call (an
        int argument that counts). `torch.compile(fn)` runs such calls eagerly."""
        if self.traces[key] >= RETRACES_WARNED:
            return (
                f"it was traced {RETRACES_WARNED} times for this signature already "
                "(PyTorch's cache_size_limit): what its guards check keeps changing"
            )
        if key not in self.plans and len(self.plans) >= SIGNATURES_WARNED:
            return (
                f"{SIGNATURES_WARNED} input signatures were traced already (PyTorch's "
                "cache_size_limit): pad or bucket shapes that vary, pass an int that "
                "changes at every call as a tensor"
            )
        return None

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
                f"{self.name}: a float argument that changes between calls is used as a "
                "Python number inside the step (in an `if`, float() or math.*), so each value "
                "is traced and compiled anew; pass it as a 0-d tensor to avoid that"
            )
            return capture(self.fn, args, kwargs)

    def _keep(self, key: Any, plan: Plan) -> None:
        plans = self.plans.setdefault(key, [])
        plans.append(plan)
        del plans[:-PLANS_KEPT]
        self.traces[key] += 1
        if self.traces[key] == RETRACES_WARNED:
            self._warn(
                f"{self.name} was traced {RETRACES_WARNED} times for one signature: what "
                "its guards check keeps changing (the grads being None or not, a baked-in "
                "hyperparameter such as momentum, an optimizer's step count kept as a Python "
                "number: step such an optimizer outside the compiled function); each new trace "
                "compiles"
            )
        if len(self.plans) == SIGNATURES_WARNED:
            self._warn(
                f"{self.name} was traced for {SIGNATURES_WARNED} input signatures "
                "(shapes, dtypes, other arguments): each compiles, and only the last "
                f"{MAX_SIGNATURES} are kept; pad or bucket shapes that vary"
            )
        while len(self.plans) > MAX_SIGNATURES:
            self.plans.popitem(last=False)

    def _say_why(self, cap: Capture) -> None:
        """Warn, once per value, when a baked-in Python number changed and forces a new trace."""
        for w in cap.changed():
            why = ("a plan reads the objects it was traced with (a parameter its optimizer "
                   "updates, a model): another one compiles a new plan" if w.same else
                   "the trace bakes Python numbers and NumPy arrays in and each new value "
                   "compiles a new plan; pass it as an argument (a tensor) instead")  # fmt: skip
            self._warn(f"{self.name} is traced again because {w.change()}: {why}")

    def _warn(self, message: str) -> None:
        if message.split(" (")[0] not in self.warned:
            self.warned.add(message.split(" (")[0])
            warnings.warn(message, stacklevel=4)

    def _compile(self, cap: Capture) -> Plan:
        from tracegrad.runtime.plan import compile_plan  # the compiler loads with the first trace

        return compile_plan(cap, self.backend, self.passes, self.name, self._budget())

    def _budget(self) -> int | None:
        """The memory budget in bytes, its share of the memory available now, if one is set."""
        return None if self.memory_budget is None else parse_budget(self.memory_budget)

    def _plan(self) -> Plan:
        """The latest plan, with its kernels: what the step runs from now on (of a function
        whose backward compiles too, the latest forward plan)."""
        if self.latest is None:
            raise RuntimeError("this traced function has not been called yet: nothing to show")
        self.latest.adopt_kernels(wait=True)
        return self.latest

    def wait_for_kernels(self) -> None:
        """Wait until the latest plan's kernels, compiling in the background, are ready; the
        next call runs them. Steps before that run the same plan as NumPy calls."""
        if self.latest is not None:
            self.latest.adopt_kernels(wait=True)
        if self.differentiable is not None:
            self.differentiable.wait_for_kernels()

    @property
    def graph(self) -> ir.Graph:
        """The optimized graph of the latest signature."""
        return self._plan().graph

    @property
    def source(self) -> str:
        """The generated Python source of the latest plan."""
        return self._plan().source

    def report(self) -> Report:
        """The latest plan's report: prints as text; `.to_html(path)` writes the page."""
        from tracegrad.runtime.viz import Report

        plan = self._plan()
        return Report(report(plan), plan, self.name)

    def to_html(self, path: str | None = None) -> str:
        """The latest plan's report as one self-contained HTML page (written to `path` too, if
        given): `step.report().to_html(path)`."""
        return self.report().to_html(path)

    def profile(self, repeat: int = 3, args: tuple = (), kwargs: dict | None = None) -> Profile:
        """Run a plan `repeat` times instrumented and once more under tracemalloc: each
        statement's time and the bytes after it. Given a call's `args` and `kwargs`, their
        plan on them (and the state's current values); else the latest plan on zeros for its
        arguments, which may time other paths than real data does (subnormal gradients).
        Nothing is written back. `.export_chrome_trace(path)` writes it for Perfetto or
        chrome://tracing, as `torch.profiler` does."""
        from tracegrad.runtime.profile import profile

        if not args and not kwargs:
            return profile(self._plan(), repeat)
        if self.differentiable is not None:
            raise ValueError(f"{self.name}: a compiled forward (its backward compiled apart) is "
                             "profiled on zeros: call profile() without arguments")  # fmt: skip
        leaves, key = signature(args, kwargs or {}, self.dynamic)
        plan = next((p for p in reversed(self.plans.get(key, [])) if p.capture.guards_hold()),
                    None)  # fmt: skip
        if plan is None:
            raise ValueError(f"{self.name}: no plan runs these arguments: call the step with "
                             "them first")  # fmt: skip
        plan.adopt_kernels(wait=True)
        return profile(plan, repeat, leaves)

    def memory_timeline(self, path: str | None = None) -> Any:
        """The latest plan's live bytes over its nodes, as a matplotlib Figure (saved to
        `path` if given); needs `pip install "tracegrad[viz]"`."""
        from tracegrad.runtime.timeline import memory_timeline

        return memory_timeline(self._plan(), path)


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

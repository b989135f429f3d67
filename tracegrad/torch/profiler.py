"""`torch.profiler`: PyTorch's CPU profiler over tracegrad's eager ops. Inside `profile()` every
op an eager step runs (forward, backward, the optimizer's) is an event with its start, duration
and thread (and input shapes with `record_shapes=True`), `record_function(name)` a labelled range
around what runs inside it, and each call of a compiled step one event (its statements are
`step.profile()`'s). `key_averages().table()` prints PyTorch's table (self and total CPU time per
name), `export_chrome_trace()` writes the Chrome trace format; `schedule(wait, warmup, active,
repeat, skip_first)` with `prof.step()` and `on_trace_ready` (`tensorboard_trace_handler`) work
as in PyTorch. The op names are tracegrad's (`matmul`, `add`), not ATen's, and there is no
memory or FLOP accounting: `profile_memory`, `with_flops` and `with_stack` are accepted and
record nothing more."""

from __future__ import annotations

import contextlib
import enum
import gzip
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tracegrad.frontend.tensor import PROFILERS
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["ProfilerAction", "ProfilerActivity", "kineto_available", "profile", "record_function",
           "schedule", "tensorboard_trace_handler"]  # fmt: skip


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1
    XPU = 2
    MTIA = 3
    HPU = 4
    PrivateUse1 = 5


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0,
             skip_first_wait: int = 0) -> Callable[[int], ProfilerAction]:  # fmt: skip
    """PyTorch's: after `skip_first` steps, cycles of `wait` idle steps, `warmup` profiled and
    discarded, `active` recorded (the last one saves: `on_trace_ready`), `repeat` times (0:
    forever)."""
    if active <= 0 or wait < 0 or warmup < 0 or skip_first < 0:
        raise ValueError("schedule: active must be positive, the others non-negative")

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def _always(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None,
                              use_gzip: bool = False) -> Callable[[Any], None]:  # fmt: skip
    """An `on_trace_ready` that writes each trace into `dir_name` as TensorBoard's profiler
    plugin names them (`<worker>.<ms>.pt.trace.json`)."""

    def handle(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        name = f"{worker}.{time.time_ns() // 1_000_000}.pt.trace.json" + (".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, name))

    return handle


def kineto_available() -> bool:
    """PyTorch's profiling library: not here (tracegrad's profiler records CPU ops itself)."""
    return False


@dataclass
class FunctionEvent:
    """One recorded op or range: times in microseconds, as PyTorch's."""

    name: str
    start_us: float
    duration_us: float
    thread: int
    input_shapes: list = field(default_factory=list)
    kind: str = "cpu_op"
    self_cpu_time_total: float = 0.0

    @property
    def cpu_time_total(self) -> float:
        return self.duration_us

    @property
    def key(self) -> str:
        return self.name


@dataclass
class FunctionEventAvg:
    """The events of one name (and input shapes, when grouped by them)."""

    key: str
    count: int = 0
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    input_shapes: list = field(default_factory=list)

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / max(self.count, 1)

    @property
    def self_cpu_time(self) -> float:
        return self.self_cpu_time_total / max(self.count, 1)

    def add(self, e: Any) -> None:
        self.count += getattr(e, "count", 1)
        self.cpu_time_total += e.cpu_time_total
        self.self_cpu_time_total += e.self_cpu_time_total


class EventList(list):
    """Events, or their averages: `table()` prints PyTorch's table of them."""

    def table(self, sort_by: str | None = None, row_limit: int = 100,
              max_src_column_width: int = 75, max_name_column_width: int = 55,
              max_shapes_column_width: int = 80,
              header: str | None = None, top_level_events_only: bool = False) -> str:  # fmt: skip
        rows = list(self)
        if sort_by is not None:
            key = sort_by
            if key not in ("cpu_time_total", "self_cpu_time_total", "cpu_time", "count",
                           "self_cpu_time"):  # fmt: skip
                raise AttributeError(f"table(sort_by={sort_by!r}): tracegrad records CPU time "
                                     "only (cpu_time_total, self_cpu_time_total, cpu_time, "
                                     "count)")  # fmt: skip
            rows.sort(key=lambda r: getattr(r, key), reverse=True)
        if row_limit > 0:
            rows = rows[:row_limit]
        return _format_table(rows, list(self), max_name_column_width, header)

    def total_average(self) -> FunctionEventAvg:
        total = FunctionEventAvg("Total")
        for e in self:
            total.add(e)
        return total

    def __str__(self) -> str:
        return self.table()


def _format_table(rows: list, every: list, width: int, header: str | None) -> str:
    """PyTorch's layout: right-aligned columns two spaces apart, each under its own rule."""
    self_total = sum(r.self_cpu_time_total for r in every) or 1.0
    shapes = any(r.input_shapes for r in rows)
    names = [r.key[: width - 3] + "..." if len(r.key) > width else r.key for r in rows]
    titles = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
              "# of Calls"] + (["Input Shapes"] if shapes else [])  # fmt: skip
    body = [[name, f"{100 * r.self_cpu_time_total / self_total:.2f}%",
             _time(r.self_cpu_time_total), f"{100 * r.cpu_time_total / self_total:.2f}%",
             _time(r.cpu_time_total), _time(r.cpu_time_total / max(r.count, 1)), str(r.count)]
            + ([str(r.input_shapes)] if shapes else [])
            for name, r in zip(names, rows, strict=True)]  # fmt: skip
    widths = [max([len(t), 12] + [len(row[i]) for row in body]) for i, t in enumerate(titles)]

    def line(cells: list[str]) -> str:
        return "".join(f"{c:>{w}}  " for c, w in zip(cells, widths, strict=True))

    rule = line(["-" * w for w in widths])
    out = [header] if header else []
    out += [rule, line(titles), rule, *map(line, body), rule]
    return "\n".join(out + [f"Self CPU time total: {_time(self_total)}", ""])


def _time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class _Recorder:
    """What `bind` and the other recording points call while a profile records."""

    def __init__(self, shapes: bool) -> None:
        self.shapes, self.events, self.lock = shapes, [], threading.Lock()

    def op(self, name: str, start_ns: int, arrays: Iterable[Any], kind: str = "cpu_op") -> None:
        end = time.perf_counter_ns()
        shapes = [list(getattr(a, "shape", ())) for a in arrays] if self.shapes else []
        event = FunctionEvent(name, start_ns / 1e3, (end - start_ns) / 1e3, threading.get_ident(),
                              shapes, kind)  # fmt: skip
        with self.lock:
            self.events.append(event)


class profile:  # noqa: N801 (PyTorch's name)
    """PyTorch's profiler (see the module's docstring). `use_cuda`/`use_device` (the older
    `torch.autograd.profiler.profile`'s) must not ask for a GPU."""

    def __init__(self, activities: Iterable[ProfilerActivity] | None = None, *,
                 schedule: Callable[[int], ProfilerAction] | None = None,
                 on_trace_ready: Callable[[Any], None] | None = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, enabled: bool = True, use_cuda: bool = False,
                 use_device: str | None = None, **kwargs: Any) -> None:  # fmt: skip
        wanted = set(activities or [ProfilerActivity.CPU])
        if use_cuda or use_device not in (None, "cpu") or wanted - {ProfilerActivity.CPU}:
            raise RuntimeError("torch.profiler.profile: tracegrad runs on the CPU; profile "
                               "activities=[ProfilerActivity.CPU]")  # fmt: skip
        self.schedule = schedule or _always
        self.on_trace_ready, self.record_shapes, self.enabled = (
            on_trace_ready,
            record_shapes,
            enabled,
        )
        self.step_num, self.action = 0, ProfilerAction.NONE
        self._recorder: _Recorder | None = None
        self._saved: list[FunctionEvent] = []

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        self.action = self.schedule(self.step_num) if self.enabled else ProfilerAction.NONE
        self._begin()

    def stop(self) -> None:
        recorded = self.action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        self._end(keep=recorded)
        if recorded and self.on_trace_ready is not None:
            self.on_trace_ready(self)
        self.action = ProfilerAction.NONE

    def step(self) -> None:
        """The next step of `schedule`: a cycle's last active step saves its trace."""
        before = self.action
        self.step_num += 1
        self.action = self.schedule(self.step_num) if self.enabled else ProfilerAction.NONE
        if before == ProfilerAction.RECORD_AND_SAVE:
            self._end(keep=True)
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
            self._begin()
        elif before == ProfilerAction.WARMUP and self.action != ProfilerAction.WARMUP:
            self._end(keep=False)  # warm-up events are not kept
            self._begin()

    def _begin(self) -> None:
        if self.action != ProfilerAction.NONE and self._recorder is None:
            self._saved = [] if self.action != ProfilerAction.WARMUP else self._saved
            self._recorder = _Recorder(self.record_shapes)
            PROFILERS.append(self._recorder)

    def _end(self, keep: bool) -> None:
        if self._recorder is None:
            return
        with contextlib.suppress(ValueError):
            PROFILERS.remove(self._recorder)
        if keep:
            self._saved = _with_self_times(self._recorder.events)
        self._recorder = None

    # ----- results

    def events(self) -> EventList:
        return EventList(self._saved)

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False) -> EventList:  # fmt: skip
        groups: dict[Any, FunctionEventAvg] = {}
        for e in self._saved:
            key = (e.name, str(e.input_shapes)) if group_by_input_shape else e.name
            if key not in groups:
                groups[key] = FunctionEventAvg(e.name, input_shapes=e.input_shapes
                                               if group_by_input_shape else [])  # fmt: skip
            groups[key].add(e)
        return EventList(groups.values())

    def export_chrome_trace(self, path: str) -> None:
        """The Chrome trace event format (Perfetto, chrome://tracing, TensorBoard)."""
        events = [{"ph": "X", "name": e.name, "cat": e.kind, "ts": e.start_us,
                   "dur": e.duration_us, "pid": os.getpid(), "tid": e.thread,
                   "args": {"Input Dims": e.input_shapes} if e.input_shapes else {}}
                  for e in self._saved]  # fmt: skip
        data = json.dumps({"traceEvents": events, "displayTimeUnit": "ms",
                           "deviceProperties": []})  # fmt: skip
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8") as f:
            f.write(data)

    @property
    def profiler(self) -> profile:  # (PyTorch's `prof.profiler.key_averages()`)
        return self


def _with_self_times(events: list[FunctionEvent]) -> list[FunctionEvent]:
    """Each event's self time: its duration less its children's (the events that run inside
    it on its thread)."""
    by_thread: dict[int, list[FunctionEvent]] = {}
    for e in sorted(events, key=lambda e: (e.start_us, -e.duration_us)):
        by_thread.setdefault(e.thread, []).append(e)
    for chain in by_thread.values():
        open_: list[FunctionEvent] = []
        for e in chain:
            e.self_cpu_time_total = e.duration_us
            while open_ and open_[-1].start_us + open_[-1].duration_us <= e.start_us:
                open_.pop()
            if open_:
                open_[-1].self_cpu_time_total -= e.duration_us
            open_.append(e)
    return sorted(events, key=lambda e: e.start_us)


class record_function(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    """A labelled range in the profile (`with record_function("attention"):`), nothing when no
    profile records."""

    def __init__(self, name: str, args: str | None = None) -> None:
        self.name = name
        self._starts: list[int] = []  # a decorator's one instance may be entered recursively

    def __enter__(self) -> record_function:
        self._starts.append(time.perf_counter_ns())
        return self

    def __exit__(self, *exc: Any) -> None:
        start = self._starts.pop()
        if PROFILERS:
            PROFILERS[-1].op(self.name, start, (), "user_annotation")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils.benchmark`: timing a statement as PyTorch's `Timer` does (Python's `timeit`
underneath), with `Measurement`s that print their median and interquartile range and a `Compare`
that tables several."""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Compare", "Measurement", "Timer"]


class Measurement:
    """The times of `number_per_run` executions each (`times` per execution, in seconds)."""

    def __init__(self, number_per_run: int, raw_times: Sequence[float], task_spec: Timer) -> None:
        self.number_per_run, self.raw_times = number_per_run, list(raw_times)
        self.task_spec = task_spec
        self.stmt, self.label, self.sub_label = task_spec.stmt, task_spec.label, task_spec.sub_label
        self.description, self.num_threads = task_spec.description, task_spec.num_threads

    @property
    def times(self) -> list[float]:
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def iqr(self) -> float:
        q1, q3 = np.percentile(self.times, [25, 75])
        return float(q3 - q1)

    def __repr__(self) -> str:
        head = f"{self.label}: {self.sub_label}" if self.label else self.stmt
        return (f"<Measurement object at {id(self):#x}>\n{head}\n"
                f"  Median: {_format(self.median)}\n  IQR:    {_format(self.iqr)} "
                f"({len(self.times)} measurements, {self.number_per_run} runs per measurement, "
                f"{self.num_threads} thread{'s' if self.num_threads > 1 else ''})")  # fmt: skip


def _format(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds / 1e-9:.2f} ns"


class Timer:
    """`Timer(stmt, setup, globals=...)`: `timeit(n)` runs `stmt` n times once;
    `blocked_autorange(min_run_time)` repeats blocks long enough to time until that long has
    passed; `adaptive_autorange` is the same here."""

    def __init__(self, stmt: str | Callable = "pass", setup: str = "pass",
                 global_setup: str = "", timer: Callable[[], float] = timeit.default_timer,
                 globals: dict | None = None, label: str | None = None,  # noqa: A002
                 sub_label: str | None = None, description: str | None = None,
                 env: str | None = None, num_threads: int = 1, language: Any = "python",
                 ) -> None:  # fmt: skip
        if language not in ("python", "py"):
            raise ValueError("torch.utils.benchmark.Timer: only Python statements are timed")
        self.stmt, self.label, self.sub_label = stmt, label, sub_label
        self.description, self.num_threads = description, num_threads
        setup = f"{global_setup}\n{setup}" if global_setup else setup
        self._timer = timeit.Timer(stmt, setup, timer, globals=dict(globals or {}))

    def timeit(self, number: int = 1000000) -> Measurement:
        self._timer.timeit(min(number, 100))  # a warm-up, as PyTorch's
        return Measurement(number, [self._timer.timeit(number)], self)

    def blocked_autorange(self, callback: Callable | None = None,
                          min_run_time: float = 0.2) -> Measurement:  # fmt: skip
        number = self._block_size()
        times, total = [], 0.0
        while total < min_run_time or not times:
            t = self._timer.timeit(number)
            times.append(t)
            total += t
            if callback is not None:
                callback(number, t)
        return Measurement(number, times, self)

    def adaptive_autorange(self, threshold: float = 0.1, *, min_run_time: float = 0.01,
                           max_run_time: float = 10.0, callback: Callable | None = None,
                           ) -> Measurement:  # fmt: skip
        return self.blocked_autorange(callback, max(min_run_time, 0.2))

    def _block_size(self) -> int:
        """The smallest power of ten of executions that takes at least 10 ms."""
        number = 1
        while self._timer.timeit(number) < 0.01:
            number *= 10
        return number


class Compare:
    """A table of measurements: a row per sub-label, a column per description, under each
    label; `print()` shows the medians in microseconds."""

    def __init__(self, results: Sequence[Measurement]) -> None:
        self.results = list(results)

    def __str__(self) -> str:
        lines = []
        for label in dict.fromkeys(m.label for m in self.results):
            group = [m for m in self.results if m.label == label]
            columns = list(dict.fromkeys(m.description or "" for m in group))
            lines.append(f"[{'-' * 10} {label or ''} {'-' * 10}]")
            lines.append(" " * 24 + " | ".join(f"{c:>12}" for c in columns))
            for row in dict.fromkeys(m.sub_label or m.stmt for m in group):
                cells = {m.description or "": m.median * 1e6 for m in group
                         if (m.sub_label or m.stmt) == row}  # fmt: skip
                lines.append(
                    f"{str(row)[:22]:<24}"
                    + " | ".join(f"{cells[c]:12.1f}" if c in cells else " " * 12 for c in columns)
                )
        return "\n".join(lines + ["", "Times are in microseconds (us)."])

    def print(self) -> None:
        print(str(self))

    def trim_significant_figures(self) -> None:
        """Accepted: the table prints one decimal either way."""

    def colorize(self, rowwise: bool = False) -> None:
        """Accepted: the table is printed without colors."""


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

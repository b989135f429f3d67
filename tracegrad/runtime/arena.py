"""The arena every plan places its buffers in (one NumPy buffer shared by the process's plans,
so tracemalloc sees it and no step pays for fresh pages), and the measured run that lends it."""

from __future__ import annotations

import math
import threading
import tracemalloc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from passes.memory import ALIGN, MemoryPlan


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
    case: its first call is the one whose latency a user waits for, and tracemalloc slows every
    allocation in it; the kernels' plan is measured on its own first call."""

    def __init__(self, run: Callable, layout: ArenaLayout, measure_first: bool = True):
        self.run, self.layout, self.arena = run, layout, shared_arena()
        self.peak, self.calls, self.measure_first = None, 0, measure_first
        self.measured_call = 0  # which of its calls measured `peak`

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
                self.measured_call = self.calls
                if started:
                    tracemalloc.stop()
            if lent:
                self.arena.give_back()

"""Kernels compiled in the background while a new plan's first calls run as NumPy calls."""

from __future__ import annotations

import os
import threading
import time

from tracegrad.compiler import lowering
from tracegrad.core import ir


class BackgroundLowering:
    """`lower(graph, "numba")` in a thread, its new kernels compiling in child processes (one per
    core), while the step runs NumPy: the first call does not wait for Numba, which takes a
    good part of a second per kernel. It starts when the first call has returned: compilers
    running beside the first call would take the cores it runs on."""

    def __init__(self, graph: ir.Graph):
        self.result: tuple[ir.Graph, dict] | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.started = 0.0  # time.perf_counter() when compiling began
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
        start = self.started = time.perf_counter()
        try:
            self.result = lowering.lower(graph, "numba", background=True)
        except BaseException as e:  # reported by Plan.adopt_kernels, in the caller's thread
            self.error = e
        finally:
            self.seconds = time.perf_counter() - start
            self.done.set()


def background_compile() -> bool:
    """Whether new plans compile their kernels in the background: unless
    $TRACEGRAD_BACKGROUND_COMPILE is "0" (the test suite sets it, to test plans as compiled)."""
    return os.environ.get("TRACEGRAD_BACKGROUND_COMPILE", "1") != "0"

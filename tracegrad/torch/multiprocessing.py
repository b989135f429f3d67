"""`torch.multiprocessing`: Python's `multiprocessing` under PyTorch's name, tensors sent to
another process in shared memory, as PyTorch's (`tracegrad.frontend.sharing`): Hogwild training
(`model.share_memory()`, then processes that each train it) writes one set of parameters.
PyTorch's two sharing strategies are accepted; both pass a file in shared memory by its
descriptor here."""

from __future__ import annotations

import multiprocessing as _mp
import signal
import sys
from collections.abc import Callable
from multiprocessing import *  # noqa: F403
from multiprocessing import connection
from typing import Any

_STRATEGIES = {"file_descriptor", "file_system"}
_strategy = "file_descriptor"


def get_all_sharing_strategies() -> set[str]:
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    return _strategy


def set_sharing_strategy(new_strategy: str) -> None:
    """Accepted for either of PyTorch's strategies (scripts set "file_system" to avoid running
    out of descriptors); the memory is shared the same way under both."""
    global _strategy
    if new_strategy not in _STRATEGIES:
        raise ValueError(
            f"set_sharing_strategy: {new_strategy!r} is not one of {sorted(_STRATEGIES)}"
        )
    _strategy = new_strategy


class ProcessException(Exception):
    """A spawned process failed: `error_index` and `pid` say which."""

    def __init__(self, msg: str, error_index: int, pid: int) -> None:
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid

    def __reduce__(self) -> tuple:
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised: the message ends with its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a nonzero code, or was killed by a signal."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int,
                 signal_name: str | None = None) -> None:  # fmt: skip
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self) -> tuple:
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _wrap(fn: Callable[..., Any], i: int, args: tuple, errors: Any) -> None:
    """What a spawned process runs: fn(i, *args); an exception's traceback goes to the parent."""
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        import traceback

        errors.put(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes `spawn(..., join=False)` started: `join()` waits (up to `timeout`) and says
    whether all have ended; when one fails, it stops the others and raises its error."""

    def __init__(self, processes: list[Any], errors: list[Any]) -> None:
        self.processes, self.error_queues = processes, errors

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        alive = [p.sentinel for p in self.processes if p.exitcode is None]
        if alive:
            connection.wait(alive, timeout)
        failed = next((i for i, p in enumerate(self.processes) if p.exitcode not in (None, 0)),
                      None)  # fmt: skip
        if failed is None:
            return all(p.exitcode == 0 for p in self.processes)
        for p in self.processes:
            if p.exitcode is None:
                p.terminate()
            p.join()
        process, errors = self.processes[failed], self.error_queues[failed]
        if not errors.empty():
            raise ProcessRaisedException(
                f"\n\n-- Process {failed} terminated with the following error:\n{errors.get()}",
                failed, process.pid,
            )  # fmt: skip
        code = process.exitcode
        if code < 0:
            name = signal.Signals(-code).name
            raise ProcessExitedException(f"process {failed} terminated with signal {name}",
                                         failed, process.pid, code, name)  # fmt: skip
        raise ProcessExitedException(f"process {failed} terminated with exit code {code}",
                                     failed, process.pid, code)  # fmt: skip


def start_processes(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1,
                    join: bool = True, daemon: bool = False,
                    start_method: str = "spawn") -> ProcessContext | None:  # fmt: skip
    """Run fn(i, *args) in `nprocs` new processes, i = 0 .. nprocs - 1; with `join`, wait for
    them (raising the first failure's error, with its traceback); else return their context."""
    context = _mp.get_context(start_method)
    errors = [context.SimpleQueue() for _ in range(nprocs)]
    processes = [context.Process(target=_wrap, args=(fn, i, args, errors[i]), daemon=daemon)
                 for i in range(nprocs)]  # fmt: skip
    for p in processes:
        p.start()
    started = ProcessContext(processes, errors)
    if not join:
        return started
    while not started.join():
        pass
    return None


def spawn(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1, join: bool = True,
          daemon: bool = False, start_method: str = "spawn") -> ProcessContext | None:  # fmt: skip
    return start_processes(fn, args, nprocs, join, daemon, start_method)

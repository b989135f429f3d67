"""`torch.multiprocessing`: Python's `multiprocessing` under PyTorch's name, tensors sent to
another process in shared memory, as PyTorch's (`tracegrad.frontend.sharing`): Hogwild training
(`model.share_memory()`, then processes that each train it) writes one set of parameters.
PyTorch's two sharing strategies are accepted; both pass a file in shared memory by its
descriptor here."""

from __future__ import annotations

import multiprocessing as _mp
from collections.abc import Callable
from multiprocessing import *  # noqa: F403
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


class ProcessRaisedException(Exception):
    """A spawned process failed (PyTorch's name for the error `spawn` raises)."""


def spawn(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1, join: bool = True,
          daemon: bool = False, start_method: str = "spawn") -> list[Any] | None:  # fmt: skip
    """Run fn(i, *args) in `nprocs` new processes, i = 0 .. nprocs - 1; with `join`, wait for
    them and raise if one failed; else return the processes."""
    context = _mp.get_context(start_method)
    processes = [context.Process(target=fn, args=(i, *args), daemon=daemon) for i in range(nprocs)]
    for p in processes:
        p.start()
    if not join:
        return processes
    for p in processes:
        p.join()
    failed = [i for i, p in enumerate(processes) if p.exitcode != 0]
    if failed:
        raise ProcessRaisedException(
            f"torch.multiprocessing.spawn: process {failed[0]} exited with code "
            f"{processes[failed[0]].exitcode}"
        )
    return None


def start_processes(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1,
                    join: bool = True, daemon: bool = False,
                    start_method: str = "spawn") -> list[Any] | None:  # fmt: skip
    return spawn(fn, args, nprocs, join, daemon, start_method)

"""`torch.multiprocessing`: Python's `multiprocessing` under PyTorch's name (scripts import it at
the top, and some start workers with `spawn`). Tensors passed to another process are copies:
tracegrad does not share a tensor's memory between processes (`Module.share_memory` raises), so
Hogwild-style training, which writes shared parameters from several processes, is not
supported."""

from __future__ import annotations

import multiprocessing as _mp
from collections.abc import Callable
from multiprocessing import *  # noqa: F403
from typing import Any


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

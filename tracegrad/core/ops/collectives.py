"""Collectives: an all-reduce over the ranks of a job, a node of the graph like any op. The ranks
are MPI's (mpi4py is imported only when a step runs one), or `torch.distributed`'s process group
once one is made (`use_group`)."""

from __future__ import annotations

import builtins
import math
import time
from typing import Any

import numpy as np

from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, Primitive


def wait_request(request: Any, timeout: float | None, what: str) -> None:
    """Wait for a non-blocking MPI request; past `timeout` seconds, raise TimeoutError (the
    process's excepthook then aborts every rank instead of letting them hang).

    MPI moves a message only inside MPI calls of both ranks, so it first polls without pause for
    SPIN_S (a message in flight is done within it); then it sleeps between polls (10 us,
    doubling up to 250 us) instead of spinning on in MPI_Wait, which would take a core from the
    peer ranks and other processes of a shared host while it waits for them."""
    if hasattr(request, "is_completed"):  # a thread's work (a socket group's): it says when done
        request.wait(timeout)
        return
    start = time.monotonic()
    deadline = math.inf if timeout is None else start + timeout
    pause = 1e-5
    while not request.Test():
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"{what}: no answer from the other ranks within {timeout} s")
        if now - start > SPIN_S:
            time.sleep(pause)
            pause = builtins.min(2 * pause, 2.5e-4)


# Polling with sleeps stalls the transfer itself: each of a message's pipelined chunks waits for
# both ranks' next poll. A message in flight completes within this much polling without pause.
SPIN_S = 2e-3


class MpiWorld:
    """MPI's COMM_WORLD as a group of ranks: `size`, and `iallreduce(send, recv)` summing into
    `recv`, returning a request to `Test()`."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self.comm, self.sum, self.size = MPI.COMM_WORLD, MPI.SUM, MPI.COMM_WORLD.size

    def iallreduce(self, send: np.ndarray, recv: np.ndarray) -> Any:
        return self.comm.Iallreduce(send, recv, op=self.sum)


_group: Any = None


def use_group(group: Any) -> None:
    """Make a step's all-reduce run over `group` (None: MPI's world again)."""
    global _group
    _group = group


def group_ranks() -> tuple[int, int] | None:
    """(rank, size) in the group `use_group` made current (torch.distributed's), if any."""
    return None if _group is None or isinstance(_group, MpiWorld) else (_group.rank, _group.size)


def _allreduce(x: np.ndarray, *, op: str, timeout: float | None, out: Any = None) -> np.ndarray:
    global _group
    if _group is None:
        _group = MpiWorld()
    out = np.empty(x.shape, x.dtype) if out is None else out
    wait_request(_group.iallreduce(np.ascontiguousarray(x), out), timeout, "allreduce")
    if op == "mean":
        np.multiply(out, x.dtype.type(1.0 / _group.size), out=out)
    return out


def _allreduce_rule(x, *, op, timeout):
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    if op == "sum" and x.dtype.kind in "iu":  # a count (batch norm's batches seen)
        return x.shape, x.dtype
    return shapes.floating(x)


# Every rank's sum (or mean) of x. Summed over ranks, each rank's loss reads every rank's x
# through the result, so the gradient is the same all-reduce of the cotangents.
allreduce = Primitive("allreduce", _allreduce, _allreduce_rule,
                      (lambda g, out, x, op, timeout: allreduce(g, op=op, timeout=timeout),),
                      kind=Kind.COLLECTIVE, accepts_out=True)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]

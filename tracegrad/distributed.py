"""Data-parallel training over MPI (mpi4py), as MegEngine does it: every rank runs the same step
on its shard of the batch, and an all-reduce callback on the GradManager makes every rank's
gradients the mean (or sum) over ranks before the optimizer reads them.

    dist.init()
    dist.broadcast_parameters(model.parameters())
    gm = GradManager().attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
    x, y = dist.shard(x_batch, y_batch)

Launch with `mpiexec -n 2 python train.py` (`pip install -e ".[distributed]"` brings mpi4py and
MPICH's `mpiexec`). Eagerly the callback starts a non-blocking all-reduce per bucket of
gradients as backward delivers them, and GradManager waits for them (`flush`) at the end of
backward; under `@trace` it adds an `allreduce` node to the graph instead, which the schedule runs
as soon as its gradient exists. A rank that raises aborts every rank (MPI_Abort), so a failure
never leaves the others hanging in a collective.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.ops.collectives import group_ranks, wait_request
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.tensor import Tensor

# mpiexec forwards a rank's stderr through a pipe, and an Abort right after writing can end the
# rank before its message is read: it waits this long first
ABORT_GRACE_S = 0.2

_comm: Any = None


def init() -> None:
    """Start MPI (once) and make an uncaught exception on any rank abort all of them, with a
    message naming the rank, instead of leaving the others waiting in a collective forever."""
    global _comm
    if _comm is not None:
        return
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            'tracegrad.distributed needs mpi4py: pip install -e ".[distributed]"'
        ) from e
    _comm = MPI.COMM_WORLD
    # Replicas stay identical only if every rank runs the same plan at every step: ranks that
    # switched from NumPy calls to kernels compiled in the background at different steps would
    # round differently and drift apart. So traced steps compile before their first call.
    os.environ["TRACEGRAD_BACKGROUND_COMPILE"] = "0"
    previous = sys.excepthook

    def abort_all(kind: type, value: BaseException, tb: Any) -> None:
        # the one line that names the rank goes first: Abort may cut the traceback short
        sys.stderr.write(
            f"tracegrad.distributed: rank {rank()} of {world_size()} failed "
            f"({kind.__name__}: {value}); aborting all ranks\n"
        )
        sys.stderr.flush()
        previous(kind, value, tb)
        sys.stderr.flush()
        time.sleep(ABORT_GRACE_S)
        _comm.Abort(1)

    sys.excepthook = abort_all


def _world() -> Any:
    if _comm is None:
        raise RuntimeError("tracegrad.distributed: call init() first")
    return _comm


def is_initialized() -> bool:
    return _comm is not None


def rank() -> int:
    return _world().Get_rank()


def world_size() -> int:
    return _world().Get_size()


def job_place() -> tuple[int, int] | None:
    """(rank, size) of this process in its job: torch.distributed's process group if one is
    made, else MPI's world if `init()` ran, else None."""
    found = group_ranks()
    if found is not None:
        return found
    return (rank(), world_size()) if is_initialized() else None


def broadcast_parameters(
    params: Iterable[Tensor], root: int = 0, timeout: float | None = None
) -> None:
    """Overwrite every rank's parameters with rank `root`'s, so all ranks start alike."""
    comm = _world()
    with no_grad():
        for p in params:
            buf = np.ascontiguousarray(p.numpy())
            wait_request(comm.Ibcast(buf, root=root), timeout, f"broadcast on rank {rank()}")
            p._assign(Tensor._of(buf))


def shard(*arrays: np.ndarray) -> Any:
    """This rank's contiguous block (along axis 0) of each array: rank r of n gets the r-th of n
    nearly equal parts, so n ranks together see the whole batch in its order."""
    r, n = rank(), world_size()
    out = []
    for a in arrays:
        bounds = np.linspace(0, len(a), n + 1).round().astype(int)
        out.append(a[bounds[r] : bounds[r + 1]])
    return out[0] if len(out) == 1 else tuple(out)


class AllReduce:
    """A GradManager callback: `cb(param, grad)` returns the gradient reduced over all ranks.

    Eagerly, gradients are gathered into buckets of about `bucket_bytes` (one message for many
    small gradients; a large one is sent from its own buffer); a full bucket is sent at once
    with a non-blocking all-reduce, so communication overlaps the rest of backward. The returned
    tensors are filled by `flush()`, which GradManager calls at the end of backward. Traced, it
    adds an `allreduce` node to the step's graph. `timeout` (seconds) bounds every wait.
    Every rank must deliver the same gradients in the same order (the same model and step), as
    the buckets are matched by position; otherwise the wait times out or MPI reports a mismatch."""

    def __init__(self, op: str, bucket_bytes: int, timeout: float | None):
        if op not in ("sum", "mean"):
            raise ValueError(f"make_allreduce_cb: op must be 'sum' or 'mean', not {op!r}")
        self.op, self.bucket_bytes, self.timeout = op, bucket_bytes, timeout
        self._bucket: list[tuple[np.ndarray, np.ndarray]] = []  # (local gradient, result)
        self._bytes = 0
        self._sent: list[tuple[Any, np.ndarray, np.ndarray, list]] = []

    def __call__(self, param: Tensor, grad: Tensor) -> Tensor:
        if grad.is_symbolic:
            return P.allreduce(grad, op=self.op, timeout=self.timeout)
        local = np.ascontiguousarray(grad.numpy())
        if self._bucket and self._bucket[0][0].dtype != local.dtype:
            self._send()
        result = np.empty_like(local)
        self._bucket.append((local, result))
        self._bytes += local.nbytes
        if self._bytes >= self.bucket_bytes:
            self._send()
        for request, *_ in self._sent:  # MPI progresses messages only inside MPI calls
            request.Test()
        return Tensor._of(result)

    def _send(self) -> None:
        from mpi4py import MPI

        items = self._bucket
        if len(items) == 1:
            send, recv = items[0]
        else:
            send = np.concatenate([local.reshape(-1) for local, _ in items])
            recv = np.empty_like(send)
        self._sent.append((_world().Iallreduce(send, recv, op=MPI.SUM), send, recv, items))
        self._bucket, self._bytes = [], 0

    def flush(self) -> None:
        """Send what is left, wait for every bucket and fill the returned gradients."""
        if self._bucket:
            self._send()
        sent, self._sent = self._sent, []
        scale = 1.0 / world_size() if self.op == "mean" else None
        for request, _, recv, items in sent:
            wait_request(request, self.timeout, f"allreduce on rank {rank()}")
            offset = 0
            for local, result in items:
                if len(items) > 1:
                    result.reshape(-1)[:] = recv[offset : offset + local.size]
                    offset += local.size
                if scale is not None:
                    np.multiply(result, result.dtype.type(scale), out=result)


def make_allreduce_cb(
    op: str = "mean", bucket_bytes: int = 1 << 20, timeout: float | None = None
) -> AllReduce:
    """A GradManager callback reducing each gradient over all ranks (see `AllReduce`)."""
    _world()
    return AllReduce(op, bucket_bytes, timeout)

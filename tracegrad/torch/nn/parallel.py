"""`torch.nn.parallel`: the data-parallel wrappers. tracegrad has no GPUs, so `DataParallel`
without device ids runs its module as it is (as PyTorch's does without CUDA) and any request for
GPUs raises; `DistributedDataParallel` averages gradients over `torch.distributed`'s ranks.
DataParallel's parts (`scatter`, `gather`) are named, for code that imports them, and refuse."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.frontend.autodiff import queue_callback
from tracegrad.frontend.device import require_cpu
from tracegrad.frontend.functions import cat
from tracegrad.frontend.tensor import Listeners, Tensor
from tracegrad.frontend.tracer import watch, watch_place
from tracegrad.nn import Module
from tracegrad.torch import distributed as dist
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided


def _no_gpus(device_ids: Sequence[Any] | None, where: str) -> None:
    for d in device_ids or ():
        require_cpu(d, where)


class DataParallel(Module):
    """Runs `module` as it is: there are no GPUs to split the batch over. `module.module` is
    the wrapped module, as in PyTorch (its state_dict keys start with "module.")."""

    def __init__(self, module: Module, device_ids: Sequence[Any] | None = None,
                 output_device: Any = None, dim: int = 0) -> None:  # fmt: skip
        super().__init__()
        _no_gpus(device_ids, "DataParallel")
        if output_device is not None:
            require_cpu(output_device, "DataParallel")
        self.module, self.dim = module, dim

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


def data_parallel(module: Module, inputs: Any, device_ids: Sequence[Any] | None = None,
                  output_device: Any = None, dim: int = 0,
                  module_kwargs: Any = None) -> Any:  # fmt: skip
    """module(inputs), after checking that no GPU is asked for."""
    _no_gpus(device_ids, "data_parallel")
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return module(*inputs, **(module_kwargs or {}))


def _needs_gpus(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        """DataParallel's part: it moves chunks to GPUs (PyTorch's refuses CPU targets too)."""
        raise ValueError(f"torch.nn.parallel.{name} moves tensors to GPUs; tracegrad has none")

    refuse.__name__ = name
    return refuse


scatter, gather, scatter_kwargs = map(_needs_gpus, ("scatter", "gather", "scatter_kwargs"))


# PyTorch's bucket sizes: the first bucket small, so that its all-reduce starts early in backward
FIRST_BUCKET_BYTES, BUCKET_BYTES = 1 << 20, 25 << 20


class DistributedDataParallel(Module):
    """Data parallelism over `torch.distributed`'s ranks, as PyTorch's: building it copies rank
    0's parameters and buffers to every rank; each forward (in training) copies rank 0's
    buffers; each backward leaves every rank's `.grad` the mean over ranks. Eagerly, gradients
    go in buckets (in the reverse order of `parameters()`, as backward delivers them) whose
    all-reduce starts as soon as the bucket is complete, overlapping the rest of backward, and
    backward waits for them at its end; inside a compiled step each bucket's all-reduce is a
    node of the plan. `no_sync()` (or `require_backward_grad_sync = False`) accumulates locally.
    A parameter no rank used keeps `grad` None; one some ranks used gets the mean over all."""

    def __init__(self, module: Module, device_ids: Sequence[Any] | None = None,
                 output_device: Any = None, dim: int = 0, broadcast_buffers: bool = True,
                 process_group: Any = None, bucket_cap_mb: float | None = None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__()
        _no_gpus(device_ids, "DistributedDataParallel")
        if not dist.is_initialized():
            raise ValueError(
                "DistributedDataParallel: Default process group has not been "
                "initialized, please make sure to call init_process_group."
            )
        self.module, self.dim, self.broadcast_buffers = module, dim, broadcast_buffers
        self.device_ids, self.output_device = device_ids, output_device
        self.find_unused_parameters, self.static_graph = find_unused_parameters, static_graph
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.process_group = dist.new_group()
        self.require_backward_grad_sync = self.require_forward_param_sync = True
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.detach(), 0)
        cap = BUCKET_BYTES if bucket_cap_mb is None else int(bucket_cap_mb * (1 << 20))
        params = [p for p in module.parameters() if p.requires_grad]
        self.reducer = Reducer(self, params[::-1], cap)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.broadcast_buffers and self.training and self.require_forward_param_sync:
            self._sync_buffers()
        return self.module(*inputs, **kwargs)

    def _sync_buffers(self) -> None:
        """Rank 0's buffers (batch norm's running statistics) to every rank. In a compiled step,
        as an all-reduce of rank 0's values and zeros elsewhere (a node of the plan)."""
        if not Listeners.tracers:
            for b in self.module.buffers():
                dist.broadcast(b.detach(), 0)
            return
        rank = dist.get_rank()
        watch(("ddp rank", id(self)), "torch.distributed.get_rank()", dist.get_rank)
        for b in self.module.buffers():
            mine = b.detach() if rank == 0 else Tensor._of(np.zeros(b.shape, b._value.dtype))
            b.detach()._assign(P.allreduce(mine, op="sum", timeout=None))

    def _get_ddp_logging_data(self) -> dict:
        return {}

    def _set_static_graph(self) -> None:
        self.static_graph = True

    def register_comm_hook(self, state: Any, hook: Any) -> None:
        raise NotImplementedError("DistributedDataParallel.register_comm_hook is not provided by "
                                  "tracegrad (its buckets are averaged by all-reduce)")  # fmt: skip

    @contextlib.contextmanager
    def join(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        """Uneven inputs are not handled: every rank must run the same number of steps (a rank
        that ends early closes its sockets, and the others' next collective raises, naming it)."""
        yield

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward inside accumulates `.grad` locally; the next one outside reduces the sum."""
        before, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before


class Reducer:
    """The gradients' all-reduce for one `DistributedDataParallel` (see there)."""

    def __init__(self, ddp: DistributedDataParallel, params: list[Tensor], cap: int) -> None:
        self.ddp, self.group = ddp, ddp.process_group
        self.buckets: list[list[Tensor]] = []
        size = 0
        for p in params:
            full = size + p._value.nbytes > (FIRST_BUCKET_BYTES if not self.buckets[1:] else cap)
            if not self.buckets or full or self.buckets[-1][0].dtype != p.dtype:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p._value.nbytes
        self.bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.ready: list[set[int]] = [set() for _ in self.buckets]
        self.sent: list[tuple[Any, list[Tensor], np.ndarray]] = []
        self.traced: list[Tensor] = []  # parameters whose symbolic gradients have arrived
        self.next = 0  # the first bucket not sent yet
        self.waiting = False
        for p in params:
            p.register_post_accumulate_grad_hook(self.on_gradient)

    def __tracegrad_watch__(self) -> None:
        """A compiled step reads only `require_backward_grad_sync` (watched where it is read),
        not the buckets' bookkeeping."""

    def prepare_for_backward(self, outputs: Any = ()) -> None:
        """(PyTorch's reducer learns the used parameters here; this one, as gradients arrive.)"""

    def _rebuild_buckets(self) -> bool:
        return False

    def on_gradient(self, p: Tensor) -> None:
        ddp = self.ddp
        if p.grad.is_symbolic:  # a compiled step: the buckets' all-reduces are nodes of its plan
            # the module's own setting (a step may set it before each backward, as nanoGPT's
            # gradient accumulation does: then it is the step's, not a guard)
            watch_place(ddp, "require_backward_grad_sync",
                        "DistributedDataParallel.require_backward_grad_sync")  # fmt: skip
            if ddp.require_backward_grad_sync:
                if not self.traced:
                    queue_callback(self.finish_traced)
                self.traced.append(p)
            return
        if not ddp.require_backward_grad_sync:
            return
        if not self.waiting:
            self.waiting = True
            queue_callback(self.finish)
        i = self.bucket_of[id(p)]
        if i < self.next or id(p) in self.ready[i]:
            raise RuntimeError(
                f"DistributedDataParallel: the gradient of a parameter of shape {tuple(p.shape)} "
                "arrived twice in one backward (Expected to mark a variable ready only once: a "
                "reentrant backward or a parameter used by two backward passes)"
            )
        self.ready[i].add(id(p))
        # in order, as on every rank: bucket k leaves when it and every bucket before it are full
        while self.next < len(self.buckets) and len(self.ready[self.next]) == len(
            self.buckets[self.next]
        ):
            self.send(self.next)

    def finish_traced(self) -> None:
        """At the end of a traced backward: per bucket, one all-reduce of its gradients laid end
        to end (one message, and one wait for the other ranks, per bucket rather than per
        parameter), each parameter's mean a view of the result. A parameter without a gradient
        here is left out: if another rank has one, the messages' lengths differ and the step
        raises."""
        delivered, self.traced = {id(p) for p in self.traced}, []
        for bucket in self.buckets:
            params = [p for p in bucket if id(p) in delivered]
            if not params:
                continue
            flat = cat([p.grad.reshape(-1) for p in params])
            mean = P.allreduce(flat, op="mean", timeout=None)
            offset = 0
            for p in params:
                p.grad = mean[offset : offset + p.numel()].reshape(p.shape)
                offset += p.numel()

    def send(self, i: int) -> None:
        """All-reduce bucket `i`: its gradients (zeros where there is none) and, per parameter,
        1 if this rank has its gradient, so that every rank learns which were used anywhere."""
        bucket = self.buckets[i]
        flat = np.concatenate(
            [np.zeros(p.numel(), p._value.dtype) if p.grad is None else
             np.asarray(p.grad._value, p._value.dtype).reshape(-1) for p in bucket]
            + [np.array([p.grad is not None for p in bucket], bucket[0]._value.dtype)]
        )  # fmt: skip
        group = self.group
        self.sent.append((group.submit("all_reduce", lambda n: group.all_reduce(flat, "sum", n)),
                          bucket, flat))  # fmt: skip
        self.next = i + 1

    def finish(self) -> None:
        """At the end of backward: send what is left, wait, and give every parameter the mean."""
        self.waiting = False
        while self.next < len(self.buckets):
            self.send(self.next)
        sent, self.sent, self.next = self.sent, [], 0
        self.ready = [set() for _ in self.buckets]
        for work, bucket, flat in sent:
            work.wait()
            used = flat[flat.size - len(bucket) :]
            offset = 0
            for p, n in zip(bucket, used, strict=True):
                if n:
                    mean = (flat[offset : offset + p.numel()] / self.group.size).reshape(p.shape)
                    mean = Tensor._of(mean.astype(p._value.dtype, copy=False))
                    if p.grad is None:
                        p.grad = mean
                    else:
                        p.grad._assign(mean)
                offset += p.numel()


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)


distributed = file_module(f"{__name__}.distributed", "`torch.nn.parallel.distributed`",
                          {"DistributedDataParallel": DistributedDataParallel})  # fmt: skip
scatter_gather = file_module(f"{__name__}.scatter_gather", "`torch.nn.parallel.scatter_gather`",
                             {"scatter": scatter, "gather": gather,
                              "scatter_kwargs": scatter_kwargs})  # fmt: skip

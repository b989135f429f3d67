"""`torch.distributed.nn` (and `.functional`): the collectives as differentiable functions over
the process group (SimCLR-style losses gather every rank's embeddings; Lightning's `all_gather`
calls them). Each returns new tensors; backward runs the adjoint collective: an all-reduce's
gradient is the all-reduce of the gradients, an all-gather's is this rank's block of their
sum, a broadcast's is their sum at the source."""

from __future__ import annotations

from typing import Any

from tracegrad.frontend.function import Function
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch import distributed as dist
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided


class _AllReduce(Function):
    @staticmethod
    def forward(ctx: Any, op: Any, group: Any, tensor: Tensor) -> Tensor:
        ctx.group = group
        out = tensor.clone()
        dist.all_reduce(out, op, group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        return None, None, _AllReduce.apply(dist.ReduceOp.SUM, ctx.group, grad)


class _AllGather(Function):
    @staticmethod
    def forward(ctx: Any, group: Any, tensor: Tensor) -> tuple:
        ctx.group = group
        out = [tensor.new_zeros(tensor.shape) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, tensor.contiguous(), group)
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple:
        from tracegrad.frontend.functions import stack

        total = _AllReduce.apply(dist.ReduceOp.SUM, ctx.group, stack(list(grads)))
        return None, total[dist.get_rank(ctx.group)]


class _Broadcast(Function):
    @staticmethod
    def forward(ctx: Any, src: int, group: Any, tensor: Tensor) -> Tensor:
        ctx.src, ctx.group = src, group
        out = tensor.clone()
        dist.broadcast(out, src, group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        total = _AllReduce.apply(dist.ReduceOp.SUM, ctx.group, grad)
        mine = total if dist.get_rank(ctx.group) == ctx.src else total * 0
        return None, None, mine


def all_reduce(tensor: Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None) -> Tensor:
    """Differentiable sum over ranks (only SUM, as PyTorch's backward supports)."""
    if str(op).lower().rsplit(".", 1)[-1] != "sum":
        raise RuntimeError(f"torch.distributed.nn.all_reduce: only ReduceOp.SUM has a gradient, "
                           f"not {op}")  # fmt: skip
    return _AllReduce.apply(op, group, tensor)


def all_gather(tensor: Tensor, group: Any = None) -> tuple[Tensor, ...]:
    """Every rank's `tensor`, in rank order, differentiable."""
    return _AllGather.apply(group, tensor)


def broadcast(tensor: Tensor, src: int, group: Any = None) -> Tensor:
    return _Broadcast.apply(src, group, tensor)


def reduce(tensor: Tensor, dst: int, op: Any = dist.ReduceOp.SUM, group: Any = None) -> Tensor:
    """The sum at every rank (`dst`'s is the one PyTorch promises), differentiable."""
    return all_reduce(tensor, op, group)


functional = file_module(f"{__name__}.functional", "`torch.distributed.nn.functional`", {
    "all_reduce": all_reduce, "all_gather": all_gather, "broadcast": broadcast, "reduce": reduce,
})  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""PyTorch's `torch.optim.swa_utils`: weight averaging. `AveragedModel` keeps a copy of a model
whose parameters (and, with `use_buffers`, buffers) are a running average of the model's: equal
weights (SWA) by default, or an exponential moving average (EMA, `get_ema_multi_avg_fn`);
`SWALR` anneals the lr to a constant for SWA; `update_bn` recomputes batch-norm statistics for
averaged weights.

`update_parameters` also runs inside a traced step (the EMA of the weights updated after every
optimizer step): the averages are written in place under `no_grad`, which the tracer sees as
state writes, and `n_averaged` is a state tensor. Its first call copies the model instead of
averaging: eagerly a Python choice, as PyTorch's; in a traced plan, which must serve every
call, a `where` on `n_averaged == 0`.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tracegrad import nn
from tracegrad.core.primitives import cos, maximum, minimum, where
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.tensor import Listeners, Tensor, get_default_dtype
from tracegrad.optim.lr_scheduler import LRScheduler

__all__ = ["SWALR", "AveragedModel", "get_ema_avg_fn", "get_ema_multi_avg_fn",
           "get_swa_avg_fn", "get_swa_multi_avg_fn", "update_bn"]  # fmt: skip

AvgFn = Callable[[Tensor, Tensor, Any], Tensor]
MultiAvgFn = Callable[[list[Tensor], list[Tensor], Any], None]


def lerp_(target: Tensor, end: Tensor, weight: Any) -> None:
    """target += weight (end - target) in place, as PyTorch's lerp computes it (from `end`'s
    side when weight >= 0.5), so that averages match it to the last bit."""
    near = target + weight * (end - target)
    far = end - (end - target) * (1.0 - weight)
    if isinstance(weight, Tensor):
        target._assign(where(weight < 0.5, near, far))
    else:
        target._assign(near if weight < 0.5 else far)


def _check_decay(decay: float) -> None:
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] "
                         "range.")  # fmt: skip


def get_ema_multi_avg_fn(decay: float = 0.999) -> MultiAvgFn:
    """The EMA update of lists of averages in place: ema = decay ema + (1 - decay) model."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_params: list[Tensor], current: list[Tensor], _: Any) -> None:
        for p_ema, p_model in zip(ema_params, current, strict=True):
            if p_ema.dtype.kind == "f":
                lerp_(p_ema, p_model, 1.0 - decay)
            else:  # integer buffers, as PyTorch's: the average truncated
                p_ema._assign(p_ema * decay + p_model * (1.0 - decay))

    return ema_update


def get_swa_multi_avg_fn() -> MultiAvgFn:
    """The equal-weight (SWA) update of lists of averages in place, from the count so far."""

    @no_grad()
    def swa_update(averaged: list[Tensor], current: list[Tensor], num_averaged: Any) -> None:
        for p_avg, p_model in zip(averaged, current, strict=True):
            if p_avg.dtype.kind == "f":
                lerp_(p_avg, p_model, _weight(num_averaged, p_avg.dtype))
            else:
                p_avg._assign(p_avg + (p_model - p_avg) / (num_averaged + 1))

    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> AvgFn:
    """The EMA of one parameter: decay ema + (1 - decay) model (returned, not written)."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param: Tensor, current: Tensor, num_averaged: Any) -> Tensor:
        return decay * ema_param + (1 - decay) * current

    return ema_update


def get_swa_avg_fn() -> AvgFn:
    """The equal-weight average of one parameter: avg + (model - avg) / (n + 1)."""

    @no_grad()
    def swa_update(averaged: Tensor, current: Tensor, num_averaged: Any) -> Tensor:
        return averaged + (current - averaged) / (num_averaged + 1)

    return swa_update


def _weight(num_averaged: Any, dtype: Any) -> Any:
    """1 / (n + 1) as PyTorch computes it from the int64 count: in the default dtype (float32
    unless set to float64), then the parameter's."""
    if not isinstance(num_averaged, Tensor):
        return 1.0 / (num_averaged + 1)
    return (1.0 / (num_averaged + 1)).astype(get_default_dtype()).astype(dtype)


class AveragedModel(nn.Module):
    """A deep copy of `model` (as `self.module`) whose parameters `update_parameters(model)`
    averages with the model's: `avg_fn(avg, current, n_averaged)` per parameter or
    `multi_avg_fn(avgs, currents, n_averaged)` over the parameters of one dtype, in place; by
    default equal weights (SWA). The first update copies. Buffers are averaged too with
    `use_buffers`, else copied. `n_averaged` (int64) counts the updates; `state_dict()` keys
    are PyTorch's: "n_averaged", "module.<name>"."""

    def __init__(
        self,
        model: nn.Module,
        device: Any = None,
        avg_fn: AvgFn | None = None,
        multi_avg_fn: MultiAvgFn | None = None,
        use_buffers: bool = False,
    ):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        if Listeners.tracers:
            raise RuntimeError("AveragedModel: make it before the traced step (it copies the "
                               "model, whose averages the step then updates)")  # fmt: skip
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", Tensor._of(np.array(0, np.int64)))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @no_grad()
    def update_parameters(self, model: nn.Module) -> None:
        """Average `model`'s parameters (and buffers, with `use_buffers`) into this copy's."""

        def tensors(m: nn.Module) -> Iterable[Tensor]:
            return itertools.chain(m.parameters(), m.buffers()) if self.use_buffers else (
                m.parameters())  # fmt: skip

        pairs = [(a, b.detach()) for a, b in zip(tensors(self.module), tensors(model),
                                                 strict=False)]  # fmt: skip
        n = self.n_averaged
        if Listeners.tracers:  # one plan serves the first call and the later ones
            first = n == 0
            self._average(pairs, n)
            for avg, current in pairs:
                avg._assign(where(first, current, avg))
        elif n.item() == 0:
            for avg, current in pairs:
                avg._assign(current)
        else:
            self._average(pairs, n)
        if not self.use_buffers:
            for ours_b, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
                ours_b._assign(theirs.detach())
        n._assign(n + 1)

    def _average(self, pairs: list[tuple[Tensor, Tensor]], n: Tensor) -> None:
        if self.multi_avg_fn is not None or self.avg_fn is None:
            multi = self.multi_avg_fn or _swa_on_the_cpu
            by_dtype: dict[Any, list[tuple[Tensor, Tensor]]] = {}
            for avg, current in pairs:
                by_dtype.setdefault((avg.dtype, current.dtype), []).append((avg, current))
            for group in by_dtype.values():
                multi([a.detach() for a, _ in group], [c for _, c in group], n)
        else:
            for avg, current in pairs:
                avg._assign(self.avg_fn(avg.detach(), current, n))


def _swa_on_the_cpu(averaged: list[Tensor], current: list[Tensor], n: Tensor) -> None:
    """PyTorch's default average on the CPU (which has no foreach kernels): `get_swa_avg_fn`
    for each parameter."""
    swa = get_swa_avg_fn()
    for avg, model in zip(averaged, current, strict=True):
        avg._assign(swa(avg, model, n))


def _batch_norms() -> tuple[type, ...]:
    """The batch-norm layers whose statistics `update_bn` recomputes (PyTorch's
    `_BatchNorm` subclasses; instance norm is not one)."""
    return tuple(c for name, c in vars(nn).items() if "BatchNorm" in name and
                 isinstance(c, type) and issubclass(c, nn.Module))  # fmt: skip


@no_grad()
def update_bn(loader: Iterable[Any], model: nn.Module, device: Any = None) -> None:
    """Recompute the running statistics of `model`'s batch norms with one pass over `loader`
    (each item a tensor, or a list or tuple whose first item the model takes): reset, then a
    cumulative average (momentum None) in training mode; momenta and mode are put back."""
    if Listeners.tracers:
        raise RuntimeError("update_bn: call it outside a traced step (it loops over a loader)")
    momenta = {}
    for module in model.modules():
        if isinstance(module, _batch_norms()) and module.running_mean is not None:
            module.running_mean._assign(Tensor._of(np.zeros_like(module.running_mean.numpy())))
            module.running_var._assign(Tensor._of(np.ones_like(module.running_var.numpy())))
            count = module.num_batches_tracked
            count._assign(Tensor._of(np.zeros_like(count.numpy())))
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    for batch in loader:
        if isinstance(batch, list | tuple):
            batch = batch[0]
        if device is not None:
            batch = batch.to(device)
        model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's lr from its value when the scheduler first steps to `swa_lr` over
    `anneal_epochs` steps ("cos" or "linear"), then keeps it there. As PyTorch's, it works from
    the group's current lr (another scheduler may have set it), recovering the starting lr from
    it at each step; inside a traced step it reads and writes the lr tensor."""

    chain = "current"

    def __init__(self, optimizer: Any, swa_lr: float | Sequence[float], anneal_epochs: int = 10,
                 anneal_strategy: str = "cos", last_epoch: int = -1):  # fmt: skip
        groups = optimizer.param_groups
        swa_lrs = list(swa_lr) if isinstance(swa_lr, list | tuple) else [swa_lr] * len(groups)
        if len(swa_lrs) != len(groups):
            raise ValueError(f"SWALR: {len(swa_lrs)} swa_lr values for {len(groups)} groups")
        for lr, group in zip(swa_lrs, groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")  # fmt: skip
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs, self.anneal_strategy = anneal_epochs, anneal_strategy
        super().__init__(optimizer, last_epoch)

    def _anneal(self, t: Any, cos: Callable) -> Any:
        return t if self.anneal_strategy == "linear" else (1 - cos(math.pi * t)) / 2

    def _lr(self, epoch: Any, lr: Any, swa_lr: float, tensor: bool) -> Any:
        """The next lr from the current one, PyTorch's way: undo the last step's mix, mix anew."""
        step = maximum(epoch, 1.0) if self.anneal_epochs == 0 and tensor else (
            max(1, epoch) if self.anneal_epochs == 0 else epoch)  # fmt: skip
        span = max(1, self.anneal_epochs)
        if tensor:
            prev_alpha = self._anneal(minimum(maximum((step - 1) / span, 0.0), 1.0), cos)
            alpha = self._anneal(minimum(maximum(step / span, 0.0), 1.0), cos)
            safe = where(prev_alpha == 1, 0.0, prev_alpha)
            start = where(prev_alpha == 1, swa_lr, (lr - safe * swa_lr) / (1 - safe))
        else:
            prev_alpha = self._anneal(max(0, min(1, (step - 1) / span)), math.cos)
            alpha = self._anneal(max(0, min(1, step / span)), math.cos)
            start = swa_lr if prev_alpha == 1 else (lr - prev_alpha * swa_lr) / (1 - prev_alpha)
        return swa_lr * alpha + start * (1 - alpha)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        group = self.optimizer.param_groups[index]
        return self._lr(epoch, group["lr"], group["swa_lr"], tensor=False)

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        group = self.optimizer.param_groups[index]
        return self._lr(epoch, group.held["lr"][0], group["swa_lr"], tensor=True)

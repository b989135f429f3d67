"""PyTorch's learning-rate schedulers. Each sets `group["lr"]` of its optimizer's param groups,
which writes the group's 0-d lr tensors: a traced step reads them as state, so stepping a
scheduler never traces the step again. The schedules are computed in closed form from the step
count (PyTorch's chainable forms give the same values when nothing else changes the lr)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR",
           "MultiStepLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR", "StepLR"]  # fmt: skip


class LRScheduler:
    """Base: `lr_at(epoch, base_lr)` is the schedule; `step()` advances it by one."""

    def __init__(self, optimizer: Any, last_epoch: int = -1):
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError("param group has no 'initial_lr': resume with last_epoch=-1")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self._last_lr = [
            self.lr_at(self.last_epoch, base, i) for i, base in enumerate(self.base_lrs)
        ]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr, strict=True):
            group["lr"] = lr

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class LambdaLR(LRScheduler):
    """base_lr * lr_lambda(epoch), one function or one per group."""

    def __init__(self, optimizer: Any, lr_lambda: Callable | Sequence[Callable], last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = (
            list(lr_lambda) if isinstance(lr_lambda, list | tuple) else [lr_lambda] * n
        )
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return base_lr * self.lr_lambdas[index](epoch)


class StepLR(LRScheduler):
    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer: Any, milestones: Sequence[int], gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return base_lr * self.gamma**epoch


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        cos = 1.0 + math.cos(math.pi * epoch / self.T_max)
        return self.eta_min + (base_lr - self.eta_min) * cos / 2.0


class LinearLR(LRScheduler):
    """The factor goes linearly from start_factor to end_factor over total_iters steps."""

    def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):  # fmt: skip
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: factors must lie in (0, 1] and [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        done = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class OneCycleLR(LRScheduler):
    """Warm up from max_lr / div_factor to max_lr, then anneal to that / final_div_factor; with
    `cycle_momentum` (the default, as in PyTorch), momentum (or Adam's beta1) goes the other
    way, from max_momentum down to base_momentum and back. Both are state of a traced step:
    stepping the scheduler traces nothing again."""

    def __init__(
        self,
        optimizer: Any,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.85,
        max_momentum: float | Sequence[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy {anneal_strategy!r}")
        groups = optimizer.param_groups
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        self.max_lrs, self.final_div_factor = _per_group(max_lr, groups), final_div_factor
        up = float(pct_start * total_steps) - 1
        self.phases = (  # (last step, lr from, lr to, momentum from, momentum to)
            [
                (up, "initial", "max", "max_momentum", "base_momentum"),
                (2 * up, "max", "initial", "base_momentum", "max_momentum"),
                (total_steps - 1, "initial", "min", "max_momentum", "max_momentum"),
            ]
            if three_phase
            else [
                (up, "initial", "max", "max_momentum", "base_momentum"),
                (total_steps - 1, "max", "min", "base_momentum", "max_momentum"),
            ]
        )
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    f"OneCycleLR: {type(optimizer).__name__} has neither momentum nor betas to "
                    "cycle; pass cycle_momentum=False"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                tops, bottoms = _per_group(max_momentum, groups), _per_group(base_momentum, groups)
                for group, top, bottom in zip(groups, tops, bottoms, strict=True):
                    group["max_momentum"], group["base_momentum"] = top, bottom
                    self._set_momentum(group, top)
                if not self.use_beta1:  # an SGD made with momentum 0 has no buffers yet
                    optimizer._add_missing_state()
        if last_epoch == -1:
            for group, top in zip(groups, self.max_lrs, strict=True):
                group["initial_lr"] = top / div_factor
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: Any, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, epoch: int, levels: dict[str, float], of_lr: bool) -> float:
        """The schedule at `epoch` between `levels` named by the phases (the lr's or the
        momentum's)."""
        if epoch > self.total_steps:  # stepped once after each of total_steps steps is fine
            raise ValueError(
                f"OneCycleLR: stepped {epoch} times, more than total_steps={self.total_steps}"
            )
        start = 0.0
        for i, (end, lr_a, lr_b, m_a, m_b) in enumerate(self.phases):
            if epoch <= end or i == len(self.phases) - 1:
                pct = (epoch - start) / (end - start)
                lo, hi = (levels[lr_a], levels[lr_b]) if of_lr else (levels[m_a], levels[m_b])
                if self.anneal_strategy == "linear":
                    return (hi - lo) * pct + lo
                return hi + (lo - hi) / 2.0 * (math.cos(math.pi * pct) + 1)
            start = end
        raise AssertionError("unreachable")

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        levels = {"initial": base_lr, "max": self.max_lrs[index],
                  "min": base_lr / self.final_div_factor}  # fmt: skip
        return self._anneal(epoch, levels, of_lr=True)

    def step(self, epoch: int | None = None) -> None:
        super().step(epoch)
        if self.cycle_momentum:
            for group in self.optimizer.param_groups:
                self._set_momentum(group, self._anneal(self.last_epoch, group, of_lr=False))


def _per_group(value: float | Sequence[float], groups: Sequence[Any]) -> list[float]:
    return list(value) if isinstance(value, list | tuple) else [value] * len(groups)


class SequentialLR(LRScheduler):
    """Runs `schedulers` one after another, switching at the `milestones` (each restarts at 0)."""

    def __init__(self, optimizer: Any, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1):  # fmt: skip
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("SequentialLR: needs one milestone fewer than schedulers")
        self.optimizer, self._schedulers, self._milestones = optimizer, list(schedulers), milestones
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._schedulers[0].step(0)
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ReduceLROnPlateau:
    """Multiply the lr by `factor` once the metric has not improved for `patience` steps.
    `step(metric)` reads the metric's value: call it outside a traced function."""

    def __init__(self, optimizer: Any, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | Sequence[float] = 0.0, eps: float = 1e-8):  # fmt: skip
        if factor >= 1.0 or mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError("ReduceLROnPlateau: factor < 1, mode 'min'/'max', 'rel'/'abs'")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = (
            threshold,
            threshold_mode,
            cooldown,
            eps,
        )
        n = len(optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, list | tuple) else [min_lr] * n
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _better(self, a: float) -> bool:
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (self.best * (1.0 - self.threshold) if rel else self.best - self.threshold)
        return a > (self.best * (1.0 + self.threshold) if rel else self.best + self.threshold)

    def step(self, metrics: Any) -> None:
        current = float(metrics)
        self.last_epoch += 1
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs, strict=True):
                new = max(group["lr"] * self.factor, floor)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

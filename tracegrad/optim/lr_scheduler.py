"""PyTorch's learning-rate schedulers. Each sets `group["lr"]` of its optimizer's param groups,
which writes the group's 0-d lr tensors: a traced step reads them as state, so stepping a
scheduler never traces the step again. The schedules are computed in closed form from the step
count (PyTorch's chainable forms give the same values when nothing else changes the lr).

`step()` inside a traced step advances at every call: the step count is a 0-d float64 tensor
(state of the step), and the schedule is computed from it with tensor ops into the groups' lr
(and momentum) tensors; after each call the Python mirrors (`last_epoch`, `group["lr"]`,
`get_last_lr()`) are brought up to date. `LambdaLR` calls its lambda on that tensor: a lambda
that needs a Python number (`min`, `if`, `math.*`) refuses, as do `SequentialLR` and
`ReduceLROnPlateau`, whose choices are Python control flow: step those outside the traced step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core.primitives import cos, minimum, where
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import check_range
from tracegrad.frontend.tensor import Listeners, Tensor, TraceError
from tracegrad.frontend.tracer import after_call, guard

__all__ = ["CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR",
           "MultiStepLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR", "StepLR"]  # fmt: skip


def _tracing() -> bool:
    return bool(Listeners.tracers)


def _refuse(what: str, why: str) -> TraceError:
    return TraceError(
        f"{what} inside a traced step: {why}, so it cannot advance at every call of the plan; "
        "call it outside the traced step (after each call), as a training loop usually does"
    )


class LRScheduler:
    """Base: `lr_at(epoch, base_lr)` is the schedule; `step()` advances it by one. Inside a
    traced step, `lr_tensor` computes the schedule from the step count as a 0-d float64 tensor
    (by default `lr_at` itself, which works where it uses only arithmetic)."""

    def __init__(self, optimizer: Any, last_epoch: int = -1):
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError("param group has no 'initial_lr': resume with last_epoch=-1")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self._epoch = Tensor(np.array(float(last_epoch)))  # what a traced step reads
        self.last_epoch = last_epoch
        self.step()

    @property
    def last_epoch(self) -> int:
        return self._last_epoch

    @last_epoch.setter
    def last_epoch(self, value: int) -> None:
        self._last_epoch = int(value)
        with no_grad():
            self._epoch._assign(Tensor(np.array(float(value))))

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        raise NotImplementedError

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        return self.lr_at(epoch, base_lr, index)

    def step(self, epoch: int | None = None) -> None:
        if _tracing():
            self._traced_step(epoch)
            return
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self._last_lr = [
            self.lr_at(self.last_epoch, base, i) for i, base in enumerate(self.base_lrs)
        ]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr, strict=True):
            group["lr"] = lr

    def _traced_step(self, epoch: int | None) -> None:
        """Advance the step count tensor and write the schedule's values into the groups'
        tensors; Python's copies follow after each call (`_sync`)."""
        baked = self._settings()
        guard(lambda: self._settings() == baked)  # the schedule's constants are baked in
        with no_grad():
            self._epoch._assign(self._epoch + 1.0 if epoch is None else Tensor(float(epoch)))
            for i, (group, base) in enumerate(zip(self.optimizer.param_groups, self.base_lrs,
                                                  strict=True)):  # fmt: skip
                lr = self._computed(self.lr_tensor, self._epoch, base, i)
                group.held["lr"][0]._assign(_as_float64(lr))
        after_call(("lr scheduler", id(self)), self._sync)

    def _computed(self, rule: Callable, epoch: Tensor, base: float, index: int) -> Any:
        try:
            return rule(epoch, base, index)
        except (TraceError, TypeError) as e:
            raise _refuse(f"{type(self).__name__}.step()", f"its schedule needs a Python "
                          f"number ({e})") from e  # fmt: skip

    def _settings(self) -> list:
        """The schedule's constants (base lrs, gamma, T_max, ...) a traced step bakes in."""
        numbers = int | float | str | tuple | list
        return [(k, v) for k, v in self.__dict__.items()
                if isinstance(v, numbers) and k not in _MIRRORS]  # fmt: skip

    def _sync(self) -> None:
        """After a traced call: the Python copies of what the plan wrote."""
        self._last_epoch = int(self._epoch.item())
        for group in self.optimizer.param_groups:
            for key, tensors in group.held.items():
                if key in group:
                    numbers = [float(t.item()) for t in tensors]
                    dict.__setitem__(group, key, tuple(numbers) if len(numbers) > 1
                                     or isinstance(group[key], tuple) else numbers[0])  # fmt: skip
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("optimizer", "_epoch") and not callable(v)}  # fmt: skip
        state["last_epoch"] = state.pop("_last_epoch")
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        epoch = state.pop("last_epoch", state.pop("_last_epoch", None))
        self.__dict__.update(state)
        if epoch is not None:
            self.last_epoch = epoch


_MIRRORS = frozenset({"_last_epoch", "_last_lr"})


def _as_float64(x: Any) -> Tensor:
    x = x if isinstance(x, Tensor) else Tensor(np.array(float(x)))
    return x if x.dtype == np.float64 else x.astype(np.float64)


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

    def _computed(self, rule: Callable, epoch: Tensor, base: float, index: int) -> Any:
        try:
            return rule(epoch, base, index)
        except (TraceError, TypeError) as e:
            raise _refuse("LambdaLR.step()", "its lr_lambda was called on the step count as a "
                          "0-d tensor and needs a Python number there (write it with tensor "
                          f"ops, e.g. tracegrad.minimum for min, or step the scheduler "
                          f"outside the traced step) ({e})") from e  # fmt: skip


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

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        passed = sum(((epoch >= m).astype(np.float64) for m in self.milestones), Tensor(0.0))
        return base_lr * self.gamma**passed


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
        return self._cosine(epoch, base_lr, math.cos)

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        return self._cosine(epoch, base_lr, cos)

    def _cosine(self, epoch: Any, base_lr: float, cos: Callable) -> Any:
        return (
            self.eta_min
            + (base_lr - self.eta_min) * (1.0 + cos(math.pi * epoch / self.T_max)) / 2.0
        )


class LinearLR(LRScheduler):
    """The factor goes linearly from start_factor to end_factor over total_iters steps."""

    def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):  # fmt: skip
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: factors must lie in (0, 1] and [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return self._linear(min(epoch, self.total_iters), base_lr)

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        return self._linear(minimum(epoch, float(self.total_iters)), base_lr)

    def _linear(self, done: Any, base_lr: float) -> Any:
        done = done / self.total_iters
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
                return self._between(
                    epoch, start, end, levels, (lr_a, lr_b) if of_lr else (m_a, m_b), math.cos
                )
            start = end
        raise AssertionError("unreachable")

    def _anneal_tensor(self, epoch: Tensor, levels: dict[str, float], of_lr: bool) -> Tensor:
        """`_anneal` on the step count as a tensor: every phase's value, the right one chosen."""
        what = "OneCycleLR: the step count (stepped more than total_steps?)"
        epoch = check_range(epoch, 0, self.total_steps + 1, what)
        starts = [0.0] + [end for end, *_ in self.phases[:-1]]
        values = [
            self._between(epoch, start, end, levels, (lr_a, lr_b) if of_lr else (m_a, m_b), cos)
            for start, (end, lr_a, lr_b, m_a, m_b) in zip(starts, self.phases, strict=True)
        ]
        chosen = values[-1]
        for (end, *_), value in zip(self.phases[-2::-1], values[-2::-1], strict=True):
            chosen = where(epoch <= end, value, chosen)
        return chosen

    def _between(self, epoch: Any, start: float, end: float, levels: dict[str, float],
                 names: tuple[str, str], cos: Callable) -> Any:  # fmt: skip
        pct = (epoch - start) / (end - start)
        lo, hi = levels[names[0]], levels[names[1]]
        if self.anneal_strategy == "linear":
            return (hi - lo) * pct + lo
        return hi + (lo - hi) / 2.0 * (cos(math.pi * pct) + 1)

    def _levels(self, base_lr: float, index: int) -> dict[str, float]:
        return {"initial": base_lr, "max": self.max_lrs[index],
                "min": base_lr / self.final_div_factor}  # fmt: skip

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return self._anneal(epoch, self._levels(base_lr, index), of_lr=True)

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        return self._anneal_tensor(epoch, self._levels(base_lr, index), of_lr=True)

    def step(self, epoch: int | None = None) -> None:
        super().step(epoch)
        if not self.cycle_momentum:
            return
        for group in self.optimizer.param_groups:
            if not _tracing():
                self._set_momentum(group, self._anneal(self.last_epoch, group, of_lr=False))
                continue
            with no_grad():  # the groups' momentum (or beta1) tensors, at every call
                momentum = self._anneal_tensor(self._epoch, group, of_lr=False)
                held = group.held["betas" if self.use_beta1 else "momentum"][0]
                held._assign(_as_float64(momentum))


def _per_group(value: float | Sequence[float], groups: Sequence[Any]) -> list[float]:
    return list(value) if isinstance(value, list | tuple) else [value] * len(groups)


class SequentialLR(LRScheduler):
    """Runs `schedulers` one after another, switching at the `milestones` (each restarts at 0)."""

    def __init__(self, optimizer: Any, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1):  # fmt: skip
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("SequentialLR: needs one milestone fewer than schedulers")
        self.optimizer, self._schedulers, self._milestones = optimizer, list(schedulers), milestones
        self._epoch = Tensor(np.array(0.0))
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._schedulers[0].step(0)
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self, epoch: int | None = None) -> None:
        if _tracing():
            raise _refuse("SequentialLR.step()", "which scheduler runs is a Python choice")
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
        if _tracing():
            raise _refuse("ReduceLROnPlateau.step(metrics)", "it compares the metric's value in "
                          "Python")  # fmt: skip
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

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

`ChainedScheduler` composes schedules as PyTorch's chainable forms do: a closed-form schedule in
a chain scales the current lr by its own change from the last step (`chain_step`).
"""

from __future__ import annotations

import bisect
import math
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core.primitives import cos, floor, minimum, where
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import check_range
from tracegrad.frontend.tensor import Listeners, Tensor, TraceError
from tracegrad.frontend.tracer import after_call, guard

__all__ = ["ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
           "CyclicLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR",
           "MultiplicativeLR", "OneCycleLR", "PolynomialLR", "ReduceLROnPlateau", "SequentialLR",
           "StepLR", "_LRScheduler"]  # fmt: skip


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
        self._epoch = Tensor._of(np.array(float(last_epoch)))  # what a traced step reads
        self.last_epoch = last_epoch
        self.step()

    @property
    def last_epoch(self) -> int:
        return self._last_epoch

    @last_epoch.setter
    def last_epoch(self, value: int) -> None:
        self._last_epoch = int(value)
        with no_grad():
            self._epoch._assign(Tensor._of(np.array(float(value))))

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        """The learning rates at `last_epoch`: PyTorch's hook, which schedulers written as
        subclasses (of `LRScheduler` or the old `_LRScheduler`) override; the built-in ones give
        theirs by `lr_at`."""
        return [self.lr_at(self.last_epoch, base, i) for i, base in enumerate(self.base_lrs)]

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        return self.lr_at(epoch, base_lr, index)

    def step(self, epoch: int | None = None) -> None:
        if _tracing():
            self._traced_step(epoch)
            return
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        self._last_lr = [float(lr) for lr in self.get_lr()]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr, strict=True):
            group["lr"] = lr

    def _traced_step(self, epoch: int | None, chained: bool = False) -> None:
        """Advance the step count tensor and write the schedule's values into the groups'
        tensors (`chained`: the current values moved as the schedule moved, `chain_step`);
        Python's copies follow after each call (`_sync`)."""
        if type(self).get_lr is not LRScheduler.get_lr:
            raise _refuse(f"{type(self).__name__}.step()", "its get_lr() is Python code that "
                          "reads last_epoch as a number")  # fmt: skip
        baked = self._settings()
        guard(lambda: self._settings() == baked)  # the schedule's constants are baked in
        with no_grad():
            self._epoch._assign(self._epoch + 1.0 if epoch is None else Tensor._of(float(epoch)))
            for i, (group, base) in enumerate(zip(self.optimizer.param_groups, self.base_lrs,
                                                  strict=True)):  # fmt: skip
                held = group.held["lr"][0]
                lr = _as_float64(self._computed(self.lr_tensor, self._epoch, base, i))
                if chained:
                    before = self._computed(self.lr_tensor, self._epoch - 1.0, base, i)
                    lr = _scaled(held, lr, _as_float64(before), self.chain_floor(), Tensor)
                held._assign(lr)
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

    # how a ChainedScheduler steps it: "ratio", the current lr scaled by the schedule's change
    # (around `chain_floor`); "closed" (its value replaces the lr) and "current" (it reads the
    # current lr itself) by `step()`
    chain = "ratio"

    def chain_floor(self) -> float:
        return 0.0

    def chain_step(self) -> None:
        """Step as PyTorch's chainable form: a "ratio" schedule moves the group's current lr
        (which earlier schedulers in the chain set) from f by (lr_e - f) / (lr_{e-1} - f), f
        its floor (eta_min; 0), or by lr_e - lr_{e-1} where lr_{e-1} = f."""
        if self.chain != "ratio":
            self.step()
            return
        if _tracing():
            self._traced_step(None, chained=True)
            return
        self.last_epoch += 1
        for i, (group, base) in enumerate(zip(self.optimizer.param_groups, self.base_lrs,
                                              strict=True)):  # fmt: skip
            now = self.lr_at(self.last_epoch, base, i)
            before = self.lr_at(self.last_epoch - 1, base, i) if self.last_epoch > 0 else base
            group["lr"] = _scaled(group["lr"], now, before, self.chain_floor(), float)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

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


def _scaled(lr: Any, now: Any, before: Any, floor: float, kind: type) -> Any:
    """`lr` moved as a schedule moved from `before` to `now`, around `floor` (PyTorch's
    chainable forms: CosineAnnealingLR's is affine around eta_min, the others multiply)."""
    if kind is Tensor:
        flat = before == floor
        ratio = (now - floor) / where(flat, 1.0, before - floor)
        return where(flat, lr + (now - before), floor + (lr - floor) * ratio)
    if before == floor:
        return lr + (now - before)
    return floor + (lr - floor) * ((now - floor) / (before - floor))


def _as_float64(x: Any) -> Tensor:
    x = x if isinstance(x, Tensor) else Tensor._of(np.array(float(x)))
    return x if x.dtype == np.float64 else x.astype(np.float64)


_LRScheduler = LRScheduler  # PyTorch's name before 2.0, which custom schedulers still subclass


class LambdaLR(LRScheduler):
    """base_lr * lr_lambda(epoch), one function or one per group."""

    chain = "closed"

    def __init__(self, optimizer: Any, lr_lambda: Callable | Sequence[Callable], last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = (
            list(lr_lambda) if isinstance(lr_lambda, list | tuple) else [lr_lambda] * n
        )
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return base_lr * self.lr_lambdas[index](epoch)

    def state_dict(self) -> dict[str, Any]:
        """As PyTorch's: a schedule function is not saved (a lambda cannot be, and a loader
        need not run code), a callable object's attributes are (`__dict__`)."""
        state = {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}
        state["lr_lambdas"] = [
            None if isinstance(f, types.FunctionType) or not hasattr(f, "__dict__")
            else dict(vars(f)) for f in self.lr_lambdas
        ]  # fmt: skip
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        saved = state.pop("lr_lambdas", [])
        super().load_state_dict(state)
        for f, attributes in zip(self.lr_lambdas, saved, strict=False):
            if attributes is not None:
                vars(f).update(attributes)

    def _computed(self, rule: Callable, epoch: Tensor, base: float, index: int) -> Any:
        try:
            return rule(epoch, base, index)
        except (TraceError, TypeError) as e:
            raise _refuse(f"{type(self).__name__}.step()", "its lr_lambda was called on the step "
                          "count as a 0-d tensor and needs a Python number there (write it "
                          "with tensor ops, e.g. tracegrad.minimum for min, or step the "
                          f"scheduler outside the traced step) ({e})") from e  # fmt: skip


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
        passed = sum(((epoch >= m).astype(np.float64) for m in self.milestones), Tensor._of(0.0))
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

    def chain_floor(self) -> float:
        return self.eta_min

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

    chain = "closed"

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
        if self.cycle_momentum:
            groups = self.optimizer.param_groups
            self._cycle_momenta(
                lambda e, i: self._anneal(e, groups[i], of_lr=False),
                lambda e, i: self._anneal_tensor(e, groups[i], of_lr=False),
            )

    def _cycle_momenta(self, eager: Callable[[int, int], float],
                       traced: Callable[[Tensor, int], Tensor]) -> None:  # fmt: skip
        """Write each group's cycled momentum (or beta1), f(step count, group index): eagerly
        its value, inside a traced step into the group's tensor, at every call."""
        for i, group in enumerate(self.optimizer.param_groups):
            if not _tracing():
                self._set_momentum(group, eager(self.last_epoch, i))
                continue
            with no_grad():
                held = group.held["betas" if self.use_beta1 else "momentum"][0]
                held._assign(_as_float64(traced(self._epoch, i)))


def _per_group(value: float | Sequence[float], groups: Sequence[Any]) -> list[float]:
    return list(value) if isinstance(value, list | tuple) else [value] * len(groups)


class SequentialLR(LRScheduler):
    """Runs `schedulers` one after another, switching at the `milestones` (each restarts at 0)."""

    chain = "closed"

    def __init__(self, optimizer: Any, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1):  # fmt: skip
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("SequentialLR: needs one milestone fewer than schedulers")
        self.optimizer, self._schedulers, self._milestones = optimizer, list(schedulers), milestones
        self._epoch = Tensor._of(np.array(0.0))
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


class ConstantLR(LRScheduler):
    """base_lr * factor for the first total_iters steps, then base_lr."""

    def __init__(self, optimizer: Any, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):  # fmt: skip
        if not 0 <= factor <= 1.0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return base_lr * (self.factor if epoch < self.total_iters else 1.0)

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        return where(epoch < self.total_iters, base_lr * self.factor, base_lr)


class PolynomialLR(LRScheduler):
    """base_lr * (1 - min(epoch, total_iters) / total_iters) ** power: 0 from total_iters on."""

    def __init__(self, optimizer: Any, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1):  # fmt: skip
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return base_lr * (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        done = minimum(epoch, float(self.total_iters)) / self.total_iters
        return base_lr * (1.0 - done) ** self.power


class MultiplicativeLR(LambdaLR):
    """The current lr times lr_lambda(epoch) at each step (not at construction): PyTorch's
    chainable form, which works from the group's lr, so other schedulers' changes carry."""

    chain = "current"

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        lr = self.optimizer.param_groups[index]["lr"]
        return lr * self.lr_lambdas[index](epoch) if epoch > 0 else lr

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        lr = self.optimizer.param_groups[index].held["lr"][0]
        return where(epoch > 0, lr * self.lr_lambdas[index](epoch), lr)


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from base_lr to eta_min over T_i steps, restarting at base_lr, with
    T_0, T_0 T_mult, T_0 T_mult^2, ... `step(epoch)` takes a fractional epoch (per batch:
    `step(epoch + i / iters)`), as PyTorch's. T_cur and T_i are 0-d tensors, so that `step()`
    inside a traced step advances them at every call; `step(epoch)` there refuses (the epoch
    is a Python number the plan would bake in)."""

    chain = "closed"

    def __init__(self, optimizer: Any, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1):  # fmt: skip
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, float | int):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type "
                             f"{type(eta_min)}")  # fmt: skip
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        self._t_cur = Tensor._of(np.array(float(last_epoch)))
        self._t_i = Tensor._of(np.array(float(T_0)))
        super().__init__(optimizer, last_epoch)

    T_cur = property(lambda self: _number(self._t_cur), lambda self, v: _set(self._t_cur, v))
    T_i = property(lambda self: _number(self._t_i), lambda self, v: _set(self._t_i, v))

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        return self._cosine(base_lr, self.T_cur / self.T_i, math.cos)

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        return self._cosine(base_lr, self._t_cur / self._t_i, cos)

    def _cosine(self, base_lr: float, done: Any, cos: Callable) -> Any:
        return self.eta_min + (base_lr - self.eta_min) * (1 + cos(math.pi * done)) / 2

    def step(self, epoch: float | None = None) -> None:
        if _tracing():
            if epoch is not None:
                raise _refuse("CosineAnnealingWarmRestarts.step(epoch)", "the epoch is a Python "
                              "number, which the traced plan would bake in")  # fmt: skip
            with no_grad():  # T_cur + 1, wrapped to the next, T_mult times longer, cycle
                t_cur, t_i = self._t_cur + 1.0, self._t_i
                wrap = t_cur >= t_i
                self._t_cur._assign(where(wrap, t_cur - t_i, t_cur))
                self._t_i._assign(where(wrap, t_i * float(self.T_mult), t_i))
            self._traced_step(None)
            return
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur, self.T_i = self.T_cur % self.T_i, self.T_i * self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch >= self.T_0 and self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        elif epoch >= self.T_0:
            n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult**n
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        super().step(math.floor(epoch))

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        del state["_t_cur"], state["_t_i"]
        return {**state, "T_cur": self.T_cur, "T_i": self.T_i}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self.T_cur, self.T_i = state.pop("T_cur"), state.pop("T_i")
        super().load_state_dict(state)


def _number(t: Tensor) -> float | int:
    """A 0-d tensor's value as PyTorch's Python attribute holds it: an int when whole."""
    v = float(t.item())
    return int(v) if v.is_integer() else v


def _set(t: Tensor, value: float) -> None:
    with no_grad():
        t._assign(Tensor._of(np.array(float(value))))


class CyclicLR(LRScheduler):
    """The lr cycles between base_lr and max_lr (up in step_size_up steps, down in
    step_size_down), its amplitude scaled per cycle ("triangular": 1, "triangular2": halved
    each cycle) or per step ("exp_range": gamma^step), or by `scale_fn`; with `cycle_momentum`
    (the default, as PyTorch's) momentum (or Adam's beta1) goes the other way between
    max_momentum and base_momentum. Both are state of a traced step."""

    chain = "closed"

    def __init__(
        self,
        optimizer: Any,
        base_lr: float | Sequence[float],
        max_lr: float | Sequence[float],
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn: Callable[[Any], Any] | None = None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.8,
        max_momentum: float | Sequence[float] = 0.9,
        last_epoch: int = -1,
    ):
        groups = optimizer.param_groups
        base_lrs = _per_group(base_lr, groups)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, groups, strict=True):
                group["lr"] = lr
        self.max_lrs = _per_group(max_lr, groups)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma, self.scale_fn = mode, gamma, scale_fn
        self.scale_mode = (
            {"triangular": "cycle", "triangular2": "cycle", "exp_range": "iterations"}[mode]
            if scale_fn is None
            else scale_mode
        )
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                                 "option enabled")  # fmt: skip
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = _per_group(base_momentum, groups)
            self.max_momentums = _per_group(max_momentum, groups)
            if last_epoch == -1:
                for top, bottom, group in zip(self.max_momentums, self.base_momentums, groups,
                                              strict=True):  # fmt: skip
                    self._set_momentum(group, top)
                    group["max_momentum"], group["base_momentum"] = top, bottom
                if not self.use_beta1:  # an SGD made with momentum 0 has no buffers yet
                    optimizer._add_missing_state()
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    _set_momentum, _cycle_momenta = OneCycleLR._set_momentum, OneCycleLR._cycle_momenta

    def _scale(self, epoch: Any, floor: Callable) -> tuple[Any, Any]:
        """(the height in the cycle, 0 to 1, and the amplitude's scale) at `epoch`."""
        cycle = floor(1 + epoch / self.total_size)
        x = 1.0 + epoch / self.total_size - cycle
        if floor is math.floor:
            height = x / self.step_ratio if x <= self.step_ratio else (
                (x - 1) / (self.step_ratio - 1))  # fmt: skip
        else:
            height = where(x <= self.step_ratio, x / self.step_ratio,
                           (x - 1) / (self.step_ratio - 1))  # fmt: skip
        at = cycle if self.scale_mode == "cycle" else epoch
        if self.scale_fn is not None:
            return height, self.scale_fn(at)
        if self.mode == "triangular":
            return height, 1.0
        if self.mode == "triangular2":
            return height, 1 / (2.0 ** (at - 1))
        return height, self.gamma**at

    def lr_at(self, epoch: int, base_lr: float, index: int) -> float:
        height, scale = self._scale(epoch, math.floor)
        return base_lr + (self.max_lrs[index] - base_lr) * height * scale

    def lr_tensor(self, epoch: Tensor, base_lr: float, index: int) -> Tensor:
        height, scale = self._scale(epoch, floor)
        return base_lr + (self.max_lrs[index] - base_lr) * height * scale

    def _momentum(self, epoch: Any, index: int, floor: Callable) -> Any:
        height, scale = self._scale(epoch, floor)
        top, bottom = self.max_momentums[index], self.base_momentums[index]
        return top - (top - bottom) * height * scale

    def step(self, epoch: int | None = None) -> None:
        super().step(epoch)
        if self.cycle_momentum:  # traced, a scale_fn that needs a Python number refuses
            self._cycle_momenta(
                lambda e, i: self._momentum(e, i, math.floor),
                lambda e, i: self._computed(self._momentum_tensor, e, 0.0, i),
            )

    def _momentum_tensor(self, epoch: Tensor, base: float, index: int) -> Tensor:
        return self._momentum(epoch, index, floor)


class ChainedScheduler(LRScheduler):
    """Steps `schedulers` (of one optimizer) one after another at each `step()`, each from the
    lr the one before it set: PyTorch's chaining, e.g. ConstantLR warm-up times ExponentialLR
    decay. A closed-form schedule in the chain scales the current lr by its own change
    (`LRScheduler.chain_step`), as PyTorch's chainable forms do."""

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Any = None):
        if len(schedulers) < 1:
            raise ValueError("ChainedScheduler expects at least one scheduler to be chained, but "
                             "got no scheduler.")  # fmt: skip
        optimizer = optimizer or schedulers[0].optimizer
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError("ChainedScheduler does not support `ReduceLROnPlateau` (at "
                                 f"index {i}): its step needs the metric")  # fmt: skip
            if s.optimizer is not optimizer:
                raise ValueError("ChainedScheduler expects all schedulers to belong to the same "
                                 f"optimizer, but got {type(s).__name__} at index {i} with "
                                 "another")  # fmt: skip
        self._schedulers, self.optimizer = list(schedulers), optimizer
        self._epoch = Tensor._of(np.array(0.0))
        # each made its initial step from the constructor's lr, PyTorch's chainable ones
        # from the lr the one before left: the product, as PyTorch's
        for i, group in enumerate(optimizer.param_groups):
            lr = schedulers[0].base_lrs[i]
            for s in schedulers:
                base = s.base_lrs[i]
                if s.chain == "ratio":
                    now = s.lr_at(s.last_epoch, base, i)
                    lr = _scaled(lr, now, base, s.chain_floor(), float)
                elif s.chain == "closed":
                    lr = s.get_last_lr()[i]
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self) -> None:  # type: ignore[override]
        for s in self._schedulers:
            s.chain_step()
        if _tracing():
            after_call(("lr scheduler", id(self)), self._sync_chain)
        else:
            self._sync_chain()

    def _sync_chain(self) -> None:
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"_last_lr": list(self._last_lr),
                "_schedulers": [s.state_dict() for s in self._schedulers]}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for s, saved in zip(self._schedulers, state["_schedulers"], strict=True):
            s.load_state_dict(saved)
        self._last_lr = list(state["_last_lr"])

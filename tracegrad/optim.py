"""Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW.

Written so that `@tracegrad.trace` can capture a whole training step:
- all state (momentum buffers, Adam's moments, the step count) is created as tensors in the
  constructor, never lazily, so the tracer finds it before the first traced call;
- nothing that changes from step to step lives in Python: bias correction reads the step tensor;
- updates happen in place (`p -= ...`, `buf._assign(...)`) under `no_grad`, which the tracer sees
  as state writes;
- the learning rate is also held as a 0-d tensor per parameter dtype, which a traced step reads
  as state: a schedule that sets `opt.lr` between steps needs no new trace. The other
  hyperparameters are baked into a traced step, with a guard: changing one traces it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .autodiff import no_grad
from .primitives import sqrt
from .tensor import Tensor, phase
from .tracer import guard


class Optimizer:
    """Holds the parameters, one dict of state tensors per parameter, and the hyperparameters
    named in `hyperparameters`."""

    hyperparameters: tuple[str, ...] = ("lr",)

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params = _unique(params)
        self._lr_tensors = {p.dtype: Tensor(np.zeros((), p.dtype)) for p in self.params}
        self.lr = lr
        self.state = [self._init_state(p) for p in self.params]

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        if not value >= 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {value}")
        self._lr = value
        for t in self._lr_tensors.values():
            t._assign(Tensor(np.array(value, t.dtype)))

    def lr_for(self, p: Tensor) -> Tensor:
        """The learning rate as a 0-d tensor of `p`'s dtype: what update rules multiply by."""
        return self._lr_tensors[p.dtype]

    def _init_state(self, p: Tensor) -> dict[str, Tensor]:
        return {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> None:
        raise NotImplementedError

    @no_grad()
    def step(self) -> None:
        """Update every parameter that has a gradient, in place."""
        baked = self._baked()
        guard(lambda: self._baked() == baked)  # a traced step is valid while these hold
        with phase("update"):
            for p, state in zip(self.params, self.state, strict=True):
                if p.grad is not None:
                    self._update(p, p.grad, state)

    def zero_grad(self) -> None:
        """Drop the gradients (`grad = None`, PyTorch's default `set_to_none=True`)."""
        for p in self.params:
            p.grad = None

    clear_grad = zero_grad  # MegEngine's name

    def _baked(self) -> tuple:
        """The hyperparameters the update rules read as Python values (all but `lr`)."""
        return tuple(getattr(self, k) for k in self.hyperparameters if k != "lr")

    def state_dict(self) -> dict[str, Any]:
        """{"state": {"0": {"step": ..., ...}, ...}, "hyperparameters": {"lr": ..., ...}}, with
        state tensors detached (sharing data); parameters are identified by position."""
        return {
            "state": {
                str(i): {k: t.detach() for k, t in s.items()} for i, s in enumerate(self.state)
            },
            "hyperparameters": {k: getattr(self, k) for k in self.hyperparameters},
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Copy saved state into the existing state tensors (so a traced step keeps them)."""
        name = type(self).__name__
        saved = state_dict["state"]
        if len(saved) != len(self.state):
            raise ValueError(
                f"{name}.load_state_dict: the checkpoint has state for {len(saved)} parameters, "
                f"this optimizer has {len(self.state)}"
            )
        arrays = []
        for i, state in enumerate(self.state):
            entry = saved[str(i)]
            if set(entry) != set(state):
                raise ValueError(
                    f"{name}.load_state_dict: parameter {i} has state {sorted(entry)}, "
                    f"expected {sorted(state)}"
                )
            for k, t in state.items():
                a = np.asarray(entry[k])
                if a.shape != t.shape:
                    raise ValueError(
                        f"{name}.load_state_dict: '{k}' of parameter {i} has shape {a.shape}, "
                        f"expected {t.shape}"
                    )
                arrays.append((t, a))
        hyper = dict(state_dict["hyperparameters"])
        unknown = set(hyper) - set(self.hyperparameters)
        if unknown:
            raise ValueError(f"{name}.load_state_dict: unknown hyperparameters {sorted(unknown)}")
        for t, a in arrays:
            t._assign(Tensor(a))
        for k, v in hyper.items():
            setattr(self, k, _plain(v))


def _plain(v: Any) -> Any:
    """A hyperparameter as the constructor takes it: a number, a bool or a tuple (betas)."""
    v = v.tolist() if isinstance(v, np.ndarray | np.generic) else v
    return tuple(v) if isinstance(v, list) else v


def _unique(params: Iterable[Tensor]) -> list[Tensor]:
    """The parameters in order, each once (a shared tensor must not be updated twice)."""
    out, seen = [], set()
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"optimizer parameters must be Tensors, got {type(p).__name__}")
        if p.dtype.kind != "f":
            raise TypeError(f"optimizer parameters must be floating, got {p.dtype}")
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    if not out:
        raise ValueError("optimizer got an empty parameter list")
    return out


def _zeros_like(p: Tensor) -> Tensor:
    return Tensor(np.zeros(p.shape, p.dtype))


class SGD(Optimizer):
    """PyTorch's SGD: with momentum, buf = momentum * buf + g (g including weight decay), and
    the step uses buf, or g + momentum * buf with Nesterov."""

    hyperparameters = ("lr", "momentum", "weight_decay", "nesterov")

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: invalid momentum {momentum} or weight_decay {weight_decay}")
        if nesterov and momentum <= 0:
            raise ValueError("SGD: nesterov momentum requires momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        super().__init__(params, lr)

    def _init_state(self, p: Tensor) -> dict[str, Tensor]:
        return {"momentum_buffer": _zeros_like(p)} if self.momentum else {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> None:
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = state["momentum_buffer"]
            buf *= self.momentum
            buf += g
            g = g + self.momentum * buf if self.nesterov else buf
        p -= self.lr_for(p) * g


class Adam(Optimizer):
    """Adam with bias correction; `weight_decay` adds L2 to the gradient (PyTorch's Adam)."""

    hyperparameters = ("lr", "betas", "eps", "weight_decay")
    decoupled_weight_decay = False

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        if not all(0.0 <= b < 1.0 for b in betas) or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"{type(self).__name__}: invalid betas {betas}, eps {eps} or "
                f"weight_decay {weight_decay}"
            )
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        super().__init__(params, lr)

    def _init_state(self, p: Tensor) -> dict[str, Tensor]:
        return {
            "step": Tensor(np.zeros((), np.float32)),
            "exp_avg": _zeros_like(p),
            "exp_avg_sq": _zeros_like(p),
        }

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> None:
        beta1, beta2 = self.betas
        lr = self.lr_for(p)
        if self.weight_decay and self.decoupled_weight_decay:
            p *= 1.0 - lr * self.weight_decay
        elif self.weight_decay:
            g = g + self.weight_decay * p
        step, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        step += 1.0
        m._assign(beta1 * m + (1.0 - beta1) * g)
        v._assign(beta2 * v + (1.0 - beta2) * (g * g))
        step_size = lr / (1.0 - beta1**step)
        denom = sqrt(v) / sqrt(1.0 - beta2**step) + self.eps
        p -= step_size * m / denom


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step."""

    decoupled_weight_decay = True

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(params, lr, betas, eps, weight_decay)

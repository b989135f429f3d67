"""Optimizers: SGD (momentum, Nesterov, weight decay), Adam, AdamW, RMSprop and Adagrad, with
PyTorch's param groups; `lr_scheduler` has the learning-rate schedules.

Written so that `@tracegrad.trace` can capture a whole training step:
- all state (momentum buffers, Adam's moments, the step count) is created as tensors in the
  constructor, never lazily, so the tracer finds it before the first traced call;
- nothing that changes from step to step lives in Python: bias correction reads the step tensor;
- updates happen in place (`p -= ...`, `buf._assign(...)`) under `no_grad`, which the tracer sees
  as state writes;
- the hyperparameters a schedule changes (the learning rate; momentum and betas, which
  `OneCycleLR` cycles) are also held as 0-d float64 tensors per param group, which a traced step
  reads as state: setting `opt.lr` or `group["momentum"]` between steps needs no new trace. The
  other hyperparameters (and whether momentum is 0) are baked into a traced step, with a guard:
  changing one traces it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tracegrad.core.primitives import Phase, sqrt
from tracegrad.frontend.autodiff import enable_grad, no_grad
from tracegrad.frontend.tensor import Tensor, phase
from tracegrad.frontend.tracer import guard


class ParamGroup(dict):
    """One param group: "params" and its hyperparameters. Writing one of `held` (a number or a
    tuple of numbers, as betas) also writes the group's 0-d float64 tensors of it, which a
    traced step reads as state."""

    def __init__(self, items: Mapping[str, Any], held: Iterable[str] = ("lr",)):
        self.held: dict[str, tuple[Tensor, ...]] = {k: () for k in held}
        super().__init__()
        for k, v in items.items():
            self[k] = v

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self.held:
            numbers = tuple(value) if isinstance(value, tuple | list) else (value,)
            if len(self.held[key]) != len(numbers):
                self.held[key] = tuple(Tensor(np.zeros((), np.float64)) for _ in numbers)
            for t, v in zip(self.held[key], numbers, strict=True):
                t._assign(Tensor(np.array(v, np.float64)))
        super().__setitem__(key, value)

    def tensors(self, key: str, dtype: Any = np.float64) -> tuple[Tensor, ...]:
        """The held values of `key` as 0-d tensors of `dtype`: float64 for what PyTorch
        computes in Python floats (bias corrections), else the parameter's."""
        return tuple(_cast(t, dtype) for t in self.held[key])


def _cast(t: Tensor, dtype: Any) -> Tensor:
    return t if t.dtype == dtype else t.astype(dtype)


class Optimizer:
    """Holds the parameters in `param_groups` (PyTorch's: a list of dicts, each with "params"
    and its own hyperparameters; plain parameters make one group), one dict of state tensors per
    parameter, and the hyperparameters named in `hyperparameters`. `opt.lr = x` (and any other
    hyperparameter as an attribute) sets it in every group."""

    hyperparameters: tuple[str, ...] = ("lr",)
    held: tuple[str, ...] = ("lr",)  # those also held as tensors: a traced step reads them

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]):
        object.__setattr__(self, "defaults", dict(defaults))
        self.param_groups: list[ParamGroup] = []
        self.params: list[Tensor] = []
        self.state: list[dict[str, Tensor]] = []
        self._group_of: list[ParamGroup] = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        for group in groups if isinstance(groups[0], Mapping) else [{"params": groups}]:
            self.add_param_group(group)

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Add parameters with their own hyperparameters (the missing ones from the
        constructor's). A traced step traces again afterwards."""
        params = group["params"]
        params = _unique([params] if isinstance(params, Tensor) else params)
        if any(any(p is q for q in self.params) for p in params):
            raise ValueError("add_param_group: some parameters already are in another group")
        unknown = set(group) - {"params", *self.hyperparameters}
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown hyperparameters {sorted(unknown)}")
        full = ParamGroup({**self.defaults, **group, "params": params}, self.held)
        self._check_all(full)
        self.param_groups.append(full)
        for p in params:
            self.params.append(p)
            self.state.append(self._init_state(p, full))
            self._group_of.append(full)

    def _check_all(self, group: Mapping[str, Any]) -> None:
        """Raise ValueError for invalid hyperparameters given to the optimizer (a scheduler
        may set any lr, as in PyTorch: OneCycleLR's last, linear, goes below 0)."""
        if not group["lr"] >= 0:
            raise ValueError(f"invalid learning rate {group['lr']}")
        self._check(group)

    def _check(self, group: Mapping[str, Any]) -> None:
        """Raise ValueError for invalid hyperparameters of this optimizer."""

    def __getattr__(self, name: str) -> Any:
        if name in type(self).hyperparameters and self.__dict__.get("param_groups"):
            return self.param_groups[0][name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).hyperparameters and "param_groups" in self.__dict__:
            for group in self.param_groups:
                group[name] = value
                self._check_all(group)
        else:
            object.__setattr__(self, name, value)

    def lr_for(self, p: Tensor, group: ParamGroup | None = None) -> Tensor:
        """The learning rate of `p`'s group as a 0-d tensor of `p`'s dtype: what update rules
        multiply by, so a schedule that changes it needs no new trace."""
        if group is None:
            group = self._group_of[next(i for i, q in enumerate(self.params) if q is p)]
        return group.tensors("lr", p.dtype)[0]

    def _add_missing_state(self) -> None:
        """Create the state a changed hyperparameter needs (SGD's momentum buffers once a
        schedule sets momentum), before a traced step, which could not create it."""
        for p, state, group in zip(self.params, self.state, self._group_of, strict=True):
            for k, t in self._init_state(p, group).items():
                state.setdefault(k, t)

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        raise NotImplementedError

    @no_grad()
    def step(self, closure: Any = None) -> Any:
        """Update every parameter that has a gradient, in place. A `closure` (PyTorch's) is
        called first, with grad enabled, and its loss returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        baked = self._baked()
        guard(lambda: self._baked() == baked)  # a traced step is valid while these hold
        with phase(Phase.UPDATE):
            for p, state, group in zip(self.params, self.state, self._group_of, strict=True):
                if p.grad is not None:
                    self._update(p, p.grad, state, group)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (`grad = None`, PyTorch's default), or zero them in place (an
        alias of `p.grad` sees the zeros, as in PyTorch)."""
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad._assign(Tensor(np.zeros(p.shape, p.grad.dtype)))

    clear_grad = zero_grad  # MegEngine's name

    def _baked(self) -> tuple:
        """What the update rules read as Python values, and the groups' sizes: of the held
        hyperparameters only whether they are 0 (momentum's state is used or not)."""
        return tuple(
            (len(g["params"]), *(_is_zero(g[k]) if k in self.held else g[k]
                                 for k in self.hyperparameters if k != "lr"))
            for g in self.param_groups
        )  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """{"state": {"0": {"step": ..., ...}, ...}, "hyperparameters": {"lr": ..., ...} (the
        first group's), "param_groups": {"0": {...}, ...}}, with state tensors detached
        (sharing data); parameters are identified by position."""
        return {
            "state": {
                str(i): {k: t.detach() for k, t in s.items()} for i, s in enumerate(self.state)
            },
            "hyperparameters": self._hyper(self.param_groups[0]),
            "param_groups": {str(i): self._hyper(g) for i, g in enumerate(self.param_groups)},
        }

    def _hyper(self, group: Mapping[str, Any]) -> dict[str, Any]:
        return {k: group[k] for k in self.hyperparameters}

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
            entry = saved[str(i)] if str(i) in saved else saved[i]
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
        groups = state_dict.get("param_groups")
        groups = [dict(groups[str(i)]) for i in range(len(groups))] if groups else None
        for h in [hyper, *(groups or [])]:
            unknown = set(h) - set(self.hyperparameters)
            if unknown:
                raise ValueError(
                    f"{name}.load_state_dict: unknown hyperparameters {sorted(unknown)}"
                )
        if groups is not None and len(groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the checkpoint has {len(groups)} param groups, this "
                f"optimizer has {len(self.param_groups)}"
            )
        for t, a in arrays:
            t._assign(Tensor(a))
        for group, h in zip(
            self.param_groups, groups or [hyper] * len(groups or self.param_groups), strict=True
        ):
            for k, v in h.items():
                group[k] = _plain(v)


def _is_zero(v: Any) -> Any:
    return tuple(x == 0 for x in v) if isinstance(v, tuple | list) else v == 0


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
    held = ("lr", "momentum")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        if group["momentum"] < 0 or group["weight_decay"] < 0:
            raise ValueError(
                f"SGD: invalid momentum {group['momentum']} or weight_decay {group['weight_decay']}"
            )
        if group["nesterov"] and group["momentum"] <= 0:
            raise ValueError("SGD: nesterov momentum requires momentum > 0")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {"momentum_buffer": _zeros_like(p)} if group["momentum"] else {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        weight_decay = group["weight_decay"]
        if weight_decay:
            g = g + weight_decay * p
        if group["momentum"]:
            if "momentum_buffer" not in state:
                raise ValueError("SGD: momentum was 0 when this parameter's group was created")
            (momentum,) = group.tensors("momentum", p.dtype)
            buf = state["momentum_buffer"]
            buf *= momentum
            buf += g
            g = g + momentum * buf if group["nesterov"] else buf
        p -= self.lr_for(p, group) * g


class Adam(Optimizer):
    """Adam with bias correction; `weight_decay` adds L2 to the gradient (PyTorch's Adam)."""

    hyperparameters = ("lr", "betas", "eps", "weight_decay")
    held = ("lr", "betas")
    decoupled_weight_decay = False

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(
            params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        )

    def _check(self, group: Mapping[str, Any]) -> None:
        group["betas"] = tuple(group["betas"])
        betas, eps, weight_decay = group["betas"], group["eps"], group["weight_decay"]
        if not all(0.0 <= b < 1.0 for b in betas) or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"{type(self).__name__}: invalid betas {betas}, eps {eps} or "
                f"weight_decay {weight_decay}"
            )

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {
            "step": Tensor(np.zeros((), np.float32)),
            "exp_avg": _zeros_like(p),
            "exp_avg_sq": _zeros_like(p),
        }

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        # the scalars in float64, then cast, as PyTorch computes them (Python floats): in
        # float32, 1 - beta2**t is off by up to eps32 / (1 - beta2), 6e-5 at beta2 = 0.999
        (beta1, beta2), (lr,), dtype = group.tensors("betas"), group.tensors("lr"), p.dtype
        eps, weight_decay = group["eps"], group["weight_decay"]
        if weight_decay and self.decoupled_weight_decay:
            p *= _cast(1.0 - lr * weight_decay, dtype)
        elif weight_decay:
            g = g + weight_decay * p
        step, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        step += 1.0
        m._assign(_cast(beta1, dtype) * m + _cast(1.0 - beta1, dtype) * g)
        v._assign(_cast(beta2, dtype) * v + _cast(1.0 - beta2, dtype) * (g * g))
        t = step.astype(np.float64)
        step_size = _cast(lr / (1.0 - beta1**t), dtype)
        bias_correction2_sqrt = _cast(sqrt(1.0 - beta2**t), dtype)
        p -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step."""

    decoupled_weight_decay = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(params, lr, betas, eps, weight_decay)


class RMSprop(Optimizer):
    """PyTorch's RMSprop: v = alpha v + (1 - alpha) g^2, step g / (sqrt(v) + eps), optionally
    centered (minus the mean gradient's square) and with momentum."""

    hyperparameters = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")
    held = ("lr", "momentum")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered)  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        if not 0.0 <= group["alpha"] <= 1.0 or group["eps"] < 0 or group["momentum"] < 0:
            raise ValueError(f"RMSprop: invalid alpha, eps or momentum in {dict(group)}")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        # every buffer exists from the start, so a traced step finds them all
        return {"square_avg": _zeros_like(p), "grad_avg": _zeros_like(p),
                "momentum_buffer": _zeros_like(p)}  # fmt: skip

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        alpha, eps = group["alpha"], group["eps"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        v = state["square_avg"]
        v._assign(alpha * v + (1.0 - alpha) * (g * g))
        if group["centered"]:
            mean_g = state["grad_avg"]
            mean_g._assign(alpha * mean_g + (1.0 - alpha) * g)
            denom = sqrt(v - mean_g * mean_g) + eps
        else:
            denom = sqrt(v) + eps
        lr = self.lr_for(p, group)
        if group["momentum"]:
            (momentum,) = group.tensors("momentum", p.dtype)
            buf = state["momentum_buffer"]
            buf._assign(momentum * buf + g / denom)
            p -= lr * buf
        else:
            p -= lr * g / denom


class Adagrad(Optimizer):
    """PyTorch's Adagrad: sum += g^2, step lr / (1 + (t - 1) lr_decay) * g / (sqrt(sum) + eps)."""

    hyperparameters = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
    ):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps)  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        if group["lr_decay"] < 0 or group["eps"] < 0 or group["initial_accumulator_value"] < 0:
            raise ValueError(f"Adagrad: invalid lr_decay, eps or accumulator in {dict(group)}")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        start = np.full(p.shape, group["initial_accumulator_value"], p.dtype)
        return {"step": Tensor(np.zeros((), np.float32)), "sum": Tensor(start)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        step, total = state["step"], state["sum"]
        step += 1.0
        total._assign(total + g * g)
        decay = 1.0 + (step.astype(np.float64) - 1.0) * group["lr_decay"]  # float64, as PyTorch
        lr = _cast(group.tensors("lr")[0] / decay, p.dtype)
        p -= lr * g / (sqrt(total) + group["eps"])


from tracegrad.optim import lr_scheduler  # noqa: E402, F401 (optim.lr_scheduler, as in PyTorch)

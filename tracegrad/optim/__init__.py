"""Optimizers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW (amsgrad),
RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD and (eager only) LBFGS, with
PyTorch's param groups and options
(`maximize`; `foreach`, `fused` and `capturable` are accepted and mean nothing on the CPU);
`lr_scheduler` has the learning-rate schedules, `swa_utils` weight averaging (SWA, EMA).

Written so that `@tracegrad.trace` can capture a whole training step:
- all state (momentum buffers, Adam's moments, the step count) is created as tensors in the
  constructor, never lazily, so the tracer finds it before the first traced call;
- nothing that changes from step to step lives in Python: bias correction reads the step tensor;
- updates happen in place (`p -= ...`, `buf._assign(...)`) under `no_grad`, which the tracer sees
  as state writes;
- a complex parameter is updated as PyTorch's optimizers update it: as its real view (its real
  and imaginary parts along a last axis of 2), and its state too, so that Adam's second moment
  is of each part; the results are written back as complex numbers;
- the hyperparameters a schedule changes (the learning rate; momentum and betas, which
  `OneCycleLR` cycles) are also held as 0-d float64 tensors per param group, which a traced step
  reads as state: setting `opt.lr` or `group["momentum"]` between steps needs no new trace. The
  other hyperparameters (and whether momentum is 0) are baked into a traced step, with a guard:
  changing one traces it again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core.errors import TraceError
from tracegrad.core.primitives import Phase, abs, maximum, minimum, sign, sqrt, where
from tracegrad.core.vocabulary import EAGER_GROUPS
from tracegrad.frontend.autodiff import RemovableHandle, enable_grad, no_grad
from tracegrad.frontend.elementwise import view_as_complex, view_as_real
from tracegrad.frontend.functions import clamp, stack
from tracegrad.frontend.mutation import array_target, zero_grads
from tracegrad.frontend.tensor import Listeners, Tensor, get_default_dtype, phase
from tracegrad.frontend.tracer import guard, watch
from tracegrad.nn.lazy import UninitializedParameter
from tracegrad.optim.line_search import strong_wolfe

__all__ = ["ASGD", "LBFGS", "SGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW",
           "Adamax", "NAdam", "Optimizer", "RAdam", "RMSprop", "Rprop", "SparseAdam",
           "lr_scheduler", "swa_utils"]  # fmt: skip

# PyTorch's options every optimizer takes: `maximize` (ascend the gradient), and those that choose
# among PyTorch's kernels (multi-tensor, fused, CUDA-graph capturable), meaningless here
OPTIONS = ("maximize", "foreach", "capturable", "differentiable", "fused")


def options(maximize: bool, foreach: Any, capturable: bool, differentiable: bool,
            fused: Any) -> dict[str, Any]:  # fmt: skip
    return dict(maximize=bool(maximize), foreach=foreach, capturable=capturable,
                differentiable=differentiable, fused=fused)  # fmt: skip


class Required:
    """PyTorch's marker for a hyperparameter without default (`lr=required`), which each
    param group must then give."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = Required()


class ParamGroup(dict):
    """One param group: "params" and its hyperparameters. Writing one of `held` (a number or a
    tuple of numbers, as betas) also writes the group's 0-d float64 tensors of it, which a
    traced step reads as state."""

    def __init__(self, items: Mapping[str, Any], held: Iterable[str] = ("lr",)):
        self.held: dict[str, tuple[Tensor, ...]] = {k: () for k in held}
        self._casts: dict[tuple[str, Any], tuple[tuple[int, ...], tuple[Tensor, ...]]] = {}
        super().__init__()
        for k, v in items.items():
            self[k] = v

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self.held and value is not None:  # None: an optimizer of its own with no lr
            numbers = tuple(value) if isinstance(value, tuple | list) else (value,)
            if len(self.held[key]) != len(numbers):
                self.held[key] = tuple(Tensor._of(np.zeros((), np.float64)) for _ in numbers)
            for t, v in zip(self.held[key], numbers, strict=True):
                t._assign(Tensor._of(np.array(v, np.float64)))
        super().__setitem__(key, value)

    def __reduce__(self) -> tuple:
        """Pickled (an optimizer handed to a worker process) as its items, whose held tensors
        are made again from them: pickle would set items before `held` exists."""
        return ParamGroup, (dict(self), tuple(self.held))

    def tensors(self, key: str, dtype: Any = np.float64) -> tuple[Tensor, ...]:
        """The held values of `key` as 0-d tensors of `dtype`: float64 for what PyTorch
        computes in Python floats (bias corrections), else the parameter's. Eagerly, a cast is
        kept until the held value is written again (its version moves): each parameter's update
        asks for it, and a cast is an op. A trace casts the held tensors, which it reads as
        state."""
        held = self.held[key]
        if Listeners.tracers:
            return tuple(_cast(t, dtype) for t in held)
        versions = tuple(t._version[0] for t in held)
        kept = self._casts.get((key, dtype))
        if kept is None or kept[0] != versions:
            kept = self._casts[key, dtype] = (versions, tuple(_kept_cast(t, dtype) for t in held))
        return kept[1]


def _cast(t: Tensor, dtype: Any) -> Tensor:
    return t if t._value.dtype == dtype else t.astype(dtype)


def _kept_cast(t: Tensor, dtype: Any) -> Tensor:
    """`_cast`, read-only where it is a copy: every update shares it, so a write must fail."""
    out = _cast(t, dtype)
    if out is not t:
        out.numpy().flags.writeable = False
    return out


class State(list):
    """One dict of state per parameter, in order (`opt.state[0]`), also found by the parameter
    itself, as PyTorch's optimizers key theirs (`self.state[p]`, `state.items()`)."""

    def __init__(self, owner: Optimizer):
        super().__init__()
        self.owner = owner
        self.index: dict[int, int] = {}  # id(parameter) -> its place, made when first asked

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._place(key) if isinstance(key, Tensor) else key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """`opt.state[p] = {...}`: state made up front (A3C's shared Adam)."""
        super().__setitem__(self._place(key) if isinstance(key, Tensor) else key, value)

    def _place(self, p: Tensor) -> int:
        watch_python_state(self.owner)  # PyTorch's way of reading and writing state
        params = self.owner.params
        if len(self.index) != len(params):  # a group was added
            self.index = {id(q): i for i, q in enumerate(params)}
        i = self.index.get(id(p))
        if i is None:
            raise KeyError(f"a tensor of shape {p.shape} that this optimizer does not update")
        return i

    def __contains__(self, key: Any) -> bool:
        if isinstance(key, Tensor):
            return any(p is key and state for p, state in self.items())
        return super().__contains__(key)

    def keys(self) -> list[Tensor]:
        return [p for p, _ in self.items()]

    def values(self) -> list[dict[str, Any]]:
        return [state for _, state in self.items()]

    def items(self) -> list[tuple[Tensor, dict[str, Any]]]:
        return [(p, s) for p, s in zip(self.owner.params, self, strict=True) if s]


class Optimizer:
    """Holds the parameters in `param_groups` (PyTorch's: a list of dicts, each with "params"
    and its own hyperparameters; plain parameters make one group), one dict of state tensors per
    parameter, and the hyperparameters named in `hyperparameters`. `opt.lr = x` (and any other
    hyperparameter as an attribute) sets it in every group.

    An optimizer written against PyTorch's API subclasses it as PyTorch's (`defaults`, its own
    `step` over `self.param_groups`, state made at the first step in `self.state[p]`)."""

    hyperparameters: tuple[str, ...] = ("lr",)
    held: tuple[str, ...] = ("lr",)  # those also held as tensors: a traced step reads them

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "step" in vars(cls):
            cls.step = _hooked(_watching(cls.step))

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]):
        object.__setattr__(self, "defaults", dict(defaults))
        self.param_groups: list[ParamGroup] = []
        self.params: list[Tensor] = []
        self.state = State(self)
        self._group_of: list[ParamGroup] = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        for group in groups if isinstance(groups[0], Mapping) else [{"params": groups}]:
            self.add_param_group(group)

    def __tracegrad_watch__(self) -> None:
        """Reached by a traced step through Python state: nothing more to watch than which
        optimizer it is. Its `step` guards what it reads (a learning rate a scheduler changes is
        an input of the plan, not a value to trace again for)."""

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Add parameters with their own hyperparameters (the missing ones from the
        constructor's). A traced step traces again afterwards."""
        params = group["params"]
        params = _unique([params] if isinstance(params, Tensor) else params)
        if any(any(p is q for q in self.params) for p in params):
            raise ValueError("add_param_group: some parameters already are in another group")
        if any(isinstance(p, UninitializedParameter) for p in params):
            raise ValueError(
                f"{type(self).__name__}: a lazy layer's parameters have no shape yet; run one "
                "forward pass (a dry run) before building the optimizer"
            )
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
        for k, v in group.items():
            if v is required:
                raise ValueError(f"{type(self).__name__}: the parameter group gives no value of "
                                 f"the required hyperparameter {k!r}")  # fmt: skip
        if group.get("lr") is not None and not group["lr"] >= 0:
            raise ValueError(f"invalid learning rate {group['lr']}")
        if group.get("differentiable"):
            raise ValueError(
                f"{type(self).__name__}(differentiable=True) is not provided: tracegrad does not "
                "differentiate through optimizer steps"
            )
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
            for group in self.param_groups:
                items = [(p, state) for p, state, of in
                         zip(self.params, self.state, self._group_of, strict=True)
                         if of is group and p.grad is not None]  # fmt: skip
                real = [_real_view(p, state) for p, state in items]
                shared = self._shared(group, real) if items else None
                for k, ((p, state), (q, q_state)) in enumerate(zip(items, real, strict=True)):
                    g = -p.grad if group.get("maximize") else p.grad
                    g = g if q is p else view_as_real(g)
                    if shared is None:
                        self._update(q, g, q_state, group)
                    else:
                        self._update(q, g, q_state, group, shared[k])
                    if q is not p:
                        _write_back([p, *state.values()], [q, *q_state.values()])
        return loss

    def _shared(self, group: ParamGroup, items: list[tuple[Tensor, dict[str, Tensor]]]) -> Any:
        """What the updates of a group's parameters (`items`: those with a gradient, and their
        state) compute alike, computed for all of them at once: one value per item, passed to
        `_update`; None if nothing. A traced step then runs a few operations on vectors
        instead of as many on 0-d tensors per parameter."""
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (`grad = None`, PyTorch's default), or zero them in place (an
        alias of `p.grad` sees the zeros, as in PyTorch). By the groups, as PyTorch: a wrapper
        that shares another optimizer's groups without __init__ (timm's Lookahead) works."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    clear_grad = zero_grad  # MegEngine's name

    def _baked(self) -> tuple:
        """What the update rules read as Python values, and the groups' sizes: of the held
        hyperparameters only whether they are 0 (momentum's state is used or not)."""
        return tuple(
            (len(g["params"]), *(_is_zero(g[k]) if k in self.held else g[k]
                                 for k in self.hyperparameters if k != "lr"))
            for g in self.param_groups
        )  # fmt: skip

    # --- hooks, as PyTorch's: each registration returns a handle whose remove() undoes it ------
    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """`hook(optimizer, args, kwargs)` before each step; it may return (args, kwargs)."""
        return register_hook(_hooks(self, "pre"), hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """`hook(optimizer, args, kwargs)` after each step."""
        return register_hook(_hooks(self, "post"), hook)

    def register_state_dict_pre_hook(self, hook: Callable, prepend: bool = False) -> Any:
        """`hook(optimizer)` before `state_dict` is made."""
        return register_hook(_hooks(self, "sd_pre"), hook, prepend)

    def register_state_dict_post_hook(self, hook: Callable, prepend: bool = False) -> Any:
        """`hook(optimizer, state_dict)` after; it may return the state dict to give."""
        return register_hook(_hooks(self, "sd_post"), hook, prepend)

    def register_load_state_dict_pre_hook(self, hook: Callable, prepend: bool = False) -> Any:
        """`hook(optimizer, state_dict)` before loading; it may return the state dict to load."""
        return register_hook(_hooks(self, "load_pre"), hook, prepend)

    def register_load_state_dict_post_hook(self, hook: Callable, prepend: bool = False) -> Any:
        """`hook(optimizer)` after loading."""
        return register_hook(_hooks(self, "load_post"), hook, prepend)

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: {"state": {0: {"step": ..., ...}, ...}, "param_groups": [{"lr": ...,
        ..., "params": [0, 1, ...]}, ...]}, parameters numbered in order across the groups, state
        tensors detached (sharing data); around it the state-dict hooks."""
        for hook in tuple(_hooks(self, "sd_pre").values()):
            hook(self)
        state = {i: {k: _detached(t) for k, t in s.items()} for i, s in enumerate(self.state)}
        out = {"state": state, "param_groups": self._saved_groups()}
        for hook in tuple(_hooks(self, "sd_post").values()):
            out = hook(self, out) or out
        return out

    def _unknown_keys(self, group: Mapping[str, Any]) -> set[str]:
        """A saved group's keys this optimizer does not take: not its parameters' numbers, its
        hyperparameters, or a scheduler's "initial_lr"."""
        return set(group) - {"params", "initial_lr", *self.defaults}

    def _saved_groups(self) -> list[dict[str, Any]]:
        """Each group's hyperparameters, "params" its parameters' numbers (PyTorch's)."""
        groups, start = [], 0
        for g in self.param_groups:
            n = len(g["params"])
            groups.append({**{k: v for k, v in g.items() if k != "params"},
                           "params": list(range(start, start + n))})  # fmt: skip
            start += n
        return groups

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Copy saved state into the existing state tensors (so a traced step keeps them), and
        each saved group's hyperparameters (and a scheduler's "initial_lr") into its group;
        around it the load hooks."""
        for hook in tuple(_hooks(self, "load_pre").values()):
            state_dict = hook(self, state_dict) or state_dict
        self._load_state_dict(state_dict)
        for hook in tuple(_hooks(self, "load_post").values()):
            hook(self)

    def _load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        name = type(self).__name__
        saved, groups = _pytorch_layout(state_dict, len(self.param_groups))
        if len(saved) > len(self.state):
            raise ValueError(
                f"{name}.load_state_dict: the checkpoint has state for {len(saved)} parameters, "
                f"this optimizer has {len(self.state)}"
            )
        if len(groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the checkpoint has {len(groups)} param groups, this "
                f"optimizer has {len(self.param_groups)}"
            )
        arrays = []
        for i, (p, state, group) in enumerate(zip(self.params, self.state, self._group_of,
                                                  strict=True)):  # fmt: skip
            entry = saved[i] if i in saved else saved.get(str(i))
            if entry is None:  # PyTorch saves no state for a parameter that never stepped
                entry = {k: v.numpy() for k, v in self._init_state(p, group).items()}
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
        for group, h in zip(self.param_groups, groups, strict=True):
            if "params" in h and len(h["params"]) != len(group["params"]):
                raise ValueError(f"{name}.load_state_dict: a saved group has "
                                 f"{len(h['params'])} parameters, this optimizer's "
                                 f"{len(group['params'])}")  # fmt: skip
            unknown = self._unknown_keys(h)
            if unknown:
                raise ValueError(
                    f"{name}.load_state_dict: unknown hyperparameters {sorted(unknown)}"
                )
        for t, a in arrays:
            t._assign(Tensor._of(a))
        for group, h in zip(self.param_groups, groups, strict=True):
            for k, v in h.items():
                if k != "params":
                    group[k] = _plain(v)


# hooks of every optimizer's step (`torch.optim.optimizer.register_optimizer_step_pre_hook`)
GLOBAL_STEP_HOOKS: dict[str, dict[int, Callable]] = {"pre": {}, "post": {}}


def _hooks(opt: Optimizer, kind: str) -> dict[int, Callable]:
    """The optimizer's own hooks of `kind` (made on first use: a subclass may skip __init__)."""
    if "_hooks" not in vars(opt):
        object.__setattr__(opt, "_hooks", {k: {} for k in
                                           ("pre", "post", "sd_pre", "sd_post", "load_pre",
                                            "load_post")})  # fmt: skip
    return opt._hooks[kind]


def register_hook(registry: dict[int, Callable], hook: Callable,
                  prepend: bool = False) -> RemovableHandle:  # fmt: skip
    """Add `hook` to `registry` (first, with `prepend`); the handle removes it."""
    handle = RemovableHandle(registry)
    registry[handle.id] = hook
    if prepend:
        items = sorted(registry.items(), key=lambda kv: kv[0] != handle.id)
        registry.clear()
        registry.update(items)
    return handle


def _hooked(step: Callable[..., Any]) -> Callable[..., Any]:
    """`step` between the step pre-hooks (global, then the optimizer's; each is given the
    call's arguments, the optimizer first, and may return new (args, kwargs)) and post-hooks,
    as PyTorch's. As there, each class's own step is wrapped: a subclass's step that calls
    `super().step()` runs the hooks twice."""

    @functools.wraps(step)
    def hooked(*args: Any, **kwargs: Any) -> Any:
        self = args[0]
        for hook in (*GLOBAL_STEP_HOOKS["pre"].values(), *_hooks(self, "pre").values()):
            changed = hook(self, args, kwargs)
            if changed is not None:
                args, kwargs = changed
        out = step(*args, **kwargs)
        for hook in (*GLOBAL_STEP_HOOKS["post"].values(), *_hooks(self, "post").values()):
            hook(self, args, kwargs)
        return out

    return hooked


def _watching(step: Callable[..., Any]) -> Callable[..., Any]:
    """A subclass's own `step`, which reads its hyperparameters and state as PyTorch's do."""

    @functools.wraps(step)
    def watched(self: Optimizer, *args: Any, **kwargs: Any) -> Any:
        watch_python_state(self)
        return step(self, *args, **kwargs)

    return watched


def watch_python_state(opt: Optimizer) -> None:
    """While tracing code written the PyTorch way (`if len(state) == 0:` makes the state, a
    Python step count, `group["lr"]` read as a number): the trace bakes in what that code saw,
    so its plan holds while the state's keys, numbers and tensors' shapes and the
    hyperparameters are as the trace found them, else the step traces again (PyTorch's compiler
    guards them too). Not worth a warning: the first step makes the state; a Python step
    count, which changes at every step, meets the warning about tracing again and again.
    Nothing outside tracing: every `state[p]` of an eager step asks."""
    if not Listeners.tracers:
        return
    watch(("optimizer", id(opt)), f"{type(opt).__name__}'s state or hyperparameters",
          lambda: PythonState.of(opt), warn=False)  # fmt: skip


class PythonState(tuple):
    """What an optimizer's own `step` reads as Python values: each state's keys with its
    numbers (a tensor as its shape and dtype), and the groups' hyperparameters."""

    @classmethod
    def of(cls, opt: Optimizer) -> PythonState:
        states = tuple(tuple((k, _frozen(v)) for k, v in s.items()) for s in opt.state)
        groups = tuple(tuple((k, _frozen(v)) for k, v in g.items() if k != "params")
                       for g in opt.param_groups)  # fmt: skip
        return cls((states, groups))

    def __repr__(self) -> str:
        numbers = [v for s in self[0] for _, v in s if not isinstance(v, tuple)]
        return f"state numbers {numbers[:4]}{' ...' if len(numbers) > 4 else ''}"


def _frozen(v: Any) -> Any:
    if isinstance(v, Tensor):
        return ("tensor", v.shape, v.dtype)
    if isinstance(v, list | tuple):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    return v if isinstance(v, int | float | str | bool | None) else id(v)


def _detached(v: Any) -> Any:
    return v.detach() if isinstance(v, Tensor) else v


def _pytorch_layout(state_dict: Mapping[str, Any], n_groups: int) -> tuple[Mapping, list]:
    """The state and the list of groups, also of a checkpoint tracegrad wrote before it took
    PyTorch's layout ("hyperparameters", the first group's, and "param_groups" keyed by
    position)."""
    groups = state_dict.get("param_groups")
    if isinstance(groups, Mapping):
        groups = [groups[str(i)] if str(i) in groups else groups[i] for i in range(len(groups))]
    if not groups and "hyperparameters" in state_dict:
        groups = [state_dict["hyperparameters"]] * n_groups
    return state_dict["state"], [dict(g) for g in groups or ()]


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
        if p.dtype.kind not in "fc":
            raise TypeError(f"optimizer parameters must be floating or complex, got {p.dtype}")
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    if not out:
        raise ValueError("optimizer got an empty parameter list")
    return out


def _real_view(p: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """A complex parameter and its complex state as real tensors of their parts (..., 2), which
    the update rules update as any real parameter; a real one as it is."""
    if p._value.dtype.kind != "c":
        return p, state
    return view_as_real(p), {k: view_as_real(t) if t.dtype.kind == "c" else t
                             for k, t in state.items()}  # fmt: skip


def _write_back(tensors: list[Tensor], parts: list[Tensor]) -> None:
    """Each complex tensor takes the value of its real view's update."""
    for t, v in zip(tensors, parts, strict=True):
        if v is not t:
            t._assign(view_as_complex(v))


def _zeros_like(p: Tensor) -> Tensor:
    return Tensor._of(np.zeros(p.shape, p.dtype))


def _scalar(value: float) -> Tensor:
    """A 0-d state tensor (a step count, NAdam's momentum product) in PyTorch's dtype for
    them: float64 when the default dtype is float64, else float32."""
    return Tensor._of(
        np.array(value, np.float64 if get_default_dtype() == np.float64 else np.float32)
    )


Optimizer.step = _hooked(Optimizer.step)  # subclasses' own steps: in __init_subclass__


class SGD(Optimizer):
    """PyTorch's SGD: with momentum, buf = momentum * buf + (1 - dampening) * g (g including
    weight decay; buf = g at the first step), and the step uses buf, or g + momentum * buf with
    Nesterov."""

    hyperparameters = ("lr", "momentum", "dampening", "weight_decay", "nesterov", *OPTIONS)
    held = ("lr", "momentum")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov,
                        **options(maximize, foreach, False, differentiable, fused))  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        if group["momentum"] < 0 or group["weight_decay"] < 0:
            raise ValueError(
                f"SGD: invalid momentum {group['momentum']} or weight_decay {group['weight_decay']}"
            )
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov momentum requires momentum > 0 and zero dampening")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        if not group["momentum"]:
            return {}
        # a step count tells the first step, where PyTorch's buffer starts as g undamped
        first = {"step": _scalar(0.0)} if group["dampening"] else {}
        return {"momentum_buffer": _zeros_like(p), **first}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        lr = self.lr_for(p, group)
        if _fused_sgd(p, g, state.get("momentum_buffer"), lr, group):
            return
        weight_decay = group["weight_decay"]
        if weight_decay:
            g = g + weight_decay * p
        if group["momentum"]:
            if "momentum_buffer" not in state:
                raise ValueError("SGD: momentum was 0 when this parameter's group was created")
            (momentum,) = group.tensors("momentum", p.dtype)
            buf = state["momentum_buffer"]
            buf *= momentum
            if group["dampening"]:
                step = state["step"]
                buf += where(step == 0, 1.0, 1.0 - group["dampening"]).astype(p.dtype) * g
                step += 1.0
            else:
                buf += g
            g = g + momentum * buf if group["nesterov"] else buf
        p -= lr * g


class Adam(Optimizer):
    """Adam with bias correction; `weight_decay` adds L2 to the gradient (PyTorch's Adam), or
    with `decoupled_weight_decay` shrinks the parameter (AdamW); `amsgrad` divides by the
    largest second moment so far."""

    hyperparameters = ("lr", "betas", "eps", "weight_decay", "amsgrad", "decoupled_weight_decay",
                       *OPTIONS)  # fmt: skip
    held = ("lr", "betas")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, decoupled_weight_decay=decoupled_weight_decay,
                        **options(maximize, foreach, capturable, differentiable,
                                  fused))  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        group["betas"] = tuple(group["betas"])
        betas, eps, weight_decay = group["betas"], group["eps"], group["weight_decay"]
        if not all(0.0 <= b < 1.0 for b in betas) or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"{type(self).__name__}: invalid betas {betas}, eps {eps} or "
                f"weight_decay {weight_decay}"
            )

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        state = {"step": _scalar(0.0), "exp_avg": _zeros_like(p), "exp_avg_sq": _zeros_like(p)}
        return {**state, "max_exp_avg_sq": _zeros_like(p)} if group["amsgrad"] else state

    def _shared(self, group: ParamGroup, items: list[tuple[Tensor, dict[str, Tensor]]]) -> Any:
        """Each parameter's step count, advanced, and per item its step size, the square root
        of its second bias correction, the moments' coefficients (beta1, 1 - beta1, beta2,
        1 - beta2) and AdamW's decay factor, cast once for each of the parameters' dtypes. The
        bias corrections are computed over the group at once: as vectors of the step counts,
        or, eagerly where every count is the same number (the common case), once; per parameter
        these were a dozen ops on 0-d tensors, more than a small parameter's update."""
        steps = [state["step"] for _, state in items]
        if len({t._value.dtype for t in steps}) > 1:
            return None
        (beta1, beta2), (lr,) = group.tensors("betas"), group.tensors("lr")
        dtypes = {p._value.dtype for p, _ in items}
        decoupled = group["weight_decay"] and group["decoupled_weight_decay"]
        decay = 1.0 - lr * group["weight_decay"] if decoupled else None
        moments = {d: (_cast(beta1, d), _cast(1.0 - beta1, d), _cast(beta2, d),
                       _cast(1.0 - beta2, d), decay if decay is None else _cast(decay, d))
                   for d in dtypes}  # fmt: skip
        # `.item()`: A3C's shared Adam makes each count as `torch.zeros(1)`, not 0-d
        if not Listeners.tracers and len({t._value.item() for t in steps}) == 1:
            for step in steps:
                step += 1.0
            t = steps[0].astype(np.float64)
            step_size, bias_correction2_sqrt = lr / (1.0 - beta1**t), sqrt(1.0 - beta2**t)
            each = {d: (_cast(step_size, d), _cast(bias_correction2_sqrt, d), *moments[d])
                    for d in dtypes}  # fmt: skip
            return [each[p._value.dtype] for p, _ in items]
        t = stack(steps) + 1.0
        for k, step in enumerate(steps):
            step._assign(t[k])
        t = t.astype(np.float64)
        step_size, bias_correction2_sqrt = lr / (1.0 - beta1**t), sqrt(1.0 - beta2**t)
        cast = {d: (step_size.astype(d), bias_correction2_sqrt.astype(d)) for d in dtypes}
        return [
            (cast[p._value.dtype][0][k], cast[p._value.dtype][1][k], *moments[p._value.dtype])
            for k, (p, _) in enumerate(items)
        ]

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup,
                shared: tuple[Tensor, ...] | None = None) -> None:  # fmt: skip
        # the scalars in float64, then cast, as PyTorch computes them (Python floats): in
        # float32, 1 - beta2**t is off by up to eps32 / (1 - beta2), 6e-5 at beta2 = 0.999
        (beta1, beta2), (lr,), dtype = group.tensors("betas"), group.tensors("lr"), p._value.dtype
        step, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        if shared is None:
            step += 1.0
            t = step.astype(np.float64)
            step_size = _cast(lr / (1.0 - beta1**t), dtype)
            bias_correction2_sqrt = _cast(sqrt(1.0 - beta2**t), dtype)
            b1, c1, b2, c2 = (_cast(beta1, dtype), _cast(1.0 - beta1, dtype), _cast(beta2, dtype),
                              _cast(1.0 - beta2, dtype))  # fmt: skip
        else:
            step_size, bias_correction2_sqrt, b1, c1, b2, c2, _ = shared
        decay = None if shared is None else shared[-1]
        if _fused_adam(
            p, g, m, v, (step_size, bias_correction2_sqrt, b1, c1, b2, c2), group, decay
        ):
            return
        g = _weight_decay(p, g, lr, group, decay)
        # in place: eagerly one pass each (`mutation._into`), rounded as b1 m + c1 g
        m *= b1
        m += c1 * g
        v *= b2
        v += c2 * (g * g)
        if group["amsgrad"]:
            if "max_exp_avg_sq" not in state:
                raise ValueError("Adam: amsgrad was off when this parameter's group was created")
            state["max_exp_avg_sq"]._assign(maximum(state["max_exp_avg_sq"], v))
            v = state["max_exp_avg_sq"]
        p -= step_size * m / (sqrt(v) / bias_correction2_sqrt + group["eps"])


def _fused_adam(p: Tensor, g: Tensor, m: Tensor, v: Tensor, scalars: tuple[Tensor, ...],
                group: ParamGroup, decay: Tensor | None) -> bool:  # fmt: skip
    """Eagerly, Adam's update of p and its moments as one fused kernel (`_fused_update`); False
    where the ops run (amsgrad too). `scalars`: the step size, the second bias correction's root
    and the moments' coefficients, in p's dtype; `decay`: AdamW's factor, if `_shared` computed
    it."""
    if group["amsgrad"]:
        return False
    dtype, weight_decay = p._value.dtype, group["weight_decay"]
    decoupled = bool(weight_decay) and group["decoupled_weight_decay"]
    kind = "decoupled" if decoupled else "l2" if weight_decay else ""

    def numbers() -> list[Any]:
        """The scalars, eps, then AdamW's factor or the L2 coefficient (`_adam_graph`'s)."""
        if decoupled:
            lr = group.tensors("lr")[0]
            extra = [(_cast(1.0 - lr * weight_decay, dtype) if decay is None else decay)._value]
        else:
            extra = [weight_decay] if weight_decay else []
        return [*(t._value for t in scalars), group["eps"], *extra]

    return _fused_update(("adam", kind), (p, m, v), g, numbers, partial(_adam_graph, decay=kind))


def _fused_update(kind: tuple, state: tuple[Tensor, ...], g: Tensor,
                  numbers: Callable[[], list[Any]],
                  graph: Callable[..., tuple[list, list, list]]) -> bool:  # fmt: skip
    """Eagerly, an optimizer's update of a parameter and its state (`state`, the parameter
    first) from its gradient g as one fused kernel (`vocabulary.EAGER_GROUPS`): the same ops as
    the optimizer's, in its order (`graph(size, dtype)` builds them: inputs the state, g, then
    `numbers()` as 0-d values of p's dtype; outputs the new state), in one pass over the arrays
    where NumPy makes one per op. False, having done nothing, where the ops run: tracing, a
    dtype or an array the kernel does not take, a small parameter, the kernel still loading."""
    p = state[0]._value
    if not EAGER_GROUPS or p.__class__ is not np.ndarray or p.dtype not in (np.float32, np.float64):
        return False
    dtype, size = p.dtype, p.size

    def arrays() -> list[np.ndarray] | None:
        """The kernel's arrays (the state's flat views, written in place), or None."""
        values = [t._value for t in (*state, g)]
        if (
            any(a.__class__ is not np.ndarray or a.dtype != dtype or a.shape != p.shape
                or not a.flags.c_contiguous for a in values)
            or not all(map(array_target, state))
            or any(np.may_share_memory(values[-1], a) for a in values[:-1])
        ):  # fmt: skip
            return None
        flat = [a.reshape(size) for a in values]
        return [*flat, *(np.asarray(x, dtype) for x in numbers()), *flat[:-1]]

    key = (*kind, size, dtype.str)
    if not EAGER_GROUPS[0](key, size, lambda: graph(size, dtype), arrays):
        return False
    for t in state:
        t._version[0] += 1
    return True


def _graph(size: int, dtype: np.dtype, arrays: int, numbers: int) -> tuple[list, list, Callable]:
    """The inputs of an update's graph (`arrays` of `size` elements, then `numbers` 0-d), its
    node list, and `op(prim, *values)`, which appends a node and gives its result."""
    from tracegrad.core import ir

    inputs = [ir.Value((size,), dtype) for _ in range(arrays)]
    inputs += [ir.Value((), dtype) for _ in range(numbers)]
    nodes: list = []

    def op(prim: Any, *xs: ir.Value) -> ir.Value:
        out = ir.Value(max((x.shape for x in xs), key=len), dtype)
        nodes.append(ir.Node(prim, list(xs), [out], {}))
        return out

    return inputs, nodes, op


def _adam_graph(size: int, dtype: np.dtype, decay: str) -> tuple[list, list, list]:
    """Adam's update as a graph for `_fused_adam`: inputs p, m, v, g, the six scalars of
    `_update`, eps and (`decay` "decoupled" or "l2") AdamW's factor or the L2 coefficient;
    outputs the new p, m and v. The ops are `_update`'s, in its order (so eager rounds alike)."""
    from tracegrad.core import primitives as P

    inputs, nodes, op = _graph(size, dtype, 4, 7 + bool(decay))
    p, m, v, g, step_size, bc2, b1, c1, b2, c2, eps, *extra = inputs

    if decay == "decoupled":
        p = op(P.mul, p, extra[0])
    elif decay == "l2":
        g = op(P.add, g, op(P.mul, extra[0], p))
    m = op(P.add, op(P.mul, m, b1), op(P.mul, c1, g))
    v = op(P.add, op(P.mul, v, b2), op(P.mul, c2, op(P.mul, g, g)))
    denominator = op(P.add, op(P.div, op(P.sqrt, v), bc2), eps)
    p = op(P.sub, p, op(P.div, op(P.mul, step_size, m), denominator))
    return inputs, nodes, [p, m, v]


def _fused_sgd(p: Tensor, g: Tensor, buf: Tensor | None, lr: Tensor, group: ParamGroup) -> bool:
    """Eagerly, SGD's update of p (and its momentum buffer) as one fused kernel
    (`_fused_update`); False where the ops run (dampening too: its first step differs)."""
    if not group["momentum"]:
        buf = None  # a buffer left from a momentum since set to 0 is not the update's
    elif buf is None or group["dampening"]:
        return False
    weight_decay, nesterov = group["weight_decay"], bool(group["nesterov"])

    def numbers() -> list[Any]:
        momentum = [group.tensors("momentum", p.dtype)[0]._value] if buf is not None else []
        return [lr._value, *momentum, *([weight_decay] if weight_decay else [])]

    kind = ("sgd", buf is not None, nesterov, bool(weight_decay))
    state = (p,) if buf is None else (p, buf)
    return _fused_update(kind, state, g, numbers, partial(_sgd_graph, kind=kind))


def _sgd_graph(size: int, dtype: np.dtype, kind: tuple) -> tuple[list, list, list]:
    """SGD's update as a graph for `_fused_sgd`: inputs p, [the buffer], g, lr, [momentum],
    [weight decay]; outputs the new p [and buffer], by `SGD._update`'s ops in its order."""
    from tracegrad.core import primitives as P

    _, momentum, nesterov, decay = kind
    inputs, nodes, op = _graph(size, dtype, 2 + momentum, 1 + momentum + decay)
    (p, *buf, g), numbers = inputs[: 2 + momentum], iter(inputs[2 + momentum :])
    lr, mu, wd = next(numbers), next(numbers) if momentum else None, next(numbers, None)
    if decay:
        g = op(P.add, g, op(P.mul, wd, p))
    if momentum:
        buf = [op(P.add, op(P.mul, buf[0], mu), g)]
        g = op(P.add, g, op(P.mul, mu, buf[0])) if nesterov else buf[0]
    return inputs, nodes, [op(P.sub, p, op(P.mul, lr, g)), *buf]


def _weight_decay(p: Tensor, g: Tensor, lr: Tensor, group: ParamGroup,
                  decay: Tensor | None = None) -> Tensor:  # fmt: skip
    """The gradient with L2 weight decay added, or (decoupled, AdamW's) the parameter shrunk,
    by `decay` where the group's update computed it (1 - lr weight_decay, in p's dtype)."""
    weight_decay = group["weight_decay"]
    if weight_decay and group["decoupled_weight_decay"]:
        p *= _cast(1.0 - lr * weight_decay, p.dtype) if decay is None else decay
    elif weight_decay:
        g = g + weight_decay * p
    return g


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         foreach=foreach, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)  # fmt: skip


class RMSprop(Optimizer):
    """PyTorch's RMSprop: v = alpha v + (1 - alpha) g^2, step g / (sqrt(v) + eps), optionally
    centered (minus the mean gradient's square) and with momentum."""

    hyperparameters = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered", *OPTIONS)
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
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered,
                        **options(maximize, foreach, capturable, differentiable, None))  # fmt: skip
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

    hyperparameters = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
                       *OPTIONS)  # fmt: skip

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps,
                        **options(maximize, foreach, False, differentiable, fused))  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        if group["lr_decay"] < 0 or group["eps"] < 0 or group["initial_accumulator_value"] < 0:
            raise ValueError(f"Adagrad: invalid lr_decay, eps or accumulator in {dict(group)}")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        start = bfloat16.full(p.shape, group["initial_accumulator_value"], p.dtype)
        return {"step": Tensor._of(np.zeros((), np.float32)), "sum": Tensor._of(start)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        step, total = state["step"], state["sum"]
        step += 1.0
        total._assign(total + g * g)
        decay = 1.0 + (step.astype(np.float64) - 1.0) * group["lr_decay"]  # float64, as PyTorch
        lr = _cast(group.tensors("lr")[0] / decay, p.dtype)
        p -= lr * g / (sqrt(total) + group["eps"])


class Adadelta(Optimizer):
    """PyTorch's Adadelta: v = rho v + (1 - rho) g^2, delta = sqrt(u + eps) / sqrt(v + eps) g,
    u = rho u + (1 - rho) delta^2, p -= lr delta."""

    hyperparameters = ("lr", "rho", "eps", "weight_decay", *OPTIONS)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                        **options(maximize, foreach, capturable, differentiable, None))  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        if not 0.0 <= group["rho"] <= 1.0 or group["eps"] < 0 or group["weight_decay"] < 0:
            raise ValueError(f"Adadelta: invalid rho, eps or weight_decay in {dict(group)}")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {"step": _scalar(0.0), "square_avg": _zeros_like(p), "acc_delta": _zeros_like(p)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        rho, eps = group["rho"], group["eps"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        state["step"] += 1.0
        v, u = state["square_avg"], state["acc_delta"]
        v._assign(v * rho + (1.0 - rho) * (g * g))
        delta = sqrt(u + eps) / sqrt(v + eps) * g
        u._assign(u * rho + (1.0 - rho) * (delta * delta))
        p -= self.lr_for(p, group) * delta


class Adafactor(Optimizer):
    """PyTorch's Adafactor (Shazeer and Stern): the second moment of a matrix's gradient kept as
    a row and a column factor (their outer product over the rows' mean), decayed by
    1 - t^beta2_decay; steps of relative size min(lr, t^-1/2) times the parameter's RMS, the
    update's RMS clipped to `d`. Written in tensor ops (PyTorch reads `.item()`), so a compiled
    step holds it."""

    hyperparameters = ("lr", "beta2_decay", "eps", "d", "weight_decay", "foreach", "maximize")

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple[float | None, float] = (None, 1e-3), d: float = 1.0,
                 weight_decay: float = 0.0, *, foreach: bool | None = None,
                 maximize: bool = False) -> None:  # fmt: skip
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize)  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        eps1, eps2 = group["eps"]
        if group["beta2_decay"] > 0 or (eps1 is not None and eps1 < 0) or eps2 < 0:
            raise ValueError(f"Adafactor: invalid beta2_decay or eps in {dict(group)}")
        if group["d"] < 1.0 or group["weight_decay"] < 0:
            raise ValueError(f"Adafactor: invalid d or weight_decay in {dict(group)}")
        if any(p.dtype.kind == "c" for p in group["params"]):
            raise RuntimeError("Adafactor does not support complex parameters")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        if p.ndim <= 1:
            return {"step": _scalar(0.0), "variance": _zeros_like(p)}
        rows, cols = list(p.shape), list(p.shape)
        rows[-1], cols[-2] = 1, 1
        zeros = lambda shape: Tensor._of(np.zeros(shape, p.dtype))  # noqa: E731
        return {"step": _scalar(0.0), "row_var": zeros(rows), "col_var": zeros(cols)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        eps1, eps2 = group["eps"]
        eps1 = float(bfloat16.finfo(p.dtype).eps) if eps1 is None else eps1
        state["step"] += 1.0
        t = _cast(state["step"], np.float64)
        decay = _cast(t ** group["beta2_decay"], p.dtype)
        lr = self.lr_for(p, group)
        rho = _cast(minimum(_cast(lr, np.float64), t**-0.5), p.dtype)
        alpha = maximum((p * p).mean().sqrt(), eps2) * rho
        if group["weight_decay"]:
            p *= 1.0 - lr * group["weight_decay"]
        if p.ndim > 1:
            row, col = state["row_var"], state["col_var"]
            row._assign(row + ((g * g).mean(-1, keepdim=True) - row) * decay)
            col._assign(col + ((g * g).mean(-2, keepdim=True) - col) * decay)
            estimate = (row @ col) / clamp(row.mean(-2, keepdim=True), min=eps1)
        else:
            variance = state["variance"]
            variance._assign(variance + (g * g - variance) * decay)
            estimate = variance
        update = g / sqrt(clamp(estimate, min=eps1 * eps1))
        denominator = maximum((update * update).mean().sqrt() / group["d"], 1.0)
        p -= alpha / denominator * update


class Adamax(Optimizer):
    """PyTorch's Adamax: Adam with the infinity norm, u = max(beta2 u, |g| + eps), and the step
    lr / (1 - beta1^t) m / u."""

    hyperparameters = ("lr", "betas", "eps", "weight_decay", *OPTIONS)
    held = ("lr", "betas")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        **options(maximize, foreach, capturable, differentiable, None))  # fmt: skip
        super().__init__(params, defaults)

    _check = Adam._check

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {"step": _scalar(0.0), "exp_avg": _zeros_like(p), "exp_inf": _zeros_like(p)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        (beta1, beta2), (lr,), dtype = group.tensors("betas"), group.tensors("lr"), p.dtype
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        step, m, u = state["step"], state["exp_avg"], state["exp_inf"]
        step += 1.0
        m._assign(m + _cast(1.0 - beta1, dtype) * (g - m))
        u._assign(maximum(u * _cast(beta2, dtype), abs(g) + group["eps"]))
        clr = _cast(lr / (1.0 - beta1 ** step.astype(np.float64)), dtype)
        p -= clr * m / u


class NAdam(Optimizer):
    """PyTorch's NAdam: Adam with Nesterov momentum, whose coefficient mu_t = beta1 (1 - 0.5 *
    0.96^(t momentum_decay)) warms up; the product of the mu so far is state."""

    hyperparameters = ("lr", "betas", "eps", "weight_decay", "momentum_decay",
                       "decoupled_weight_decay", *OPTIONS)  # fmt: skip
    held = ("lr", "betas")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay,
                        **options(maximize, foreach, capturable, differentiable, None))  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        Adam._check(self, group)
        if group["momentum_decay"] < 0:
            raise ValueError(f"NAdam: invalid momentum_decay {group['momentum_decay']}")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {"step": _scalar(0.0), "mu_product": _scalar(1.0), "exp_avg": _zeros_like(p),
                "exp_avg_sq": _zeros_like(p)}  # fmt: skip

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        (beta1, beta2), (lr,), dtype = group.tensors("betas"), group.tensors("lr"), p.dtype
        step, mu_product = state["step"], state["mu_product"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        step += 1.0
        t = step.astype(np.float64)
        bias_correction2 = 1.0 - beta2**t
        g = _weight_decay(p, g, lr, group)
        decay = group["momentum_decay"]
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (t * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((t + 1.0) * decay))
        mu_product *= _cast(mu, mu_product.dtype)  # in its own dtype, as PyTorch's
        product = mu_product.astype(np.float64)
        m._assign(m + _cast(1.0 - beta1, dtype) * (g - m))
        v._assign(v * _cast(beta2, dtype) + _cast(1.0 - beta2, dtype) * (g * g))
        denom = sqrt(v / _cast(bias_correction2, dtype)) + group["eps"]
        p += _cast(-lr * (1.0 - mu) / (1.0 - product), dtype) * g / denom
        p += _cast(-lr * mu_next / (1.0 - product * mu_next), dtype) * m / denom


class RAdam(Optimizer):
    """PyTorch's RAdam: Adam whose adaptive step is rectified by the variance of the second
    moment's estimate, and plain momentum SGD for the first steps (while rho_t <= 5)."""

    hyperparameters = ("lr", "betas", "eps", "weight_decay", "decoupled_weight_decay", *OPTIONS)
    held = ("lr", "betas")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        decoupled_weight_decay=decoupled_weight_decay,
                        **options(maximize, foreach, capturable, differentiable, None))  # fmt: skip
        super().__init__(params, defaults)

    _check = Adam._check

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {"step": _scalar(0.0), "exp_avg": _zeros_like(p), "exp_avg_sq": _zeros_like(p)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        (beta1, beta2), (lr,), dtype = group.tensors("betas"), group.tensors("lr"), p.dtype
        step, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        step += 1.0
        t = step.astype(np.float64)
        g = _weight_decay(p, g, lr, group)
        m._assign(m + _cast(1.0 - beta1, dtype) * (g - m))
        v._assign(v * _cast(beta2, dtype) + _cast(1.0 - beta2, dtype) * (g * g))
        bias_correction1, bias_correction2 = 1.0 - beta1**t, 1.0 - beta2**t
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho_t = rho_inf - 2.0 * t * beta2**t / bias_correction2
        # the rectification is used only where rho_t > 5; elsewhere its square root (of a
        # negative number, maybe) is replaced before it is taken
        ratio = (
            (rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)
        )
        rectified = rho_t > 5.0
        rect = sqrt(where(rectified, ratio, 1.0))
        adaptive = _cast(sqrt(bias_correction2), dtype) / (sqrt(v) + group["eps"])
        update = where(rectified, _cast(rect, dtype) * adaptive, 1.0)
        p -= m / _cast(bias_correction1, dtype) * _cast(lr, dtype) * update


class Rprop(Optimizer):
    """PyTorch's Rprop: each element's step size grows by etas[1] while its gradient keeps its
    sign and shrinks by etas[0] when it flips (that step then skips it), within step_sizes; the
    parameter moves by its step size against the gradient's sign. The step sizes start at the
    lr of the first step (a warm-up scheduler may have set it after construction)."""

    hyperparameters = ("lr", "etas", "step_sizes", *OPTIONS)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        defaults = dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                        **options(maximize, foreach, capturable, differentiable, None))  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        group["etas"], group["step_sizes"] = tuple(group["etas"]), tuple(group["step_sizes"])
        if not 0.0 < group["etas"][0] < 1.0 < group["etas"][1]:
            raise ValueError(f"Rprop: invalid etas {group['etas']} (0 < etaminus < 1 < etaplus)")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        return {"step": _scalar(0.0), "prev": _zeros_like(p),
                "step_size": Tensor._of(bfloat16.full(p.shape, group["lr"], p.dtype))}  # fmt: skip

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        (etaminus, etaplus), (smallest, largest) = group["etas"], group["step_sizes"]
        step, prev, step_size = state["step"], state["prev"], state["step_size"]
        step += 1.0
        agreement = sign(g * prev)
        factor = where(agreement > 0, etaplus, where(agreement < 0, etaminus, 1.0))
        # PyTorch makes the step sizes at the first step, from the lr then: a tensor op here
        size = where(step == 1.0, self.lr_for(p, group), step_size)
        step_size._assign(clamp(size * factor.astype(p.dtype), smallest, largest))
        g = where(agreement < 0, 0.0, g).astype(p.dtype)  # a flipped sign: no step this time
        p -= sign(g) * step_size
        prev._assign(g)


class ASGD(Optimizer):
    """PyTorch's averaged SGD: p *= 1 - lambd eta, p -= eta g, then the average ax moves toward
    p by mu; eta = lr / (1 + lambd lr t)^alpha and mu = 1 / max(1, t - t0) are state, for the
    next step (so the first step uses eta = the lr then, mu = 1)."""

    hyperparameters = ("lr", "lambd", "alpha", "t0", "weight_decay", *OPTIONS)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        **options(maximize, foreach, capturable, differentiable, None))  # fmt: skip
        super().__init__(params, defaults)

    def _check(self, group: Mapping[str, Any]) -> None:
        if group["weight_decay"] < 0:
            raise ValueError(f"ASGD: invalid weight_decay {group['weight_decay']}")

    def _init_state(self, p: Tensor, group: Mapping[str, Any]) -> dict[str, Tensor]:
        # eta starts at the lr, as PyTorch's (which takes it at the first step)
        return {"step": _scalar(0.0), "eta": _scalar(group["lr"]), "mu": _scalar(1.0),
                "ax": _zeros_like(p)}  # fmt: skip

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], group: ParamGroup) -> None:
        lambd, dtype = group["lambd"], p.dtype
        step, eta, mu, ax = state["step"], state["eta"], state["mu"], state["ax"]
        step += 1.0
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        # the first step's eta is the lr then (PyTorch makes it at that step), in eta's dtype
        (lr,), t = group.tensors("lr"), step.astype(np.float64)
        first = _cast(_cast(lr, eta.dtype), np.float64)
        eta64 = where(step == 1.0, first, eta.astype(np.float64))  # read as a Python float
        p *= _cast(1.0 - lambd * eta64, dtype)
        p -= _cast(eta64, dtype) * g
        mu64 = mu.astype(np.float64)
        ax._assign(where(mu64 == 1.0, p, ax + (p - ax) * _cast(mu64, dtype)))
        eta._assign(lr / (1.0 + lambd * lr * t) ** group["alpha"])
        mu._assign(1.0 / maximum(t - group["t0"], 1.0))


class SparseAdam(Optimizer):
    """Not provided: PyTorch's SparseAdam updates only the rows a sparse gradient touches, and
    tracegrad's gradients are dense. It raises at construction, with what to use instead."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 maximize: bool = False):  # fmt: skip
        raise NotImplementedError(
            "SparseAdam is not provided by tracegrad: it needs sparse gradients (it updates only "
            "the rows an nn.Embedding(sparse=True) lookup touched), and tracegrad's gradients "
            "are dense. Use Adam (or AdamW) on the dense gradient: the same update, except "
            "that the moments of rows not looked up decay too"
        )


class LBFGS(Optimizer):
    """PyTorch's L-BFGS: each `step(closure)` runs up to max_iter quasi-Newton iterations on
    all parameters as one flat vector, with a fixed step (lr) or a strong-Wolfe line search,
    re-evaluating `closure` (which computes the loss and its gradients) as it goes. It runs
    eagerly, in NumPy: what it does next depends on the losses and gradients it gets (stopping
    tests, line search), so one traced plan cannot repeat it, and inside a traced step it
    refuses. Its state (the curvature history) is that of the first parameter, as PyTorch's."""

    hyperparameters = ("lr", "max_iter", "max_eval", "tolerance_grad", "tolerance_change",
                       "history_size", "line_search_fn")  # fmt: skip
    state_keys = ("func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag",
                  "prev_flat_grad", "prev_loss")  # fmt: skip

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)  # fmt: skip
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")

    def _check(self, group: Mapping[str, Any]) -> None:
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise ValueError(
                f"LBFGS: line_search_fn {group['line_search_fn']!r}: only 'strong_wolfe' or None"
            )

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        if any(isinstance(p, Tensor) and p.dtype.kind == "c" for p in params):
            raise TypeError("LBFGS: complex parameters are not provided (optimize their real "
                            "and imaginary parts as real parameters)")  # fmt: skip
        super().add_param_group({**group, "params": params})

    def _flat_grad(self) -> np.ndarray:
        return np.concatenate([np.zeros(p.size, p.dtype) if p.grad is None
                               else p.grad.numpy().reshape(-1) for p in self.params])  # fmt: skip

    def _add(self, step_size: Any, update: np.ndarray) -> None:
        offset = 0
        for p in self.params:
            n = p.size
            p._assign(
                Tensor._of(p.numpy() + step_size * update[offset : offset + n].reshape(p.shape))
            )
            offset += n

    def _set(self, values: list[np.ndarray]) -> None:
        for p, v in zip(self.params, values, strict=True):
            p._assign(Tensor._of(v))

    @no_grad()
    def step(self, closure: Any = None) -> Any:
        """Run up to max_iter iterations from the loss and gradients `closure` computes (grad
        enabled); returns the first loss, as PyTorch's."""
        if Listeners.tracers:
            raise TraceError(
                "LBFGS.step(closure) inside a traced step: L-BFGS calls the closure again and "
                "again and chooses what to do next (line search, stopping tests) from the loss's "
                "and gradient's values, so one traced plan cannot repeat it. Call "
                "opt.step(closure) eagerly, outside tracegrad.trace / torch.compile (the closure "
                "itself may call a traced function)"
            )
        if closure is None:
            raise ValueError("LBFGS.step needs a closure that computes the loss and its gradients")

        def evaluate() -> Any:
            with enable_grad():
                return closure()

        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        state = self.state[0]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = evaluate()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if np.abs(flat_grad).max() <= tolerance_grad:
            return orig_loss

        d, t = _array(state.get("d")), state.get("t")
        old_dirs = [_array(a) for a in state.get("old_dirs", [])]
        old_stps = [_array(a) for a in state.get("old_stps", [])]
        ro, H_diag = list(state.get("ro", [])), state.get("H_diag")  # noqa: N806
        prev_flat_grad, prev_loss = _array(state.get("prev_flat_grad")), state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            # the descent direction
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, H_diag = -flat_grad, [], [], [], 1  # noqa: N806
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys > 1e-10:  # curvature: update the memory
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / y.dot(y)  # noqa: N806 (the initial Hessian's scale)
                # the inverse Hessian approximation times the gradient (two-loop recursion)
                al = [None] * len(old_dirs)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q = q - al[i] * old_dirs[i]
                d = r = q * H_diag
                for i in range(len(old_dirs)):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss

            # the step length
            t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:  # the directional derivative is below tolerance
                break
            ls_func_evals = 0
            if line_search_fn is not None:
                x_init = [p.numpy().copy() for p in self.params]

                def obj_func(x: list[np.ndarray], t: Any, d: np.ndarray) -> tuple[float, Any]:
                    self._add(t, d)
                    f = float(evaluate())
                    g = self._flat_grad()
                    self._set(x)
                    return f, g

                loss, flat_grad, t, ls_func_evals = strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add(t, d)
                opt_cond = np.abs(flat_grad).max() <= tolerance_grad
            else:
                self._add(t, d)
                if n_iter != max_iter:  # not re-evaluated after the last iteration
                    loss = float(evaluate())
                    flat_grad = self._flat_grad()
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * t).max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break  # no progress

        state.update(d=Tensor._of(d), t=t, old_dirs=[Tensor._of(a) for a in old_dirs],
                     old_stps=[Tensor._of(a) for a in old_stps], ro=ro, H_diag=H_diag,
                     prev_flat_grad=Tensor._of(prev_flat_grad), prev_loss=prev_loss)  # fmt: skip
        return orig_loss

    def state_dict(self) -> dict[str, Any]:
        """As Optimizer's, with the history's lists copied (PyTorch's keys: "func_evals",
        "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad",
        "prev_loss"), all under parameter 0."""
        state = {k: list(v) if isinstance(v, list) else v for k, v in self.state[0].items()}
        return {"state": {0: state} if state else {}, "param_groups": self._saved_groups()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        saved, groups = _pytorch_layout(state_dict, 1)
        entry = saved.get(0, saved.get("0", {})) if saved else {}
        unknown = set(entry) - {*self.state_keys, "al"}  # "al": PyTorch's scratch buffer
        if unknown:
            raise ValueError(f"LBFGS.load_state_dict: unknown state {sorted(unknown)}")
        hyper = {k: v for k, v in groups[0].items() if k != "params"} if groups else {}
        unknown = self._unknown_keys(hyper)
        if unknown:
            raise ValueError(f"LBFGS.load_state_dict: unknown hyperparameters {sorted(unknown)}")
        self.state[0].clear()
        self.state[0].update(
            {k: [Tensor._of(np.array(_array(a))) for a in v] if k in ("old_dirs", "old_stps")
             else Tensor._of(np.array(_array(v))) if k in ("d", "prev_flat_grad") else
             list(v) if isinstance(v, list) else v for k, v in entry.items() if k != "al"}
        )  # fmt: skip
        for k, v in hyper.items():
            self.param_groups[0][k] = _plain(v)


def _array(x: Any) -> Any:
    """A state tensor's array (None stays None): LBFGS computes in NumPy."""
    return x.numpy() if isinstance(x, Tensor) else x


from tracegrad.optim import lr_scheduler, swa_utils  # noqa: E402, F401 (as in PyTorch)

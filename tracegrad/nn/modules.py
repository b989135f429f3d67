"""`Module`, `Parameter` and the layers PyTorch and MegEngine users expect.

Parameters are `Parameter`s (or any leaf tensor with `requires_grad=True`), registered (like
submodules) when assigned as attributes. Loading a state dict, and converting a module's dtype,
write into the existing parameter tensors, so an optimizer (or a traced step) that holds them
keeps seeing the loaded values.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.errors import TraceError, user_location
from tracegrad.frontend import random, sharing, torch_checkpoint
from tracegrad.frontend.autodiff import RemovableHandle, edge
from tracegrad.frontend.device import require_cpu, split_meta, to_arguments
from tracegrad.frontend.dtypes import torch_dtype
from tracegrad.frontend.function import Function
from tracegrad.frontend.mutation import zero_grads
from tracegrad.frontend.scopes import module_scope
from tracegrad.frontend.tensor import Listeners, Tensor, get_default_dtype
from tracegrad.frontend.torch_function import disabled_torch_function_impl
from tracegrad.frontend.tracer import (
    names_read,
    set_in_step,
    watch,
    watch_place,
    watch_python_values,
)
from tracegrad.nn import functional as F

_generator = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed the generator behind parameter initialization and the default random state that
    unseeded Dropout layers draw from (eagerly and in traced steps alike)."""
    global _generator
    _generator = np.random.default_rng(seed)
    random.manual_seed(seed)


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter when it is assigned as an attribute
    (PyTorch's `nn.Parameter`), also with `requires_grad=False` (a frozen parameter). It shares
    `data`'s array; ops on it give plain tensors, as in PyTorch."""

    __torch_function__ = disabled_torch_function_impl  # results are plain tensors (PyTorch's)

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True):
        if data is None:
            data = np.empty(0, get_default_dtype())
        if isinstance(data, Tensor) and data.is_symbolic:
            raise TraceError(
                "nn.Parameter: cannot make a parameter of a value computed inside @trace; "
                "create parameters before the traced step"
            )
        self._init(data, None, requires_grad)
        if isinstance(data, Tensor):
            self._version = data._version  # an alias of `data`, as in PyTorch

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


torch_checkpoint.PARAMETER = Parameter  # checkpoints write and rebuild parameters as such


def _received_parameter(value: np.ndarray, requires_grad: bool) -> Parameter:
    return Parameter(value, requires_grad)


sharing.send_shared(Parameter, _received_parameter)  # a parameter another process sent


class Buffer(Tensor):
    """PyTorch's `nn.Buffer(data, persistent=True)`: assigned to a module attribute, it is
    registered as a buffer (`register_buffer`), in `state_dict` unless not `persistent`."""

    __torch_function__ = disabled_torch_function_impl  # results are plain tensors (PyTorch's)

    __slots__ = ("persistent",)

    def __init__(self, data: Any = None, *, persistent: bool = True):
        self._init(np.empty(0, get_default_dtype()) if data is None else data, None, False)
        self.persistent = persistent


sharing.send_shared(Buffer)


def init_generator() -> np.random.Generator:
    """The generator parameter initialization draws from (`manual_seed` seeds it). Not while
    a step is traced: a layer built (or re-initialized) inside the step would draw its weights
    once, when traced, and every call would reuse them where eager draws afresh."""
    if Listeners.tracers:
        raise TraceError(
            "a layer's weights are drawn inside the traced step (a layer built in forward, or "
            f"nn.init at {user_location()}): a plan would reuse the numbers drawn while tracing "
            "at every call, where eager draws new ones; build the layer outside the step (in "
            "__init__)"
        )
    return _generator


def empty_parameter(*shape: int) -> Parameter:
    """A parameter of `shape` in the default dtype, for `reset_parameters` to fill (zeros until
    then, where PyTorch's `torch.empty` holds whatever the memory held)."""
    return Parameter(np.zeros(shape, get_default_dtype()))


def inverse_sqrt(n: int) -> float:
    """1 / sqrt(n), or 0 for n = 0: the bound of PyTorch's default initialization (kaiming
    uniform with a = sqrt(5) reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)))."""
    return 1.0 / math.sqrt(n) if n else 0.0


def reset_uniform(bound: float, *tensors: Tensor | None) -> None:
    """Draw each tensor (None skipped), in turn, from U(-bound, bound), in place: the same
    tensors keep the new values, as `nn.init.uniform_` writes them (and with its numbers)."""
    for t in tensors:
        if t is not None:
            t._assign(Tensor._of(init_generator().uniform(-bound, bound, t.shape)))


def reset_affine(weight: Tensor | None, bias: Tensor | None = None) -> None:
    """A norm's scale to ones and its shift to zeros, in place (`nn.init.ones_`/`zeros_`)."""
    for t, value in ((weight, 1.0), (bias, 0.0)):
        if t is not None:
            t._assign(Tensor._of(bfloat16.full(t.shape, value, t.dtype)))


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return (
            f"IncompatibleKeys(missing_keys={self.missing_keys}, "
            f"unexpected_keys={self.unexpected_keys})"
        )


def _with_factory_keywords(init: Callable) -> Callable:
    """`init` also taking `device` and `dtype`, by keyword or as PyTorch's signatures place them,
    after the layer's own arguments (`super().__init__(n_in, n_out, bias, device, dtype)`): the
    layer is built as usual, then moved there (the CPU only) and its floating parameters and
    buffers converted."""
    params = list(inspect.signature(init).parameters.values())[1:]
    if any(p.name in ("dtype", "device") or p.kind is p.VAR_POSITIONAL for p in params):
        return init
    own = len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])

    @functools.wraps(init)
    def __init__(self: Module, *args: Any, device: Any = None, dtype: Any = None,
                 **kwargs: Any) -> None:  # fmt: skip
        args, extra = args[:own], args[own:]
        if (
            len(extra) > 2
            or (len(extra) > 0 and device is not None)
            or (len(extra) > 1 and dtype is not None)
        ):
            raise TypeError(f"{type(self).__name__}: {own + len(extra)} positional arguments "
                            f"for {own} and device, dtype")  # fmt: skip
        device = extra[0] if extra else device
        dtype = extra[1] if len(extra) > 1 else dtype
        init(self, *args, **kwargs)
        if device is not None or dtype is not None:
            self.to(*(a for a in (device, dtype) if a is not None))

    return __init__


_SETTINGS = (bool, int, float, str)  # attribute types a trace reads as constants: guarded
_CONFIG_ENTRIES = 64  # a dict or plain object with more entries is data, not settings


def _watch_settings(module: Module) -> None:
    """While tracing: guard the settings of the module and of every module below it
    (`_watch_own_settings`), once a trace: a forward may reach a submodule without calling it
    (nflib's flows run `flow.forward(x)`: ActNorm's flag that gates its data-dependent init is
    two levels down)."""
    if not Listeners.tracers:
        return
    walked = Listeners.tracers[-1].walked
    for m in module.modules():
        if id(m) not in walked:
            walked.add(id(m))
            _watch_own_settings(m)


def _watch_own_settings(module: Module) -> None:
    """While tracing: guard the numbers, flags and strings among the module's attributes, the
    NumPy arrays its class's methods name, and the settings among the entries of the dicts and
    plain objects it holds (`self.config.dropout`, `self.opts["scale"]`): its forward may read
    any of them, and the trace bakes them in; `training` without a warning when it changes
    (switching modes is no surprise). Its parameters, buffers, submodules and other tensors must
    be the ones the trace read (not replaced since, unless by the step itself)."""
    owner = type(module).__name__
    read = _class_reads(type(module))
    for name, value in vars(module).items():
        if isinstance(value, Tensor | tuple):  # a mask, a hidden state: the same one, or followed
            watch_place(vars(module), name, f"{owner}.{name}")
            continue
        if name == "training":
            watch((id(module), name), f"{owner}.training", lambda: module.training, warn=False)
            continue
        if type(value) in _SETTINGS or isinstance(value, np.ndarray) and name in read:
            watch_place(module, name, f"{owner}.{name}")  # one the step changes is put back
            continue
        hook = getattr(type(value), "__tracegrad_watch__", None)
        if hook is not None and not isinstance(value, Module):  # it knows what a trace reads
            hook(value)
            continue
        entries = _config_entries(value)
        for key, entry in entries.items() if len(entries) <= _CONFIG_ENTRIES else ():
            if type(entry) in _SETTINGS:
                get = (functools.partial(value.get, key) if isinstance(value, dict)
                       else functools.partial(getattr, value, key, None))  # fmt: skip
                watch((id(value), key), f"{owner}.{name}[{key!r}]", get)
    for registry in (module._parameters, module._buffers, module._modules):
        for name in registry:
            watch_place(registry, name, f"{owner}.{name}")


@functools.lru_cache(maxsize=1024)
def _class_reads(cls: type) -> frozenset[str]:
    """The names a module class's own methods read (not `Module`'s): an array attribute none
    of them names is data the module holds (a replay buffer), not one its forward reads."""
    own = [f for c in cls.__mro__ if c not in Module.__mro__ for f in vars(c).values()]
    return names_read(*own)


def _config_entries(value: Any) -> dict:
    """A dict's items, or a plain object's attributes (a config: a dataclass, a namespace);
    none for modules, tensors, functions, classes and anything else."""
    if type(value) is dict:
        return value
    if isinstance(value, Module | Tensor | type) or callable(value):
        return {}
    return getattr(value, "__dict__", {})


# `Module.compile`'s compiler, `(module, fullgraph=, backend=) -> calls`: the runtime's, which
# sits above nn and puts it here when it loads
MODULE_COMPILER: list[Callable[..., Callable[[tuple, dict], Any]]] = []


class _Registry(dict):
    """A module's parameters (buffers, submodules) by name. Each is also the module's attribute
    of that name, read at attribute speed (`Module._keep`), so writing here is what `module.name`
    reads next, as in PyTorch (accelerate's loader writes `module._parameters[name]`)."""

    __slots__ = ("owner",)

    def __init__(self, owner: Module, entries: Any = ()) -> None:
        super().__init__(entries)
        self.owner = owner

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        self.owner._keep(name, value)

    def __reduce__(self) -> tuple:
        # pickle sets a dict subclass's items before its attributes (no owner yet): rebuilt
        # whole instead (the owner's attributes come back with its own state)
        return type(self), (self.owner, dict(self))

    def __delitem__(self, name: str) -> None:
        self._forget(name)
        super().__delitem__(name)

    def pop(self, name: str, *default: Any) -> Any:
        self._forget(name)
        return super().pop(name, *default)

    def popitem(self) -> tuple[str, Any]:
        if not self:
            raise KeyError("popitem(): dictionary is empty")
        name = next(reversed(self))
        return name, self.pop(name)

    def clear(self) -> None:
        for name in list(self):
            self._forget(name)
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self[name] = default
        return self[name]

    def __ior__(self, other: Any) -> _Registry:
        self.update(other)
        return self

    def _forget(self, name: str) -> None:
        """The attribute goes with the entry (if it still is the entry)."""
        attrs = self.owner.__dict__
        if name in self and name in attrs and attrs[name] is dict.__getitem__(self, name):
            del attrs[name]


_REGISTRIES = ("_parameters", "_buffers", "_modules")


def _loads_itself(module: Module) -> bool:
    """Its class overrides PyTorch's per-module load (`_load_from_state_dict`)."""
    return type(module)._load_from_state_dict is not Module._load_from_state_dict


def _at_level(key: str, prefix: str, module: Module, own: Any = ()) -> bool:
    """`key` is under `prefix` and names no submodule of `module` (nor one of `own`): one of
    the module's own entries, as PyTorch tells a module's unexpected keys."""
    first = key[len(prefix) :].split(".", 1)[0] if key.startswith(prefix) else None
    return first is not None and first not in module._modules and first not in own


class Module:
    """Base class: subclasses set parameters and submodules as attributes and define `forward`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """tracegrad's own layers take PyTorch's factory keywords (`nn.Linear(4, 2,
        device="cpu", dtype=torch.float64)`, as `factory_kwargs` code passes them)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and cls.__module__.startswith("tracegrad.nn"):
            cls.__init__ = _with_factory_keywords(init)

    def __init__(self) -> None:
        for registry in _REGISTRIES:
            object.__setattr__(self, registry, _Registry(self))
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            if isinstance(value, Tensor | Module):  # a plain value may come first, as in PyTorch
                raise AttributeError(f"cannot assign '{name}' before Module.__init__(): call "
                                     "super().__init__() first")  # fmt: skip
            object.__setattr__(self, name, value)
            return
        if isinstance(value, Buffer):  # PyTorch 2.5's spelling of register_buffer
            self.register_buffer(name, Tensor._wrap(value._value), value.persistent)
            return
        # a dict keeps a key's place when it is assigned again: `model.conv1 = Conv2d(...)`
        # stays where conv1 was in children() and state_dict(), as in PyTorch
        # None in a submodule's place keeps the place, as in PyTorch (`add_module(name, None)`,
        # a ModuleList of optional layers): it stays counted and numbered, holding nothing
        is_module = isinstance(value, Module) or (value is None and name in self._modules)
        # only a Parameter is one, as in PyTorch: a plain tensor that requires grad is an
        # attribute (d2l's scratch models keep their weights so and hand them to their own SGD)
        is_parameter = isinstance(value, Parameter)
        if not is_parameter or name in self._buffers:
            self._parameters.pop(name, None)
        if not is_module or name in self._buffers:
            self._modules.pop(name, None)
        if name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"buffer '{name}' must be a Tensor or None, not {type(value)}")
            self._buffers[name] = value
        elif is_module:
            self._modules[name] = value
        elif is_parameter:
            self._parameters[name] = value
        else:
            object.__setattr__(self, name, value)

    def _keep(self, name: str, value: Any) -> None:
        """A registered parameter, buffer or submodule is also a plain attribute (read at
        attribute speed), unless the class defines `__getattr__`: PyTorch keeps them out of the
        instance's dict, so every read of one reaches that `__getattr__` (pyro's PyroModule
        registers its parameters with pyro there)."""
        if type(self).__getattr__ is Module.__getattr__:
            object.__setattr__(self, name, value)
        else:
            self.__dict__.pop(name, None)

    def __getstate__(self) -> dict[str, Any]:
        """The attributes, registries as plain dicts (a checkpoint of a whole module names no
        class of tracegrad's internals)."""
        state = dict(self.__dict__)
        state.update((r, dict(state[r])) for r in _REGISTRIES if isinstance(state.get(r), dict))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for r in _REGISTRIES:
            if isinstance(state.get(r), dict):
                object.__setattr__(self, r, _Registry(self, state[r]))

    def __getattr__(self, name: str) -> Any:
        """For names not found as attributes: what was registered (tracegrad keeps it as an
        attribute too, unless a subclass defines `__getattr__`, `_keep`), else PyTorch's
        message. Code that calls it itself (`self.__getattr__(f"level_{i}")`, pytorch-cifar's
        DLA) finds what was registered."""
        for registry in ("_parameters", "_buffers", "_modules"):
            found = self.__dict__.get(registry, {})
            if name in found:
                return found[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        registered = [r for r in (self._parameters, self._modules, self._buffers) if name in r]
        for registry in registered:
            del registry[name]  # the attribute goes with it
        if name in self.__dict__ or not registered:
            object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """PyTorch's spelling of `self.name = param` (None leaves the attribute None)."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"register_parameter: '{name}' must be an nn.Parameter or None, "
                f"not {type(param).__name__}"
            )
        setattr(self, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """State that is not a parameter (batch norm's running statistics): in `state_dict`
        unless not `persistent`; a traced step that writes it in place writes it back."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot register a buffer before Module.__init__()")
        if tensor is not None and not isinstance(tensor, Tensor):
            tensor = Tensor._of(tensor)
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers_set.add(name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    # None (the class's) until a hook is registered on this module, or on every module
    _hooks: _Hooks | None = None

    # the module's compiled calls once `compile()` ran (None, the class's, until then)
    _compiled: Callable[[tuple, dict], Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._hooks is None and self._compiled is None and not Listeners.tracers:
            return self.forward(*args, **kwargs)  # the common case: one read each
        if self._compiled is not None:
            return self._compiled(args, kwargs)
        return self.call_uncompiled(*args, **kwargs)

    def __tracegrad_watch__(self) -> None:
        """Reached by a traced step through Python state (a global, a dict): guard its settings,
        parameters and submodules, as when it is called (`_watch_settings`)."""
        _watch_settings(self)

    def call_uncompiled(self, *args: Any, **kwargs: Any) -> Any:
        """The call as if `compile()` had not run: hooks and forward (what the compiled calls
        trace, and run where they fall back to eager)."""
        if self._hooks is None and not Listeners.tracers:
            return self.forward(*args, **kwargs)
        if not Listeners.tracers:
            return _call_with_hooks(self, args, kwargs)
        # a traced step bakes in what `training` selects, which hooks ran and the Python
        # numbers, flags and strings of the module's attributes (a temperature, a `causal`
        # flag) that its forward may read: guard them all (`_watch_settings`)
        watch(_Hooks, "the modules' forward hooks", lambda: _Hooks.version, warn=False)
        _watch_settings(self)
        watch_python_values(self.forward)  # and what its forward reads from globals
        Listeners.tracers[-1].remember(self)  # its attributes' tensors, before it runs
        with module_scope(self):  # the nodes made inside know their module path
            if self._hooks is None:
                return self.forward(*args, **kwargs)
            return _call_with_hooks(self, args, kwargs)

    def compile(
        self, *, fullgraph: bool = False, dynamic: Any = None, backend: Any = "inductor",
        mode: Any = None, options: Any = None, disable: bool = False,
    ) -> None:  # fmt: skip
        """PyTorch's in-place `torch.compile(module)`: from now on calls of this module run
        compiled plans (those of `torch.compile(module)`, with its options), while the module
        keeps its class and its `state_dict` keys."""
        if not disable:
            compiled = MODULE_COMPILER[0](self, fullgraph=fullgraph, backend=backend)
            object.__setattr__(self, "_compiled", compiled)

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Call `hook(module, args)` (or `hook(module, args, kwargs)` with_kwargs) before each
        forward; what it returns, if not None, replaces the arguments (a tuple, or one value;
        with_kwargs an (args, kwargs) pair), as PyTorch's."""
        return self._own_hooks().add(_Hooks.PRE, hook, prepend, with_kwargs, False)

    def register_full_backward_pre_hook(self, hook: Callable[..., Any], prepend: bool = False
                                        ) -> RemovableHandle:  # fmt: skip
        """Call `hook(module, grad_output)` when the cotangents of the module's outputs are
        known; a tuple it returns replaces them."""
        return self._own_hooks().add(_Hooks.BACKWARD_PRE, hook, prepend, False, False)

    def register_full_backward_hook(self, hook: Callable[..., Any], prepend: bool = False
                                    ) -> RemovableHandle:  # fmt: skip
        """Call `hook(module, grad_input, grad_output)` when the gradients with respect to the
        module's tensor inputs are computed (None for inputs that need none); a tuple it returns
        replaces grad_input. Traced, the hooks run while the step traces (what they compute
        joins the plan; their Python side effects are not repeated at each call)."""
        return self._own_hooks().add(_Hooks.BACKWARD, hook, prepend, False, False)

    register_backward_hook = register_full_backward_hook  # PyTorch's deprecated, less exact one

    def register_forward_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:  # fmt: skip
        """Call `hook(module, args, output)` (or `hook(module, args, kwargs, output)`) after
        each forward; what it returns, if not None, replaces the output. `always_call` hooks
        also run when forward raises (with output None), before the error propagates. In a
        traced step hooks run while it traces: what they compute joins the plan, but their
        Python side effects (a dict of features) are not repeated at each call."""
        return self._own_hooks().add(_Hooks.POST, hook, prepend, with_kwargs, always_call)

    # PyTorch's registries, handle id -> hook in calling order (copies: read only; captum reads
    # `_backward_hooks` before adding its own)
    _forward_pre_hooks = property(lambda self: self._registered(_Hooks.PRE))
    _forward_hooks = property(lambda self: self._registered(_Hooks.POST))
    _backward_pre_hooks = property(lambda self: self._registered(_Hooks.BACKWARD_PRE))
    _backward_hooks = property(lambda self: self._registered(_Hooks.BACKWARD))

    def _registered(self, kind: int) -> dict[int, Callable[..., Any]]:
        hooks = self.__dict__.get("_hooks")
        return {} if hooks is None else {k: v[0] for k, v in hooks.registry(kind).items()}

    def _own_hooks(self) -> _Hooks:
        if "_hooks" not in self.__dict__:
            object.__setattr__(self, "_hooks", _Hooks(self))
        return self._hooks

    # --- traversal -------------------------------------------------------------------------
    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first in registration order: a shared one
        once, or (remove_duplicate=False) under every name that reaches it."""
        seen: set[int] = set() if memo is None else memo

        def walk(module: Module, path: str) -> Iterator[tuple[str, Module]]:
            if remove_duplicate:
                if id(module) in seen:
                    return
                seen.add(id(module))
            yield path, module
            for name, child in module.named_children():
                yield from walk(child, f"{path}.{name}" if path else name)

        return walk(self, prefix)

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def add_module(self, name: str, module: Module | None) -> None:
        """PyTorch's spelling of `self.name = module` (names made in a loop)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {type(module).__name__} is not a Module")
        if not isinstance(name, str) or "." in name or not name:
            raise KeyError(f"add_module: module name {name!r} must be a non-empty string "
                           "without '.'")  # fmt: skip
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign a module before Module.__init__()")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module  # not through __setattr__, as PyTorch's (PyroModule's
        # __setattr__ calls add_module)

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The submodule at a dotted path ("" is the module itself), as named_modules names it."""
        module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no submodule {part!r} (looking "
                                     f"up {target!r})")  # fmt: skip
            module = child
        return module

    def get_parameter(self, target: str) -> Tensor:
        return self._member(target, "parameter", lambda m: m._parameters)

    def get_buffer(self, target: str) -> Tensor:
        return self._member(target, "buffer", lambda m: m._buffers)

    def _member(self, target: str, kind: str, registry: Callable) -> Tensor:
        """The parameter or buffer at a dotted path ("conv0.weight")."""
        owner, _, name = target.rpartition(".")
        module = self.get_submodule(owner)
        if name not in registry(module):
            raise AttributeError(f"{type(module).__name__} has no {kind} {name!r}")
        return registry(module)[name]

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def named_children(self) -> Iterator[tuple[str, Module]]:
        return ((name, m) for name, m in self._modules.items() if m is not None)

    def apply(self, fn: Any) -> Module:
        """Call `fn` on every submodule, then on this module (PyTorch's order); returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the parameters' gradients, or zero them in place with set_to_none=False (an
        alias of `p.grad` sees the zeros, as in PyTorch and as the optimizers' `zero_grad`)."""
        zero_grads(self.parameters(), set_to_none)

    def share_memory(self) -> Module:
        """Move parameters, buffers and gradients into shared memory, so that processes the
        module is handed to train one copy (Hogwild): `sharing`."""
        for t in (*self.parameters(), *self.buffers()):
            t.share_memory_()
            if t.grad is not None:
                t.grad.share_memory_()
        return self

    def _named_members(
        self, members: Callable[[Module], dict[str, Any]], prefix: str, recurse: bool,
        remove_duplicate: bool,
    ) -> Iterator[tuple[str, Tensor]]:  # fmt: skip
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        seen: set[int] = set()
        for path, module in modules:
            for name, t in members(module).items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{path}.{name}" if path else name), t

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """("0.weight", tensor) pairs, recursive, in registration order; a shared parameter once,
        under the first name that reaches it (unless remove_duplicate=False)."""
        return self._named_members(lambda m: m._parameters, prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        return self._named_members(lambda m: m._buffers, prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        return (b for _, b in self.named_buffers(recurse=recurse))

    # --- state -----------------------------------------------------------------------------
    def state_dict(self, *args: Any, destination: dict[str, Any] | None = None,
                   prefix: str = "", keep_vars: bool = False) -> dict[str, Any]:  # fmt: skip
        """Parameter (and buffer) name -> a detached tensor sharing its data (as in PyTorch;
        with keep_vars=True, the parameters themselves), in `destination` if given (PyTorch's
        older positional order: destination, prefix, keep_vars). A shared (tied) parameter
        appears under every name that reaches it, all sharing one array. `prefix` is put before
        each name. A module whose class defines `get_extra_state` adds what it returns under
        "_extra_state", after its own tensors; each module's state-dict pre-hooks run before
        its entries, its post-hooks after its submodules' (they may edit the dict). Each
        submodule's own `state_dict` collects its entries, as in PyTorch, so a class that
        overrides it (torchmetrics' metrics) adds what it keeps."""
        if args:
            destination, prefix, keep_vars = (*args, *(destination, prefix, keep_vars)[len(args) :])
        if destination is None:
            destination = collections.OrderedDict()
        hooks = self.__dict__.get("_state_hooks", {})
        for hook in list(hooks.get(_SAVE_PRE, {}).values()):
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, child in self._modules.items():
            if child is not None:
                child.state_dict(destination=destination, prefix=f"{prefix}{name}.",
                                 keep_vars=keep_vars)  # fmt: skip
        for hook in list(hooks.get(_SAVE_POST, {}).values()):
            hook(self, destination, prefix, {})
        return destination

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str,
                            keep_vars: bool) -> None:  # fmt: skip
        """This module's own entries (not its submodules'), as PyTorch's."""
        for name, t in self._own_state().items():
            destination[prefix + name] = t if keep_vars else t.detach()
        if _has_extra_state(self):
            destination[prefix + _EXTRA_STATE] = self.get_extra_state()

    def _own_state(self) -> dict[str, Tensor]:
        state = dict(self._parameters)
        state.update((name, b) for name, b in self._buffers.items()
                     if b is not None and name not in self._non_persistent_buffers_set)  # fmt: skip
        return state

    def get_extra_state(self) -> Any:
        """What a subclass adds to `state_dict` as "_extra_state" (any picklable value); a
        subclass that defines it defines `set_extra_state` too, which `load_state_dict` calls."""
        raise RuntimeError(
            "Reached a code path in Module.get_extra_state() that should never be called: "
            f"{type(self).__name__} does not define get_extra_state"
        )

    def set_extra_state(self, state: Any) -> None:
        """Take back what `get_extra_state` returned (from `load_state_dict`)."""
        raise RuntimeError(
            "Reached a code path in Module.set_extra_state() that should never be called: "
            f"{type(self).__name__} does not define set_extra_state"
        )

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> IncompatibleKeys:  # fmt: skip
        """Copy `state` into the existing parameters (and give each module that defines
        `set_extra_state` its "_extra_state"); with `assign`, make `state`'s tensors the
        module's own instead (their dtypes too; a parameter keeps its `requires_grad`), as
        PyTorch's (a model made under `torch.device("meta")`). Checks everything before writing
        anything, unless a module has a load-state-dict post-hook: then, as PyTorch does, the
        hooks see (and may edit) the missing and unexpected keys after the write, and `strict`
        checks what is left.
        Each module's load pre-hooks run first, with a copy of its entries that they may edit.

        A tied parameter is found under each of its names, as PyTorch's: `strict` wants all of
        them; with strict=False one of them is enough (the others are reported missing); when
        the copies in `state` differ, the one under the name `state_dict()` lists last wins."""
        metadata = getattr(state, "_metadata", None)
        state = dict(state)
        modules = list(self.named_modules(remove_duplicate=False))
        hooks = [(f"{path}." if path else "", m, m.__dict__.get("_state_hooks", {}))
                 for path, m in modules]  # fmt: skip
        errors: list[str] = []
        for prefix, module, registry in hooks:
            if registry.get(_LOAD_PRE):  # a submodule's hooks see its entries, as PyTorch's
                own = {k: v for k, v in state.items() if k.startswith(prefix)}
                for hook in list(registry[_LOAD_PRE].values()):
                    hook(module, own, prefix, {}, strict, [], [], errors)
                state = {k: v for k, v in state.items() if not k.startswith(prefix)} | own
        # a module whose class loads its entries itself (torchmetrics' metrics) gets them, as
        # PyTorch gives them, after the others are checked and written
        custom = [(prefix, m) for prefix, m, _ in hooks if _loads_itself(m)]
        targets = {prefix + name: t for prefix, m, _ in hooks if not _loads_itself(m)
                   for name, t in m._own_state().items()}  # fmt: skip
        extras = {prefix + _EXTRA_STATE: m for prefix, m, _ in hooks
                  if _has_extra_state(m) and not _loads_itself(m)}  # fmt: skip
        missing = [k for k in (*targets, *extras) if k not in state]
        unexpected = [k for k in state if k not in targets and k not in extras
                      and not any(_at_level(k, prefix, m) for prefix, m in custom)]  # fmt: skip
        values = {k: v if isinstance(v, Tensor) else Tensor._of(np.asarray(v))  # traced: symbolic
                  for k, v in state.items() if k in targets}  # fmt: skip
        problems = errors + [
            f"shape mismatch for '{k}': checkpoint {v.shape}, model {targets[k].shape}"
            for k, v in values.items()
            if v.shape != targets[k].shape
        ]
        post = [(m, r[_LOAD_POST]) for _, m, r in hooks if r.get(_LOAD_POST)]
        if strict and not post:
            problems += _key_problems(missing, unexpected)
        if problems:
            raise RuntimeError(f"{type(self).__name__}.load_state_dict: " + "; ".join(problems))
        for k, target in targets.items():  # in the model's order: the last tied copy wins
            if k in values and assign:
                self._replace(k, target, values[k])
            elif k in values:
                target._assign(values[k])
        for k, module in extras.items():
            if k in state:
                module.set_extra_state(state[k])
        for prefix, module in custom:
            local = dict((metadata or {}).get(prefix[:-1], {}))
            local.update({"assign_to_params_buffers": True} if assign else {})
            entries = {k: v for k, v in state.items() if k.startswith(prefix)}
            module._load_from_state_dict(entries, prefix, local, True, missing, unexpected, errors)
        if errors:
            raise RuntimeError(f"{type(self).__name__}.load_state_dict: " + "; ".join(errors))
        keys = IncompatibleKeys(missing, unexpected)
        for module, registry in post:
            for hook in list(registry.values()):
                hook(module, keys)
        if strict and (problems := _key_problems(missing, unexpected)):
            raise RuntimeError(f"{type(self).__name__}.load_state_dict: " + "; ".join(problems))
        return keys

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str,
                              local_metadata: dict, strict: bool, missing_keys: list[str],
                              unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:  # fmt: skip
        """PyTorch's load of this module's own entries (keys under `prefix`, not its
        submodules'): what an override calls through `super()` once it took its own keys.
        `load_state_dict` loads the modules that do not override it itself, checking all of
        them before writing any."""
        own = self._own_state()
        for name, t in own.items():
            key = prefix + name
            if key not in state_dict:
                missing_keys.extend([key] if strict else [])
                continue
            value = state_dict[key]
            value = value if isinstance(value, Tensor) else Tensor._of(np.asarray(value))
            if value.shape != t.shape:
                error_msgs.append(f"shape mismatch for '{key}': checkpoint {value.shape}, model "
                                  f"{t.shape}")  # fmt: skip
            elif local_metadata.get("assign_to_params_buffers"):
                self._replace(name, t, value)
            else:
                t._assign(value)
        extra = prefix + _EXTRA_STATE
        if _has_extra_state(self) and extra in state_dict:
            self.set_extra_state(state_dict[extra])
        elif _has_extra_state(self) and strict:
            missing_keys.append(extra)
        if strict:
            unexpected_keys.extend(k for k in state_dict if k != extra and
                                   _at_level(k, prefix, self, own))  # fmt: skip

    def _replace(self, key: str, old: Tensor, new: Tensor) -> None:
        """The tensor under `key` becomes `new` itself (`load_state_dict(assign=True)`)."""
        path, _, name = key.rpartition(".")
        if isinstance(old, Parameter):
            new = Parameter(new, requires_grad=old.requires_grad)
        setattr(self.get_submodule(path), name, new)

    def register_state_dict_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call `hook(module, prefix, keep_vars)` before `state_dict` collects this module's
        entries."""
        return self._add_state_hook(_SAVE_PRE, hook)

    def register_state_dict_post_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call `hook(module, state_dict, prefix, local_metadata)` once this module's entries
        (and its submodules') are in `state_dict`; it may edit the dict in place."""
        return self._add_state_hook(_SAVE_POST, hook)

    def register_load_state_dict_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call `hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)` before `load_state_dict` loads: it may edit `state_dict`
        (rename an old checkpoint's keys); a message it appends to error_msgs fails the load."""
        return self._add_state_hook(_LOAD_PRE, hook)

    def _register_load_state_dict_pre_hook(
        self, hook: Callable[..., None], with_module: bool = False
    ) -> RemovableHandle:
        """PyTorch's older, private spelling (older checkpoint-upgrading code calls it): the hook
        takes no module unless `with_module`."""
        if not with_module:
            hook = functools.partial(_without_module, hook)
        return self._add_state_hook(_LOAD_PRE, hook)

    def register_load_state_dict_post_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call `hook(module, incompatible_keys)` after `load_state_dict` wrote the values; it
        may remove keys from `incompatible_keys.missing_keys` and `.unexpected_keys` (before
        `strict` checks them)."""
        return self._add_state_hook(_LOAD_POST, hook)

    def _add_state_hook(self, kind: str, hook: Callable[..., None]) -> RemovableHandle:
        if "_state_hooks" not in self.__dict__:
            object.__setattr__(self, "_state_hooks", {})
        registry = self._state_hooks.setdefault(kind, {})
        handle = RemovableHandle(registry)
        registry[handle.id] = hook
        return handle

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """Put `module` at the dotted path `target` ("block.0.conv"), replacing what is there;
        with `strict`, only an existing submodule is replaced."""
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        owner, _, name = target.rpartition(".")
        parent = self.get_submodule(owner)
        if strict and not hasattr(parent, name):
            raise AttributeError(f"{type(parent).__name__} has no attribute `{name}`")
        if hasattr(parent, name) and not isinstance(getattr(parent, name), Module):
            raise AttributeError(f"`{name}` is not an nn.Module")
        setattr(parent, name, module)

    def to_empty(self, *, device: Any = None, recurse: bool = True) -> Module:
        """PyTorch's move of a module built on the meta device to memory: tracegrad's tensors
        always have memory (on the CPU), so they stay, and answer `device` cpu from now on."""
        to_arguments(f"{type(self).__name__}.to_empty", (() if device is None else (device,)),
                     {})  # fmt: skip
        for t in itertools.chain(self.parameters(recurse), self.buffers(recurse)):
            t.__dict__.pop("_meta", None)
        return self

    # PyTorch's switch for Module.__init__ calling super().__init__() with extra arguments
    call_super_init: bool = False

    # --- dtype and device ------------------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Module:
        """PyTorch's module.to(dtype), .to("cpu"), .to(device, dtype), .to(tensor) (its dtype):
        floating parameters and buffers are converted in place (see `type`). The CPU is the
        only device: any other raises ValueError, but "meta", which marks the parameters and
        buffers as meta tensors (a template for `functional_call`, as PyTorch's ensembles
        make one)."""
        meta, args, kwargs = split_meta(args, kwargs)
        if meta:
            for t in (*self.parameters(), *self.buffers()):
                t._meta = True
        dtype = to_arguments(f"{type(self).__name__}.to", args, kwargs)
        if dtype is None:
            return self
        if not torch_dtype(dtype).is_floating_point:
            raise TypeError(
                f"{type(self).__name__}.to only accepts floating point dtypes, but got {dtype}"
            )
        return self._convert(dtype, _floating)

    def type(self, dst_type: Any) -> Module:
        """Convert every parameter and buffer (integer ones too, as PyTorch's) to `dst_type`, in
        place: the same tensors hold the new arrays (and gradients), so optimizers and traced
        steps that hold them keep working (a traced step traces again for the new dtype)."""
        return self._convert(np.dtype(dst_type), lambda t: True)

    def double(self) -> Module:
        return self._convert(np.dtype(np.float64), _floating)

    def float(self) -> Module:
        return self._convert(np.dtype(np.float32), _floating)

    def half(self) -> Module:
        """float16 parameters. The ops run in NumPy's float16, with no Numba kernels (a traced
        step computes the same as eager, without the kernels' speed)."""
        return self._convert(np.dtype(np.float16), _floating)

    def bfloat16(self) -> Module:
        """bfloat16 parameters: their bits, to save or convert back (no arithmetic here)."""
        return self._convert(BFLOAT16, _floating)

    def cpu(self) -> Module:
        return self

    def cuda(self, device: Any = None) -> Module:
        require_cpu("cuda" if device is None else f"cuda:{device}", f"{type(self).__name__}.cuda")
        return self

    def _convert(self, dtype: np.dtype, which: Callable[[Tensor], bool]) -> Module:
        if Listeners.tracers:  # a plan would not repeat it: it would happen once, while tracing
            raise TraceError(
                f"{type(self).__name__}: converting parameters to {dtype} inside @trace is not "
                "supported; convert the module before the traced step"
            )
        tensors = {id(t): t for t in (*self.parameters(), *self.buffers())}
        for t in tensors.values():
            if which(t) and t.dtype != dtype:
                _cast_in_place(t, dtype)
        return self

    def train(self, mode: bool = True) -> Module:
        """Set this module's mode, then each child's through its own `train`, as PyTorch's: a
        class that overrides it runs (gpytorch's variational strategy drops its cached factor
        on `eval()`; a frozen batch norm stays in eval)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        object.__setattr__(self, "training", mode)
        # inside a traced step (a step that starts with model.train(), evaluation between
        # calls): the flag is the step's doing, not a guard, and each call sets it again
        set_in_step(
            (id(self), "training"), functools.partial(object.__setattr__, self, "training", mode)
        )
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    # --- repr ------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        """PyTorch's: the extra_repr on one line when it is all, else each line and child
        indented on lines of their own."""
        extra = self.extra_repr().split("\n") if self.extra_repr() else []
        children = [f"({name}): " + repr(m).replace("\n", "\n  ")
                    for name, m in self._modules.items()]  # fmt: skip
        return _framed(type(self).__name__, extra, children)


def _framed(name: str, extra: list[str], children: list[str]) -> str:
    """`name(...)` around PyTorch's repr lines: one extra line alone inline, else one per line."""
    if len(extra) == 1 and not children:
        return f"{name}({extra[0]})"
    lines = extra + children
    return f"{name}(" + ("\n  " + "\n  ".join(lines) + "\n" if lines else "") + ")"


_EXTRA_STATE = "_extra_state"
_SAVE_PRE, _SAVE_POST, _LOAD_PRE, _LOAD_POST = "save_pre", "save_post", "load_pre", "load_post"


def _has_extra_state(module: Module) -> bool:
    """Whether the module's class defines `get_extra_state` (then state_dict holds it)."""
    return type(module).get_extra_state is not Module.get_extra_state


def _without_module(hook: Callable[..., None], module: Module, *args: Any) -> None:
    hook(*args)


def _key_problems(missing: list[str], unexpected: list[str]) -> list[str]:
    return [f"missing key '{k}'" for k in missing] + [f"unexpected key '{k}'" for k in unexpected]


class _Hooks:
    """A module's forward hooks (or, owner None, those of every module: the global ones), each
    id -> (hook, with_kwargs, always_call), in calling order. `version` counts every change
    anywhere: a traced step watches it, so that adding or removing a hook traces again."""

    PRE, POST, BACKWARD_PRE, BACKWARD = 0, 1, 2, 3
    version = 0

    def __init__(self, module: Module | None) -> None:
        self.module = module
        self.pre: dict[int, tuple[Callable, bool, bool]] = {}
        self.post: dict[int, tuple[Callable, bool, bool]] = {}
        self.backward_pre: dict[int, tuple[Callable, bool, bool]] = {}
        self.backward: dict[int, tuple[Callable, bool, bool]] = {}

    def registry(self, kind: int) -> dict[int, tuple[Callable, bool, bool]]:
        return (self.pre, self.post, self.backward_pre, self.backward)[kind]

    def add(self, kind: int, hook: Callable, prepend: bool, with_kwargs: bool,
            always_call: bool) -> RemovableHandle:  # fmt: skip
        registry = self.registry(kind)
        handle = RemovableHandle(registry, self.changed)
        registry[handle.id] = (hook, with_kwargs, always_call)
        if prepend:
            rest = [(k, v) for k, v in registry.items() if k != handle.id]
            registry.clear()
            registry[handle.id] = (hook, with_kwargs, always_call)
            registry.update(rest)
        self.changed()
        return handle

    def changed(self) -> None:
        """After an add or a remove: a module without hooks (of its own, or global ones) takes
        `Module.__call__`'s fast path again."""
        _Hooks.version += 1
        empty = not (self.pre or self.post or self.backward_pre or self.backward)
        if self.module is None:
            Module._hooks = None if empty else _GLOBAL_HOOKS  # seen by modules without their own
        elif empty and self.module.__dict__.get("_hooks") is self:
            object.__delattr__(self.module, "_hooks")


_GLOBAL_HOOKS = _Hooks(None)


class _BackwardHooks:
    """One call's full backward hooks (PyTorch's `BackwardHook`): identity Functions around the
    tensor inputs and outputs catch their cotangents. The outputs' arrive first: the pre-hooks
    may replace them; the inputs' then go to the hooks with them, which may replace those."""

    def __init__(self, module: Module, hooks: _Hooks) -> None:
        self.module, self.hooks = module, hooks
        self.grad_output: tuple = ()
        self.count, self.slots = 0, []

    def wrap_inputs(self, args: tuple) -> tuple:
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tracked = [i for i in positions if edge(args[i]) is not None]
        self.count, self.slots = len(positions), [positions.index(i) for i in tracked]
        if not tracked:
            return args
        wrapped = list(args)
        for i, t in zip(tracked, _Identity.apply(self, "in", *[args[i] for i in tracked]),
                        strict=True):  # fmt: skip
            wrapped[i] = t
        return tuple(wrapped)

    def wrap_outputs(self, output: Any) -> Any:
        many = isinstance(output, tuple | list)
        outs = list(output) if many else [output]
        tracked = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and edge(o) is not None]
        if not tracked:
            return output
        for i, t in zip(tracked, _Identity.apply(self, "out", *[outs[i] for i in tracked]),
                        strict=True):  # fmt: skip
            outs[i] = t
        return type(output)(outs) if many else outs[0]

    def outputs_done(self, grads: tuple) -> tuple:
        for hook, _, _ in list(self.hooks.backward_pre.values()):
            result = hook(self.module, grads)
            grads = grads if result is None else tuple(result)
        self.grad_output = grads
        if not self.slots:  # no input needs a gradient: the hooks run now, without one
            self._run((None,) * self.count)
        return grads

    def inputs_done(self, grads: tuple) -> tuple:
        grad_input = [None] * self.count
        for slot, g in zip(self.slots, grads, strict=True):
            grad_input[slot] = g
        grad_input = self._run(tuple(grad_input))
        return tuple(grad_input[slot] for slot in self.slots)

    def _run(self, grad_input: tuple) -> tuple:
        for hook, _, _ in list(self.hooks.backward.values()):
            result = hook(self.module, grad_input, self.grad_output)
            grad_input = grad_input if result is None else tuple(result)
        return grad_input


class _Identity(Function):
    """Passes tensors on unchanged; their cotangents go through `_BackwardHooks`."""

    @staticmethod
    def forward(ctx: Any, run: _BackwardHooks, side: str, *tensors: Tensor) -> tuple:
        ctx.run, ctx.side = run, side
        return tensors

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple:
        done = ctx.run.outputs_done if ctx.side == "out" else ctx.run.inputs_done
        return (None, None, *done(grads))


def register_module_forward_pre_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """A forward pre-hook of every module, called before the module's own (PyTorch's
    `torch.nn.modules.module.register_module_forward_pre_hook`)."""
    return _GLOBAL_HOOKS.add(_Hooks.PRE, hook, False, False, False)


def register_module_forward_hook(
    hook: Callable[..., Any], *, with_kwargs: bool = False, always_call: bool = False
) -> RemovableHandle:
    """A forward hook of every module, called before the module's own (PyTorch's
    `torch.nn.modules.module.register_module_forward_hook`)."""
    return _GLOBAL_HOOKS.add(_Hooks.POST, hook, False, with_kwargs, always_call)


def _call_with_hooks(module: Module, args: tuple, kwargs: dict) -> Any:
    """PyTorch's `Module._call_impl`: the global pre-hooks, then the module's; forward; the
    global forward hooks, then the module's (and, if forward raises, the `always_call` ones)."""
    own = module.__dict__.get("_hooks")
    hooks = [_GLOBAL_HOOKS] if own is None else [_GLOBAL_HOOKS, own]
    for registry in [h.pre for h in hooks]:
        for hook, with_kwargs, _ in list(registry.values()):
            if with_kwargs:
                result = hook(module, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple of (new_args, "
                            f"new_kwargs), but got {result!r}"
                        )
                    args, kwargs = result
            else:
                result = hook(module, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
    posts = [entry for h in hooks for entry in list(h.post.values())]
    backward = _BackwardHooks(module, own) if own and (own.backward or own.backward_pre) else None
    if backward is not None:
        args = backward.wrap_inputs(args)
    output, called = None, set()
    try:
        output = module.forward(*args, **kwargs)
        for i, (hook, with_kwargs, _) in enumerate(posts):
            called.add(i)
            result = hook(module, args, kwargs, output) if with_kwargs else \
                hook(module, args, output)  # fmt: skip
            if result is not None:
                output = result
        if backward is not None:
            output = backward.wrap_outputs(output)
    except Exception:
        for i, (hook, with_kwargs, always_call) in enumerate(posts):
            if always_call and i not in called:
                try:
                    result = hook(module, args, kwargs, output) if with_kwargs else \
                        hook(module, args, output)  # fmt: skip
                    output = output if result is None else result
                except Exception as e:  # PyTorch warns and re-raises the first error
                    warnings.warn(f"forward hook {hook!r} raised after forward did: {e!r}",
                                  stacklevel=2)  # fmt: skip
        raise
    return output


def _cast_in_place(t: Tensor, dtype: np.dtype) -> None:
    """Give `t` (and its gradient) a copy of its array in `dtype`: PyTorch's `param.data = ...`."""
    t._value = bfloat16.cast(t._value, dtype)
    t._version[0] += 1
    if t.grad is not None:
        t.grad = Tensor._of(bfloat16.cast(t.grad.numpy(), dtype))


def _floating(t: Tensor) -> bool:
    return t.dtype.is_floating_point


class FunctionLayer(Module):
    """A layer that calls its `function` (one of `functional`'s) on its inputs with the options
    it was built with: PyTorch's losses and parameter-free activations. The options are plain
    attributes of PyTorch's names (`loss.reduction`, `act.inplace`; a loss's class weights too,
    not a parameter), read at each call, so that setting one later takes effect."""

    function: Any = None

    def __init__(self, **options: Any) -> None:
        super().__init__()
        object.__setattr__(self, "option_names", tuple(options))
        for name, value in options.items():
            object.__setattr__(self, name, value)

    def forward(self, *inputs: Any) -> Any:
        return type(self).function(*inputs, **{k: getattr(self, k) for k in self.option_names})

    def extra_repr(self) -> str:
        """PyTorch's: its class's `repr_format` of the options (with `{inplace}` and
        `{inplace_alone}`: `inplace_note`'s), or, without one, every option set."""
        fmt = getattr(type(self), "repr_format", None)
        options = {k: getattr(self, k) for k in self.option_names}
        if fmt is not None:
            notes = {"inplace": inplace_note(self), "inplace_alone": inplace_note(self, True)}
            return fmt.format(**{**options, **notes})
        return ", ".join(f"{k}={v!r}" for k, v in options.items() if v is not None)


class Linear(Module):
    """y = x @ weight.T + bias, weight of shape (out, in); PyTorch's default initialization."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = empty_parameter(out_features, in_features)
        self.bias = empty_parameter(out_features) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's: weight, then bias, from U(-1/sqrt(in), 1/sqrt(in)) (kaiming uniform with
        a = sqrt(5), which reduces to that)."""
        reset_uniform(inverse_sqrt(self.weight.shape[1]), self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


def renumber(module: Module, names: Iterable[str], values: list[Any]) -> None:
    """`module` holds `values` as "0", "1", ... in place of what it held under `names`: a
    container's numbering after a delete or an insert, as PyTorch's (and so `state_dict`'s)."""
    for name in list(names):
        delattr(module, name)
    for i, value in enumerate(values):
        module.add_module(str(i), value)


class Sequential(Module):
    """Applies its layers in order; they are registered as "0", "1", ... (as in PyTorch), or
    under their names when given as one (ordered) dict."""

    def __init__(self, *layers: Module):
        super().__init__()
        named = len(layers) == 1 and isinstance(layers[0], Mapping)  # an empty one too: `s[:0]`
        pairs = layers[0].items() if named else ((str(i), m) for i, m in enumerate(layers))
        for i, (name, layer) in enumerate(pairs):
            if not isinstance(layer, Module):
                kind = "function" if callable(layer) else type(layer).__name__
                raise TypeError(f"Sequential: layer {i} is a {kind}, not a Module")
            setattr(self, name, layer)

    def forward(self, x: Any) -> Any:
        for layer in self._modules.values():
            x = layer(x)
        return x

    def __getitem__(self, i: int | slice) -> Module:
        """A layer, or a slice of them as a Sequential keeping their names (`model[:-1]`)."""
        if isinstance(i, slice):
            return type(self)(dict(list(self._modules.items())[i]))
        return list(self._modules.values())[self._index(i)]

    def __setitem__(self, i: int, layer: Module) -> None:
        setattr(self, self._name_at(i), layer)

    def __delitem__(self, i: int | slice) -> None:
        """As PyTorch's: the layers left are numbered again by place."""
        layers = list(self._modules.values())
        del layers[i if isinstance(i, slice) else self._index(i)]
        renumber(self, self._modules, layers)

    def _name_at(self, i: int) -> str:
        return list(self._modules)[self._index(i)]

    def _index(self, i: int) -> int:
        if not -len(self) <= i < len(self):
            raise IndexError(f"Sequential: index {i} is out of range for {len(self)} layers")
        return i % len(self)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, layer: Module) -> Sequential:
        self.add_module(str(len(self)), layer)
        return self

    def extend(self, layers: Iterable[Module]) -> Sequential:
        for layer in layers:
            self.append(layer)
        return self

    def insert(self, index: int, layer: Module) -> Sequential:
        """PyTorch's: the layers from `index` on move one place up (numbered by place)."""
        layers = list(self._modules.values())
        layers.insert(index, layer)
        renumber(self, self._modules, layers)
        return self

    def pop(self, i: int | slice) -> Module:
        layer = self[i]
        del self[i]
        return layer

    def __add__(self, other: Sequential) -> Sequential:
        """A new Sequential of this one's layers, then `other`'s (the same modules)."""
        return Sequential(*self._sequential("add", other), *other)

    def __iadd__(self, other: Sequential) -> Sequential:
        self._sequential("add", other)
        return self.extend(list(other))

    def __mul__(self, times: int) -> Sequential:
        """A new Sequential of this one's layers `times` over (the same modules, as PyTorch's:
        they share their parameters)."""
        return Sequential(*(list(self) * self._factor(times)))

    __rmul__ = __mul__

    def __imul__(self, times: int) -> Sequential:
        return self.extend(list(self) * (self._factor(times) - 1))

    def _sequential(self, op: str, other: Any) -> list[Module]:
        if not isinstance(other, Sequential):
            raise ValueError(f"{op} operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")  # fmt: skip
        return list(self)

    def _factor(self, times: Any) -> int:
        if not isinstance(times, int) or isinstance(times, bool):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(times)}")
        if times <= 0:
            raise ValueError(f"Non-positive multiplication factor {times} for {type(self)}")
        return times


def inplace_note(module: Module, alone: bool = False) -> str:
    """What PyTorch's reprs say of `inplace`: nothing unless it is set."""
    if not getattr(module, "inplace", False):
        return ""
    return "inplace=True" if alone else ", inplace=True"


class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x, self.inplace)

    def extra_repr(self) -> str:
        return inplace_note(self, alone=True)


class GELU(Module):
    """GELU: exact (erf) by default, or `approximate="tanh"`, as PyTorch's."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class LayerNorm(Module):
    """Normalizes over the trailing `normalized_shape` axes, with a learned scale and shift."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True):  # fmt: skip
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape, self.eps = tuple(shape), eps
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = empty_parameter(*self.normalized_shape)
        if elementwise_affine and bias:
            self.bias = empty_parameter(*self.normalized_shape)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        affine = self.weight is not None
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={affine}, "
                f"bias={self.bias is not None}")  # fmt: skip


class Dropout(Module):
    """Zeroes each element with probability `p` in training and scales the rest by 1/(1-p).

    The mask is drawn from a random state tensor (frontend.random): the default one, or one of
    its own when `seed` is given. A traced step reads and advances that state, so each call
    draws a fresh mask, and a traced run draws the same masks as an eager run with the same
    seed."""

    def __init__(self, p: float = 0.5, inplace: bool = False, *, seed: int | None = None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], not {p}")
        self.p, self.inplace = p, inplace
        self.random_state = None if seed is None else random.new_state(seed)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.inplace, state=self.random_state)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"

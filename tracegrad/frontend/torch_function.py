"""PyTorch's `__torch_function__` protocol for Tensor subclasses: a subclass that overrides it
sees each torch function and Tensor method called with one of its instances (a logging tensor,
torchvision's tv_tensors, PyG's index tensors), and by default results keep the subclass.

Dispatching costs a scan of every call's arguments, so the dispatching wrappers are installed
only when the first subclass defined outside tracegrad appears; until then calls go straight to
the ops. tracegrad's own subclasses (Parameter, the `.data` alias, ...) never dispatch, as
PyTorch's Parameter does not."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from tracegrad.core.vocabulary import Primitive
from tracegrad.frontend.functions import as_subclass
from tracegrad.frontend.tensor import Tensor


class _State:
    disabled = 0  # inside a default __torch_function__ (or DisableTorchFunctionSubclass)
    installed = False
    replaced: list[tuple[Any, str, Any]] = []  # (owner, name, what it held before)
    classes: set[type] = set()  # the users' subclasses: a call asks only these


class DisableTorchFunctionSubclass:
    """Inside, calls do not dispatch to subclasses' `__torch_function__`."""

    def __enter__(self) -> DisableTorchFunctionSubclass:
        _State.disabled += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        _State.disabled -= 1


def disabled_torch_function_impl(func: Callable, types: Any, args: tuple = (),
                                 kwargs: dict | None = None) -> Any:  # fmt: skip
    """A class's `__torch_function__` that does not dispatch (Parameter's): results stay plain
    tensors."""
    with DisableTorchFunctionSubclass():
        return func(*args, **(kwargs or {}))


def default_torch_function(cls: type, func: Callable, types: tuple, args: tuple = (),
                           kwargs: dict | None = None) -> Any:  # fmt: skip
    """Tensor's own: run `func` without dispatching, and make tensor results instances of
    `cls`."""
    if not all(issubclass(cls, t) for t in types):
        return NotImplemented
    with DisableTorchFunctionSubclass():
        return _convert(func(*args, **(kwargs or {})), cls)


def _convert(result: Any, cls: type) -> Any:
    if cls is Tensor:
        return result
    if isinstance(result, Tensor):
        return result if isinstance(result, cls) else as_subclass(result, cls)
    if isinstance(result, tuple | list):
        parts = [_convert(r, cls) for r in result]
        return result._make(parts) if hasattr(result, "_make") else type(result)(parts)
    return result


def _own_implementation(cls: type) -> Callable | None:
    """The function behind a user's subclass's `__torch_function__` (None for a class of
    tracegrad's, which never dispatches)."""
    if cls not in _State.classes:
        return None
    impl = cls.__torch_function__
    return getattr(impl, "__func__", impl)


def _dispatches(cls: type) -> bool:
    """Whether instances of `cls` take part: a user's subclass whose `__torch_function__` is
    not the disabled one (asked when met: a class's method may change after it is made)."""
    impl = _own_implementation(cls)
    return impl is not None and impl is not disabled_torch_function_impl


def overrides(cls: type) -> bool:
    """Whether a user's subclass answers calls its own way (neither Tensor's default, which
    only keeps the class, nor the disabled one)."""
    impl = _own_implementation(cls)
    return impl is not None and impl not in (default_torch_function, disabled_torch_function_impl)


def overloaded(args: tuple, kwargs: dict) -> list[type]:
    """The classes to ask, in argument order but each subclass before its parents (a list or
    tuple argument's items too: `torch.cat`); none inside a disabled block."""
    found: list[type] = []
    if _State.disabled:
        return found
    for arg in (*args, *kwargs.values()) if kwargs else args:
        for a in arg if type(arg) is list or type(arg) is tuple else (arg,):
            cls = type(a)
            if cls not in found and _dispatches(cls):
                at = next((i for i, f in enumerate(found) if issubclass(cls, f)), len(found))
                found.insert(at, cls)
    return found


def dispatch(func: Callable, found: list[type], args: tuple, kwargs: dict) -> Any:
    """`func` called through the `__torch_function__` of the classes `found`: the first
    answer other than NotImplemented."""
    classes = tuple(found)
    for cls in found:
        result = cls.__torch_function__(func, classes, args, kwargs)
        if result is not NotImplemented:
            return result
    raise TypeError(f"no implementation found for '{getattr(func, '__name__', func)}' on types "
                    f"that implement __torch_function__: {list(classes)}")  # fmt: skip


class _Dispatching:
    """What stands in for a function or method once subclasses dispatch: it asks their
    `__torch_function__` first. It equals the function it wraps (and hashes alike), so that a
    set of functions a library built before any subclass existed (torchvision's
    `_FORCE_TORCHFUNCTION_SUBCLASS`) still finds it; as a class attribute it binds as a
    method."""

    def __init__(self, f: Callable) -> None:
        self.f = f
        self.__name__ = getattr(f, "__name__", getattr(f, "name", "?"))  # a primitive: its op's
        self.__qualname__ = getattr(f, "__qualname__", self.__name__)
        self.__module__ = getattr(f, "__module__", None)
        self.__doc__ = getattr(f, "__doc__", None)
        if isinstance(f, types.FunctionType):  # its signature (a primitive has none)
            self.__wrapped__ = f

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        found = overloaded(args, kwargs)
        return dispatch(self, found, args, kwargs) if found else self.f(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __eq__(self, other: Any) -> bool:
        return other is self or other is self.f

    def __hash__(self) -> int:
        return hash(self.f)

    def __repr__(self) -> str:
        return repr(self.f)

    def __reduce__(self) -> Any:
        """Pickled by name where its module holds it (a function in the module defining it),
        else as the function it wraps, wrapped again when loaded."""
        held = getattr(sys.modules.get(self.__module__), self.__name__, None)
        return self.__name__ if held is self else (_wrapper, (self.f,))


# where the namespaces' functions that are not ops live: transforms, grad modes, settings,
# compilation, saving (PyTorch's do not dispatch either: `torch.vmap is torch.func.vmap`)
_NOT_OPS = frozenset({
    "tracegrad", "tracegrad.core.errors", "tracegrad.frontend.autodiff",
    "tracegrad.frontend.device", "tracegrad.frontend.grad_manager",
    "tracegrad.frontend.promotion", "tracegrad.frontend.serialization",
    "tracegrad.frontend.sharing", "tracegrad.frontend.tensor", "tracegrad.frontend.tracer",
    "tracegrad.frontend.transforms", "tracegrad.torch", "tracegrad.torch._environment",
    "tracegrad.torch._support", "tracegrad.torch.autograd", "tracegrad.torch.random",
    "tracegrad.torch.utils.dlpack",
})  # fmt: skip


def _an_op(value: Any) -> bool:
    """A primitive of the op table (which the namespaces hold as they are) or a function of
    tracegrad's that computes on tensors: what a dispatching wrapper stands in for."""
    if isinstance(value, Primitive):
        return True
    home = getattr(value, "__module__", "") or ""
    return isinstance(value, types.FunctionType) and home.startswith("tracegrad.") and \
        home not in _NOT_OPS and not home.startswith("tracegrad.runtime")  # fmt: skip


# Tensor's methods that are Python's protocols, not ops: they do not dispatch (nor in PyTorch)
_PROTOCOL = frozenset({
    "__getattr__", "__array_ufunc__", "__array_function__", "__dlpack__", "__dlpack_device__",
    "__repr__", "__format__", "__len__", "__iter__", "__bool__", "__index__", "__int__",
    "__float__", "__complex__", "__hash__", "__deepcopy__", "__reduce_ex__", "__contains__",
})  # fmt: skip

# What PyTorch never dispatches though it takes tensors (`torch.overrides.
# get_ignored_functions()`): a subclass's own `clone` calls `self.as_subclass(Tensor)` (fastai's
# TensorBase), which must not come back to it.
_IGNORED = frozenset({
    "as_subclass", "new", "new_empty", "new_empty_strided", "new_full", "new_ones",
    "new_tensor", "new_zeros", "stride", "as_tensor", "asarray", "from_numpy", "rand_like",
    "randn_like", "randint_like", "is_tensor", "is_storage", "result_type", "can_cast",
    "promote_types", "typename",
})  # fmt: skip


_WRAPPERS: dict[Any, Callable] = {}  # each function or primitive -> its dispatching wrapper


def _namespaces() -> list[types.ModuleType]:
    """tracegrad's and `tracegrad.torch`'s function namespaces, as loaded (`tracegrad.linalg`
    is the module object `tracegrad.frontend.linalg`)."""
    found = []
    for root in filter(None, (sys.modules.get("tracegrad"), sys.modules.get("tracegrad.torch"))):
        for path in ("", "nn.functional", "linalg", "fft", "special"):
            module = root
            for part in filter(None, path.split(".")):
                module = getattr(module, part, None)
            if isinstance(module, types.ModuleType) and module not in found:
                found.append(module)
    return found


def install() -> None:
    """Put dispatching wrappers in place of Tensor's methods and the functions of tracegrad's
    torch-shaped namespaces (one wrapper per function, so `torch.add is tracegrad.add`)."""
    if _State.installed:
        return
    _State.installed = True
    from tracegrad.frontend.methods import METHODS

    own = [
        n
        for n, v in vars(Tensor).items()
        if type(v) is types.FunctionType and n[0] != "_" and v.__module__.startswith("tracegrad.")
    ]  # (not a method a library patched in)
    for name in dict.fromkeys([*METHODS, *own]):  # the op table's and Tensor's own (detach)
        method = vars(Tensor).get(name)
        if (name in own or _an_op(method)) and name not in _PROTOCOL and name not in _IGNORED:
            _replace(Tensor, name, _wrapper(method))
    wrap_namespaces()


def wrap_namespaces() -> None:
    """Once installed, the namespaces loaded so far dispatch (`tracegrad.torch` calls this as
    it finishes importing, in case a subclass came first)."""
    if not _State.installed:
        return
    for module in _namespaces():
        for name, value in list(vars(module).items()):
            if _an_op(value) and not name.startswith("_") and name not in _IGNORED:
                _replace(module, name, _wrapper(value))


def uninstall() -> None:
    """Back to calls going straight to the ops (for tests that define subclasses)."""
    for owner, name, before in reversed(_State.replaced):
        setattr(owner, name, before)
    _State.replaced.clear()
    _State.installed = False


def _replace(owner: Any, name: str, value: Any) -> None:
    _State.replaced.append((owner, name, vars(owner)[name]))
    setattr(owner, name, value)


def pickled_by_wrapper(f: Any) -> tuple | None:
    """A reduction for a function taken before its module held its wrapper, which pickle can
    no longer find by name there (its wrapper's name is what loads it back)."""
    wrapper = _WRAPPERS.get(f) if isinstance(f, types.FunctionType) else None
    held = getattr(sys.modules.get(f.__module__ or ""), f.__name__, None) if wrapper else None
    return (unwrapped, (wrapper,)) if wrapper and held is wrapper else None


def unwrapped(f: Any) -> Any:
    """The function a dispatching wrapper stands in for (anything else as it is): what tools
    that name functions by identity (torch.fx's generated code) look at."""
    return f.f if isinstance(f, _Dispatching) else f


def _wrapper(f: Callable) -> Callable:
    if isinstance(f, _Dispatching):
        return f
    if f not in _WRAPPERS:
        _WRAPPERS[f] = _Dispatching(f)
    return _WRAPPERS[f]


def _on_subclass(cls: type, **kwargs: Any) -> None:
    """A new Tensor subclass: the first of a user's that dispatches installs the wrappers."""
    if not cls.__module__.startswith("tracegrad."):
        _State.classes.add(cls)
    if _dispatches(cls):
        install()


Tensor.__torch_function__ = classmethod(default_torch_function)
Tensor.__init_subclass__ = classmethod(_on_subclass)

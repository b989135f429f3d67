"""`torch.library`: registering operators and their kernels with PyTorch's dispatcher.
tracegrad has no dispatcher (`torch.ops`): a fake (meta) implementation is recorded and its
function returned, so that a package registering them as it imports (torchvision's
`_meta_registrations`) imports; defining operators and kernels raises, naming what is missing.
An op written in Python is a `torch.autograd.Function` here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Library", "custom_op", "define", "impl", "impl_abstract", "register_autograd",
           "register_fake"]  # fmt: skip

fakes: dict[Any, Callable] = {}  # op name -> its fake implementation, as registered


def register_fake(op: Any, func: Callable | None = None, /, *, lib: Any = None,
                  _stacklevel: int = 1, allow_override: bool = False) -> Any:  # fmt: skip
    """Record `func` as `op`'s fake implementation and return it (also as a decorator). Unlike
    PyTorch's it accepts an op that does not exist: none does here (`torch.ops`)."""

    def register(f: Callable) -> Callable:
        fakes[op] = f
        return f

    return register if func is None else register(func)


impl_abstract = register_fake


def _no_dispatcher(what: str) -> Callable:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"torch.library.{what} is not provided by tracegrad (it has no "
                                  "operator dispatcher): write the op as a "
                                  "torch.autograd.Function")  # fmt: skip

    return refuse


register_autograd = _no_dispatcher("register_autograd")
custom_op = _no_dispatcher("custom_op")
define = _no_dispatcher("define")
impl = _no_dispatcher("impl")


class Library:
    """A namespace's registrations: constructible; defining ops or kernels in it raises."""

    def __init__(self, ns: str, kind: str, dispatch_key: str = "") -> None:
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key

    define = _no_dispatcher("Library.define")
    impl = _no_dispatcher("Library.impl")

"""`torch.library`: operators written in Python (`custom_op`, with `register_autograd` for their
backward), found by name under `torch.ops.<namespace>.<name>`, as transformers' MoE layers
register theirs. tracegrad has no C++ dispatcher: a custom op runs its Python function (its
backward through a `torch.autograd.Function`); a fake (meta) implementation is recorded and its
function returned, also for an op that does not exist (torchvision registers them for its C++
operators as it imports); defining C++-schema ops and kernels (`Library.define`, `impl`)
raises, naming what is missing."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["Library", "custom_op", "define", "impl", "impl_abstract", "register_autograd",
           "register_fake"]  # fmt: skip

fakes: dict[Any, Callable] = {}  # op name -> its fake implementation, as registered
custom_ops: dict[str, CustomOpDef] = {}  # "namespace::name" -> the op (`torch.ops`)


class CustomOpDef:
    """An operator defined in Python (`custom_op`): a call runs its function, through an
    autograd Function once `register_autograd` gave it a backward."""

    def __init__(self, name: str, fn: Callable) -> None:
        self.name, self._fn, self._function = name, fn, None
        self.__name__, self.__doc__ = name.split("::")[-1], fn.__doc__

    @property
    def default(self) -> CustomOpDef:  # `torch.ops.ns.op.default`, PyTorch's overload
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._function is None:
            return self._fn(*args, **kwargs)
        bound = inspect.signature(self._fn).bind(*args, **kwargs)
        bound.apply_defaults()
        return self._function.apply(*bound.args)

    def register_fake(self, fn: Callable) -> Callable:
        fakes[self.name] = fn
        return fn

    def register_kernel(self, device_types: Any, fn: Callable | None = None) -> Any:
        """The function for `device_types`: the CPU's replaces the op's own."""

        def register(f: Callable) -> Callable:
            kinds = {device_types} if isinstance(device_types, str) else set(device_types or ())
            if not kinds or "cpu" in kinds:
                self._fn = f
            return f

        return register if fn is None else register(fn)

    def register_autograd(self, backward: Callable, *, setup_context: Callable | None = None
                          ) -> None:  # fmt: skip
        """Its backward: `setup_context(ctx, inputs, output)` saves what `backward(ctx,
        *grads)` needs; backward returns a gradient (or None) per input."""
        from tracegrad.frontend.function import Function

        class Op(Function):
            @staticmethod
            def forward(ctx: Any, *inputs: Any) -> Any:
                output = op._fn(*inputs)  # the kernel registered last
                if setup_context is not None:
                    setup_context(ctx, inputs, output)
                return output

            @staticmethod
            def backward(ctx: Any, *grads: Any) -> Any:
                return backward(ctx, *grads)

        op, Op.__name__ = self, self.__name__
        self._function = Op


def custom_op(name: str, fn: Callable | None = None, /, *, mutates_args: Any = (),
              device_types: Any = None, schema: str | None = None) -> Any:  # fmt: skip
    """Define the operator `name` ("namespace::name") as `fn` (also as a decorator)."""

    def define(f: Callable) -> CustomOpDef:
        custom_ops[name] = op = CustomOpDef(name, f)
        return op

    return define if fn is None else define(fn)


def _op(op: Any) -> CustomOpDef | None:
    return op if isinstance(op, CustomOpDef) else custom_ops.get(getattr(op, "name", op))


def register_autograd(op: Any, backward: Callable, /, *, setup_context: Callable | None = None,
                      lib: Any = None) -> None:  # fmt: skip
    """`op`'s backward (`CustomOpDef.register_autograd`); `op` a custom op or its name."""
    found = _op(op)
    if found is None:
        raise NotImplementedError(f"torch.library.register_autograd: {op!r} is not a custom op "
                                  "(tracegrad has no C++ operators): define it with "
                                  "torch.library.custom_op")  # fmt: skip
    found.register_autograd(backward, setup_context=setup_context)


def register_fake(op: Any, func: Callable | None = None, /, *, lib: Any = None,
                  _stacklevel: int = 1, allow_override: bool = False) -> Any:  # fmt: skip
    """Record `func` as `op`'s fake implementation and return it (also as a decorator). Unlike
    PyTorch's it accepts an op that does not exist: none does here (`torch.ops`)."""

    def register(f: Callable) -> Callable:
        fakes[getattr(op, "name", op)] = f
        return f

    return register if func is None else register(func)


impl_abstract = register_fake


def _no_dispatcher(what: str) -> Callable:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"torch.library.{what} is not provided by tracegrad (it has no "
                                  "operator dispatcher): write the op as a "
                                  "torch.autograd.Function")  # fmt: skip

    return refuse


define = _no_dispatcher("define")
impl = _no_dispatcher("impl")


class Library:
    """A namespace's registrations: constructible; defining ops or kernels in it raises."""

    def __init__(self, ns: str, kind: str, dispatch_key: str = "") -> None:
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key

    define = _no_dispatcher("Library.define")
    impl = _no_dispatcher("Library.impl")

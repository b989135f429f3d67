"""`Tensor` and `bind`, the ground floor. A Tensor holds an ndarray or a symbolic `ir.Value`.

`bind(prim, *args)` hands one primitive application to whoever is listening: the eager NumPy
evaluator by default, the tracer while one is active, and afterwards the tape; it is what
calling a primitive does. This module knows no particular op; methods.py attaches Tensor's
operators and methods from above.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import math
import operator
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from tracegrad.core import ir
from tracegrad.core.bfloat16 import BFLOAT16, HALF, Widen, readable, to_bfloat16
from tracegrad.core.errors import ShapeError, TraceError, user_location, warn_user
from tracegrad.core.primitives import Phase, Primitive, astype, positive
from tracegrad.core.vocabulary import EAGER_KERNELS
from tracegrad.frontend import printing
from tracegrad.frontend.dtypes import of_array
from tracegrad.frontend.promotion import (
    get_default_dtype,
    is_number,
    number_dtype,
    promote_types,
    result_type,
    set_default_dtype,
)

_serials = itertools.count()

# The devices that open `with torch.device(...)` blocks name, innermost last: a tensor made
# inside a "meta" block answers `device` meta (its values are real here), so that code asking
# whether it builds on the meta device (transformers' from_pretrained) learns that it does.
DEVICE_BLOCKS: list = []


def next_serial() -> int:
    """A number above every tensor's made so far (`Tensor._serial`): the tracer takes one when
    it starts, so that it knows the tensors made while it runs."""
    return next(_serials)


class _Listeners(threading.local):
    """Who hears `bind`: a stack of tracers (top one evaluates) and the tape recorder. Tracing,
    `no_grad` and backward state are per thread, as PyTorch's grad mode and JAX's trace state
    are: a step traced in one thread must not capture another thread's eager ops. `phase` is the
    `Phase` of a training step that is running (forward, backward, update), set where it
    starts (backward passes, optimizer steps) and read by the tracer to label nodes; `update`
    numbers the optimizer `step()` call running (None outside one), which labels its nodes too."""

    record: Any = None  # autodiff's recorder, shared by all threads: record(prim, inputs, out, ...)

    def __init__(self) -> None:
        self.tracers: list[Any] = []
        self.grad_enabled = True
        self.phase = Phase.FORWARD
        self.update: int | None = None
        self.module: Any = None  # while tracing, the module being called (frontend/scopes.py)
        self.recording: list[Any] = []  # GradManagers recording in this thread, outermost first


Listeners = _Listeners()

# the profiles recording (torch.profiler's), innermost last: each eager op reports to the last
PROFILERS: list[Any] = []


_updates = itertools.count()


@contextlib.contextmanager
def phase(name: Phase) -> Iterator[None]:
    """Label the ops run inside as part of phase `name` (`Phase.BACKWARD`, `Phase.UPDATE`) of a
    training step; a name that is not a `Phase` raises. Entering the update phase from outside
    one starts a new `step()` call: a step that updates twice has two (`Listeners.update`)."""
    previous = Listeners.phase, Listeners.update
    Listeners.phase = Phase(name)
    if Listeners.phase is Phase.UPDATE and Listeners.update is None:
        Listeners.update = next(_updates)
    try:
        yield
    finally:
        Listeners.phase, Listeners.update = previous


def _is_extent(n: Any) -> bool:
    return isinstance(n, int | np.integer) and not isinstance(n, bool)


def _is_size(x: Any) -> bool:
    """A shape given as one argument: PyTorch's `torch.Size` (a tuple subclass); a plain tuple
    or list is data, as in PyTorch."""
    return isinstance(x, tuple) and type(x) is not tuple and all(map(_is_extent, x))


def _default_dtype(data: Any) -> np.dtype | None:
    """Python floats (and lists of them) get the default dtype, Python complex numbers its
    complex one; ndarrays keep theirs, and so does a list holding NumPy float64 scalars or arrays
    (PyTorch infers float64 from them)."""
    if isinstance(data, np.ndarray | np.generic):
        return None
    inferred = np.asarray(data).dtype
    if inferred == np.complex128:
        return number_dtype(0j)
    if inferred != np.float64:
        return None
    return None if _holds_numpy_float64(data) else get_default_dtype()


def _holds_numpy_float64(x: Any) -> bool:
    if isinstance(x, list | tuple):
        return any(map(_holds_numpy_float64, x))
    return isinstance(x, np.ndarray | np.generic) and x.dtype == np.float64


class Size(tuple):
    """PyTorch's `torch.Size`, what `t.shape` and `t.size()` are: a tuple of extents that also
    counts its elements (`numel()`), a slice of which is one too (`x.shape[1:].numel()`)."""

    __slots__ = ()

    def numel(self) -> int:
        return math.prod(self)

    def __getitem__(self, i: Any) -> Any:
        out = tuple.__getitem__(self, i)
        return Size(out) if i.__class__ is slice else out

    # joined or repeated, a Size stays one, on either side of a tuple (botorch's
    # `batch_shape + event_shape`, then `.numel()`)
    def __add__(self, other: Any) -> Any:
        return Size(tuple.__add__(self, other)) if isinstance(other, tuple) else NotImplemented

    def __radd__(self, other: Any) -> Any:
        return Size(other + tuple(self)) if isinstance(other, tuple) else NotImplemented

    def __mul__(self, n: Any) -> Size:
        return Size(tuple.__mul__(self, n))

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"


_SIZES: dict[tuple, Size] = {}


def _size_of(shape: tuple) -> Size:
    """The Size of a shape, made once: a tensor's `shape` is asked at nearly every op."""
    size = _SIZES.get(shape)
    if size is None:
        if len(_SIZES) >= 4096:  # shapes that keep changing: forget, do not grow
            _SIZES.clear()
        size = _SIZES[shape] = Size(shape)
    return size


class ElementCount(int):
    """The element count (NumPy's `a.size`) that can also be called as PyTorch's `t.size()` (the
    shape, a `Size`) or `t.size(dim)` (one extent)."""

    def __new__(cls, count: Any, shape: tuple[int, ...]) -> ElementCount:
        n = super().__new__(cls, int(count))
        n.shape = shape
        return n

    def __call__(self, dim: int | None = None) -> Any:
        return Size(self.shape) if dim is None else self.shape[dim]


class Tensor:
    """An n-d array with reverse-mode autodiff: concrete (an ndarray) or symbolic (traced)."""

    # and `__dict__`: code marks tensors with attributes of its own (`p._no_weight_decay = True`)
    __slots__ = ("_value", "_requires_grad", "_grad", "_node", "_retains", "_serial", "_version",
                 "_view", "__weakref__", "__dict__")  # fmt: skip
    __array_priority__ = 1000

    def __init__(self, *data: Any, dtype: Any = None, requires_grad: bool = False, **more: Any):
        """PyTorch's legacy constructor `torch.Tensor(...)`, always of the default float dtype
        (or `dtype`): `Tensor(data)` a leaf holding a copy of `data` (`Tensor([1, 2])` is
        float32), `Tensor(*sizes)` or `Tensor(torch.Size)` a zeroed tensor of that shape
        (PyTorch's is uninitialized), `Tensor()` an empty one. tracegrad's own code makes tensors
        of any dtype with `Tensor._of`. A subclass whose `__new__` made the tensor (`return
        data.as_subclass(cls)`) is left as made: Python calls `__init__` after it with the same
        arguments, and PyTorch's Tensor has no constructor of its own to run again."""
        if hasattr(self, "_value"):
            return
        if more:
            raise TypeError(f"Tensor(): unexpected keyword arguments {sorted(more)}")
        dtype = get_default_dtype() if dtype is None else dtype
        sizes = tuple(data[0]) if len(data) == 1 and _is_size(data[0]) else data
        if all(map(_is_extent, sizes)):
            self._init(np.zeros(tuple(map(int, sizes)) or (0,), dtype), None, requires_grad)
        elif len(data) == 1:
            copied = isinstance(data[0], np.ndarray | np.generic)  # as PyTorch's: not an alias
            self._init(np.array(data[0], dtype) if copied else data[0], dtype, requires_grad)
        else:
            raise TypeError(f"Tensor(): expected data or sizes (ints), got {data!r}")

    @classmethod
    def _of(cls, data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        """A new leaf holding `data`: its own dtype for an ndarray, the default float dtype for
        Python floats, int64 for Python ints (or `dtype`)."""
        t = object.__new__(cls)
        t._init(data, dtype, requires_grad)
        return t

    _meta = False  # made in a `with torch.device("meta")` block (its own attribute then)
    _permuted = False  # a view of permuted axes (or of one): PyTorch's non-contiguous views

    def _init(self, data: Any, dtype: Any, requires_grad: bool) -> None:
        if (DEVICE_BLOCKS and DEVICE_BLOCKS[-1].type == "meta") or getattr(data, "_meta", False):
            self._meta = True
        if isinstance(data, Tensor):
            data = data._value
        elif isinstance(data, list | tuple) and _holds_tensors(data):
            if _holds_tensors(data, requiring_grad=True):
                raise TypeError(
                    "tensor(): the list holds tensors that require grad, and a new leaf would "
                    "cut their gradient; use tracegrad.stack(...) (or tracegrad.as_tensor, "
                    "which stacks)"
                )
            data = Tensor._stack(_numbers_as(data, dtype))._value  # values: no gradient to cut
        if not isinstance(data, ir.Value):
            dtype = dtype if dtype is not None else _default_dtype(data)
            if dtype is not None and np.dtype(dtype) == BFLOAT16:
                data = data if getattr(data, "dtype", None) == BFLOAT16 else to_bfloat16(data)
            data = np.asarray(data, dtype=dtype)
        elif dtype is not None and np.dtype(dtype) != data.dtype:
            raise TypeError(f"tensor: cannot change the dtype of a traced value to {dtype}")
        self._value = data
        self._requires_grad = False
        self._grad: Tensor | None = None
        self._node: Any = None  # a tape node: the op that made this tensor, or the leaf's own node
        self._retains = False
        self._serial = next(_serials)
        self._version = [0]  # in-place writes so far; shared with detach()ed aliases
        self._view: tuple | None = None  # (the base, undo): `functions.viewing`
        if data.__class__ is ir.Value and Listeners.tracers:
            Listeners.tracers[-1].made.append(weakref.ref(self))
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _wrap(cls, value: Any, node: Any = None) -> Tensor:
        t = object.__new__(cls)
        t._value, t._requires_grad, t._grad, t._node, t._retains = value, False, None, node, False
        t._serial, t._version, t._view = next(_serials), [0], None
        if value.__class__ is ir.Value and Listeners.tracers:
            Listeners.tracers[-1].made.append(weakref.ref(t))
        return t

    # --- array facts -------------------------------------------------------------------------
    # shape and dtype answer PyTorch's objects; the hot paths inside read `_value`'s own
    shape = property(lambda self: _size_of(self._value.shape), doc="The shape, a torch.Size.")
    dtype = property(lambda self: of_array(self._value), doc="PyTorch's dtype object.")
    ndim = property(operator.attrgetter("_value.ndim"))
    size = property(lambda self: ElementCount(math.prod(self._value.shape), self._value.shape))

    @property
    def is_symbolic(self) -> bool:
        return isinstance(self._value, ir.Value)

    def _concrete(self, what: str, read: bool = False) -> np.ndarray:
        """The array; while tracing, `read` (a Python decision on it) makes the plan hold only
        while the tensor holds this value (`Tracer.read`)."""
        if read and Listeners.tracers and not isinstance(self._value, ir.Value):
            Listeners.tracers[-1].read(self, self._value, what)
        if isinstance(self._value, ir.Value):
            raise TraceError(
                f"{what} needs a concrete value, but this tensor ({self._value.type_str}) is "
                f"traced by @tracegrad.trace (at {user_location()}). Keep Python control flow "
                "and printing outside the traced function: return the tensor and read it "
                "after the call, or use tracegrad.where(...) for data-dependent choices."
            )
        return self._value

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The underlying ndarray (no copy, as in PyTorch; `force`, PyTorch's leave to detach
        first, changes nothing here)."""
        return self._concrete("Tensor.numpy()")

    def item(self) -> Any:
        """The Python number; in a traced step, a 0-d tensor standing for it (`Tracer.number`),
        which the step may compute with and return."""
        if isinstance(self._value, ir.Value) and Listeners.tracers:
            if self.size != 1:
                raise ShapeError(f"item: a tensor of {self.size} elements has no one number")
            return Listeners.tracers[-1].number(self)
        return readable(self._concrete("Tensor.item()", read=True)).item()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self._concrete("np.asarray(tensor)")
        return a if dtype is None else a.astype(dtype)

    def __bool__(self) -> bool:
        value = self._concrete("bool(tensor) (an `if` or `while` on a tensor)", read=True)
        if value.size != 1:
            raise ShapeError(f"Boolean value of Tensor with {value.size} values is ambiguous")
        return bool(readable(value))

    def __float__(self) -> float:
        return float(self._scalar("float(tensor)"))

    def __int__(self) -> int:
        return int(self._scalar("int(tensor)"))

    def _scalar(self, what: str) -> np.ndarray:
        """The one element of a concrete tensor of any shape, as a 0-d array (PyTorch's
        `float(t)`, `int(torch.multinomial(p, 1))`, `math.log(t)` of shape (1,) or (1, 1))."""
        value = self._concrete(what, read=True)
        if value.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return readable(value.reshape(()))

    def __index__(self) -> int:
        """A one-element integer tensor of any shape, as PyTorch's (`names[i]` for each `i` of
        an (n, 1) prediction)."""
        value = self._concrete("using a tensor as an index", read=True)
        if value.size != 1 or value.dtype.kind not in "biu":
            raise TypeError("only integer tensors of a single element can be converted to an "
                            f"index, not {value.dtype} of shape {value.shape}")  # fmt: skip
        return int(value.reshape(()).__index__())

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __contains__(self, element: Any) -> bool:
        """`element in x`: whether any entry equals it, as PyTorch's (not a row by row test:
        transformers asks `pad_token_id in input_ids` of a 2-d batch)."""
        if not isinstance(element, Tensor | int | float | bool | complex | np.generic):
            raise RuntimeError("Tensor.__contains__ only supports Tensor or scalar, but you "
                               f"passed in a {type(element).__name__}")  # fmt: skip
        return bool((self == element).any())

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        """PyTorch's print (`frontend.printing`): the values, then the size of an empty tensor
        that is not 1-d, the dtype unless it is the default float (or complex), int64 or bool
        (of an empty one: unless the default float), and the op that made it
        (`grad_fn=<MulBackward0>`) or `requires_grad=True` on a leaf."""
        if isinstance(self._value, ir.Value):
            grad = ", requires_grad=True" if self.requires_grad else ""
            return f"tensor(<traced {self._value.type_str}>{grad})"
        value, default = self._value, get_default_dtype()
        suffixes = []
        if value.size == 0:
            if value.ndim != 1:
                suffixes.append(f"size={tuple(value.shape)}")
            shown = self.dtype != default
        else:
            complex_default = np.complex128 if default == np.float64 else np.complex64
            shown = self.dtype not in (default, complex_default, np.int64, np.bool_)
        if shown:
            suffixes.append(f"dtype={self.dtype}")
        if not self.is_leaf:
            suffixes.append(f"grad_fn=<{self._node.name()}>")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        body = printing.values_str(readable(value), len("tensor("))
        return printing.with_suffixes("tensor(" + body, suffixes, len("tensor("))

    # --- autodiff facts (the tape lives in autodiff.py; these read its marks) ----------------
    @property
    def is_leaf(self) -> bool:
        return self._node is None or self._node.is_leaf

    @property
    def grad_fn(self) -> Any:
        """The tape node that produced this tensor (its `name` is the op's), None on leaves."""
        return None if self.is_leaf else self._node

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad if self.is_leaf else True

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if not self.is_leaf:
            raise RuntimeError(
                "requires_grad can only be changed on leaf tensors; this tensor was produced by "
                f"'{self._node.name()}'. Use t.detach() to get a leaf that shares its data."
            )
        if flag and self.dtype.kind not in "fc":
            raise RuntimeError(f"only Tensors of floating point and complex dtype can require "
                               f"gradients, not {self.dtype}")  # fmt: skip
        self._requires_grad = bool(flag)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and not self.is_leaf:  # it requires grad already: nothing to do, as PyTorch's
            return self  # method (not its attribute) has it (transformers' and PEFT's hooks)
        self.requires_grad = flag
        return self

    @property
    def grad(self) -> Tensor | None:
        return self._grad

    @grad.setter
    def grad(self, g: Tensor | None) -> None:
        if g is not None and not isinstance(g, Tensor):
            g = Tensor._of(g)
        if g is not None and g._value.shape != self._value.shape:
            raise ValueError(f"grad of shape {g.shape} assigned to a tensor of shape {self.shape}")
        for tracer in Listeners.tracers:
            tracer.will_write(self)
        self._grad = g

    def retain_grad(self) -> None:
        """Keep `.grad` on this non-leaf after backward (leaves keep theirs anyway)."""
        self._retains = True
        if not self.is_leaf:
            self._node.retained = weakref.ref(self)

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data (and its version counter), cut from the graph:
        an in-place write through it reaches this tensor, as PyTorch's shared storage does
        (`p.detach().add_(g)`). While tracing, a tensor from before the trace is lifted first
        (made state), so the detached alias reads its value at every call rather than a
        constant of the first, and a write through it is a state write of this tensor."""
        if not Listeners.tracers:
            t = Tensor._wrap(self._value)  # eagerly the shared ndarray is the link
            t._version = self._version
            return t
        return self._alias()

    def __getstate__(self) -> tuple:
        """Pickled as its values and `requires_grad`, as PyTorch's: a leaf's gradient
        accumulator, a view's link to its base and a computed tensor's history stay behind (they
        hold weak references and functions), so an unpickled tensor is a leaf."""
        extra, slots = super().__getstate__()
        return extra, {**slots, "_node": None, "_view": None, "_requires_grad": self.requires_grad}

    def __deepcopy__(self, memo: dict) -> Tensor:
        """A leaf of the same class and `requires_grad` with a value of its own, as PyTorch's
        (`copy.deepcopy(model)`; torch-optimizer's `deepcopy(p.data)` as state). While tracing,
        the copy is an op of the trace: a tensor the step made, not the symbolic value of the
        original (which a later call would not bind)."""
        if not self.is_leaf:
            raise RuntimeError(
                "deepcopy: only tensors made by the user (graph leaves) can be deep-copied, as in "
                f"PyTorch; this one (shape {self.shape}) was computed: detach() it first"
            )
        if Listeners.tracers:
            out = positive(self.detach())
        else:
            out = Tensor._of(np.array(self._value))
        with contextlib.suppress(TypeError):  # a class with slots of its own stays a Tensor
            out.__class__ = Tensor if isinstance(self, Alias) else type(self)
        out.requires_grad = self._requires_grad
        if self._grad is not None:
            out._grad = copy.deepcopy(self._grad, memo)
        memo[id(self)] = out
        if self.__dict__:  # the user's own attributes, as PyTorch's deepcopy keeps them
            out.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return out

    def _alias(self) -> Tensor:
        """An untracked tensor whose in-place writes are writes of this one (`t.data`, and
        `t.detach()` while tracing, where values are symbolic and share no memory)."""
        if Listeners.tracers and not isinstance(self._value, ir.Value):
            Listeners.tracers[-1].lift(self)
        view = Alias._wrap(self._value)
        view._version, view._base = self._version, self
        return view

    def _assign(self, new: Tensor) -> None:
        """Overwrite this tensor's contents (in-place ops, optimizer steps, trace write-back)."""
        if new._value.shape != self._value.shape:
            raise ShapeError(f"in-place update: result of shape {new.shape} into {self.shape}")
        for tracer in Listeners.tracers:
            tracer.will_write(self)
        self._version[0] += 1
        if Listeners.tracers:  # symbolic, so that the plan reads it at each call, never bakes it
            new = Tensor._wrap(Listeners.tracers[-1].lift(new))
        if new._value.dtype != self._value.dtype:
            new = Tensor._wrap(new._value).astype(self.dtype)
        if Listeners.tracers or not isinstance(self._value, np.ndarray):
            self._value = new._value  # traced: a state write, applied only if the step completes
        elif not self._value.flags.writeable:  # wraps a read-only array: gets a buffer of its own
            self._value = np.array(new._value)
        else:
            np.copyto(self._value, new._value)


class Alias(Tensor):
    """`t.data` and `t.detach()` (while tracing): a tensor autograd does not track, holding
    `t`'s value; an in-place write through it writes `t` (also in a traced step, where `t` is
    state)."""

    __slots__ = ("_base",)

    def _assign(self, new: Tensor) -> None:
        if not Listeners.tracers and self._value is not self._base._value:
            # its tensor took other memory since (`t.data = x`): this writes its own, as in PyTorch
            Tensor._assign(self, new)
            return
        self._base._assign(new)
        self._value = self._base._value


def as_tensor(x: Any, dtype: Any = None) -> Tensor:
    """`x` as a tensor; a list holding tensors is stacked (differentiably), never detached."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, list | tuple) and _holds_tensors(x):
        out = Tensor._stack(_numbers_as(x, dtype))
        return out if dtype is None else out.astype(dtype)
    return Tensor._of(x, dtype=dtype)


def _numbers_as(data: Any, dtype: Any) -> Any:
    """The Python numbers in a nested list beside tensors as tensors of `dtype`: made at the
    default dtype, 0.1 would be rounded to float32 on its way to float64."""
    if dtype is None:
        return data
    if isinstance(data, list | tuple):
        return [_numbers_as(v, dtype) for v in data]
    return data if isinstance(data, Tensor) else Tensor._of(data, dtype=dtype)


def _holds_tensors(x: Any, requiring_grad: bool = False) -> bool:
    if isinstance(x, list | tuple):
        return any(_holds_tensors(v, requiring_grad) for v in x)
    return isinstance(x, Tensor) and (not requiring_grad or x.requires_grad)


# PyTorch's keywords for an op's operands (`torch.mul(x, other=2)`, `x.pow(exponent=2)`), in order
OPERAND_KEYWORDS = ("input", "other", "exponent")


def bind(prim: Any, *args: Any, **params: Any) -> Tensor:
    """Apply `prim` to `args`: evaluate (eagerly or symbolically), then let the tape record it.
    The eager path is every op's fixed cost, so it is written out here, line by line."""
    if params:
        if "out" in params:
            return call_into(functools.partial(bind, prim), args, params, prim.name)
        if not params.keys().isdisjoint(OPERAND_KEYWORDS):
            args = (*args, *(params.pop(k) for k in OPERAND_KEYWORDS if k in params))
    listeners = Listeners
    if listeners.tracers:
        return _bind_traced(prim, args, params, listeners.tracers[-1])
    if PROFILERS:
        return _bind_profiled(prim, args, params)
    inputs = lift_operands(args)
    if prim.promotion and _disagree(prim.promotion, inputs):
        inputs = _promote(prim.promotion, inputs, args, ())
    arrays = [t._value for t in inputs]
    try:
        shape, dtype = prim.shape_rule(*arrays, **params)
    except Widen:
        return _in_float32(prim, inputs, params, [is_number(a) for a in args])
    kernel = EAGER_KERNELS.get(prim)
    value = kernel(prim, arrays, params, shape, dtype) if kernel is not None else None
    if value is None:
        value = prim.impl(*arrays, **params)
    if value.__class__ is not np.ndarray:
        value = np.asarray(value)
    if value.dtype != dtype:
        value = value.astype(dtype)
    out = Tensor._wrap(value)
    if listeners.grad_enabled and listeners.record is not None:
        listeners.record(prim, inputs, out, params)
    return out


def _in_float32(prim: Any, inputs: list[Tensor], params: dict, numbers: list[bool]) -> Tensor:
    """`prim` of half-float operands (`bfloat16.Widen`: bfloat16's, or float16's in a product),
    as PyTorch's CPU kernels compute it: in float32, its float result rounded to the half float
    unless another float tensor (or a `dtype` asked) set its dtype; Python numbers (`numbers`)
    are float32 already (`_number`). The casts are ops of their own, so autograd and traces
    see them."""
    floats = {x._value.dtype for x, number in zip(inputs, numbers, strict=True)
              if not number and x._value.dtype.kind in "fcV"}  # fmt: skip
    out = bind(prim, *[astype(x, dtype=np.float32) if x._value.dtype in HALF else x
                       for x in inputs], **params)  # fmt: skip
    half = floats.pop() if len(floats) == 1 else None
    if out._value.dtype == np.float32 and half in HALF and "dtype" not in params:
        return astype(out, dtype=half)
    return out


def _bind_profiled(prim: Any, args: tuple, params: dict) -> Tensor:
    """`bind`, timed for the profile that records (the eager path stays free of the clock)."""
    profiler = PROFILERS.pop()
    start = time.perf_counter_ns()
    try:
        out = bind(prim, *args, **params)
    finally:
        PROFILERS.append(profiler)
    profiler.op(prim.name, start, args)
    return out


def _bind_traced(prim: Any, args: tuple, params: dict, tracer: Any) -> Tensor:
    """`bind` while tracing: the tracer evaluates symbolically (or the op's parts are traced in
    its place), and Python-number arithmetic on traced stand-ins stays a Python number."""
    weak = tracer.weak
    inputs = _lift_args(args, weak)
    promotion = prim.promotion
    if promotion and _disagree(promotion, inputs):
        inputs = _promote(promotion, inputs, args, weak)
    try:
        shape, dtype = prim.shape_rule(*[t._value for t in inputs], **params)
    except Widen:
        return _in_float32(prim, inputs, params, [is_number(a) or _weak(a, weak) for a in args])
    if prim.trace_parts:
        if not prim.traced_vjp:
            return prim.decompose(*inputs, **params)
        out = _parts_off_the_tape(prim, inputs, params)
    else:
        value = tracer.process(prim, inputs, params, shape, dtype)
        if weak and _all_weak(args, weak):  # Python-number arithmetic stays a Python number
            weak.add(value)
        out = Tensor._wrap(value)
    if Listeners.grad_enabled and Listeners.record is not None:
        Listeners.record(prim, inputs, out, params)
    return out


def call_into(f: Any, args: tuple, kwargs: dict, op: str) -> Any:
    """`f(*args, **kwargs)` given PyTorch's `out=t` among `kwargs`: the result written into
    `t` (`write_out`), for ops and the top level's functions alike."""
    out = kwargs.pop("out")
    result = f(*args, **kwargs)
    return result if out is None else write_out(out, result, op)


def write_out(out: Any, result: Any, op: str) -> Any:
    """PyTorch's `out=`: `result` written into `out` (a tensor, or a tuple of them for a tuple of
    results), which is returned. A result autograd tracks is refused, as PyTorch refuses it;
    an `out` of another shape takes the result's, with PyTorch's warning if it held elements.
    Through `resize_` and `copy_`, the methods, so that a traced step writes state as they do."""
    if isinstance(result, tuple):
        if not isinstance(out, tuple | list) or len(out) != len(result):
            raise TypeError(f"{op}: out= takes a tuple of {len(result)} tensors here")
        written = [write_out(o, r, op) for o, r in zip(out, result, strict=True)]
        return result._make(written) if hasattr(result, "_make") else tuple(written)
    if not isinstance(out, Tensor):
        raise TypeError(f"{op}: out= must be a tensor, not {type(out).__name__}")
    if Listeners.grad_enabled and result.requires_grad:
        raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad")  # fmt: skip
    if not np.can_cast(result.dtype, out.dtype, "same_kind"):
        raise TypeError(f"{op}: result type {result.dtype} can't be cast to out='s dtype "
                        f"{out.dtype}")  # fmt: skip
    if out.shape != result.shape:
        if out.size:
            warn_user(
                f"{op}: an output with one or more elements was resized since it had "
                f"shape {out.shape}, which does not match the required output shape "
                f"{result.shape}"
            )
        out.resize_(result.shape)
    return out.copy_(result)


def _parts_off_the_tape(prim: Any, inputs: list[Tensor], params: dict) -> Tensor:
    """The op's parts, traced but not taped: the tape holds the op, whose own VJP
    differentiates it (`Primitive.traced_vjp`)."""
    enabled, Listeners.grad_enabled = Listeners.grad_enabled, False
    try:
        return prim.decompose(*inputs, **params)
    finally:
        Listeners.grad_enabled = enabled


def _disagree(promotion: str, inputs: list[Tensor]) -> bool:
    """The operands' dtypes differ, or a float function has integers: the rare case, asked at
    every op (NumPy's builtin dtypes are singletons: `is` answers first)."""
    first = promotion == "values"
    dtype = inputs[first]._value.dtype
    for x in inputs[first + 1 :]:
        other = x._value.dtype
        if other is not dtype and other != dtype:
            return True
    return promotion == "float" and dtype.kind not in "fcV"  # V: bfloat16's bits


def _promote(promotion: str, inputs: list[Tensor], args: tuple, weak: Any) -> list[Tensor]:
    """The operands cast to PyTorch's result type (`promotion.result_type`), each Python number
    (or traced stand-in for one) counted as one; a float function's integers as default floats."""
    first = 1 if promotion == "values" else 0
    operands = [_WEAK_KINDS[a.dtype.kind] if _weak(a, weak) else a if is_number(a) else x
                for a, x in zip(args[first:], inputs[first:], strict=True)]  # fmt: skip
    dtype = result_type(*operands)
    if promotion == "float" and dtype.kind not in "fcV":
        dtype = get_default_dtype()
    out = inputs[:first]
    for a, x in zip(args[first:], inputs[first:], strict=True):
        if x.dtype == dtype:
            out.append(x)
        elif is_number(a):
            out.append(Tensor._wrap(_number(a, dtype)))
        elif dtype == BFLOAT16 and _weak(a, weak):  # a number: float32, as `_number` makes it
            out.append(x if x.dtype == np.float32 else astype(x, dtype=np.float32))
        else:
            out.append(astype(x, dtype=dtype))
    return out


_WEAK_KINDS = {"b": False, "u": 0, "i": 0, "f": 0.0, "c": 0j}  # a number standing for each kind


def _lift_args(args: tuple[Any, ...], weak: Any = ()) -> list[Tensor]:
    """Tensors stay; ndarrays become tensors; Python scalars take the tensors' dtype (NEP 50),
    and so does a traced stand-in for a Python number argument (a `weak` value)."""
    if not weak:
        return lift_operands(args)
    is_weak = [_weak(a, weak) for a in args]
    arrays = [a._value if isinstance(a, Tensor) else a for a in args]
    typed = [a for a, w in zip(arrays, is_weak, strict=True) if not w and not is_number(a)]
    out = []
    for a, raw, w in zip(arrays, args, is_weak, strict=True):
        if w and typed:
            dtype = _weak_type(
                tuple(t.dtype for t in typed), float if raw.dtype.kind == "f" else int
            )
            dtype = np.dtype(np.float32) if dtype == BFLOAT16 else dtype  # as `_number` makes it
            out.append(raw if dtype == raw.dtype else astype(raw, dtype=dtype))
        elif isinstance(raw, Tensor):
            out.append(raw)
        elif is_number(a):
            dtype = _scalar_type(tuple(t.dtype for t in typed), a) if typed else None
            out.append(Tensor._of(a) if dtype is None else Tensor._wrap(_number(a, dtype)))
        else:
            out.append(_operand(a))
    return out


def lift_operands(args: tuple[Any, ...]) -> list[Tensor]:
    """`_lift_args` where no traced value stands in for a Python number: the path of every eager
    op, without that case's bookkeeping."""
    for a in args:  # a loop, not all() over a generator: this runs at every op
        if not isinstance(a, Tensor):
            break
    else:
        return list(args)  # the common case, first
    if len(args) == 2:  # a float tensor and a Python number (`x * 2`, `1 - x`): the tensor's dtype
        x, y = args
        if y.__class__ in _REAL_NUMBERS and isinstance(x, Tensor) and x._value.dtype.kind == "f":
            return [x, Tensor._wrap(np.asarray(y, x._value.dtype))]
        if x.__class__ in _REAL_NUMBERS and isinstance(y, Tensor) and y._value.dtype.kind == "f":
            return [Tensor._wrap(np.asarray(x, y._value.dtype)), y]
    typed = tuple([a._value.dtype if isinstance(a, Tensor) else a.dtype
                   for a in args if not is_number(a)])  # fmt: skip
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif not is_number(a):
            out.append(_operand(a))
        elif typed:
            out.append(Tensor._wrap(_number(a, _scalar_type(typed, a))))
        else:
            out.append(Tensor._of(a))
    return out


_REAL_NUMBERS = frozenset({int, float, bool})


def _operand(a: Any) -> Tensor:
    """An operand that is neither a tensor nor a number: an array, a nested list, or a sparse
    tensor, whose dense form takes part (PyTorch's `dense + sparse` is dense), differentiably
    in its values."""
    if getattr(a, "is_sparse", False) is True:
        return a.to_dense()
    return Tensor._of(np.asarray(a))


def _scalar_type(dtypes: tuple[np.dtype, ...], a: int | float | bool) -> np.dtype:
    """The dtype a Python number takes beside arrays of `dtypes` (NEP 50: the arrays' kind
    wins). A float or bool's depends on the types alone, so it is remembered; an int's also on
    its value (an overflow raises)."""
    if BFLOAT16 in dtypes:
        return _weak_type(dtypes, a.__class__)
    if isinstance(a, int) and a.__class__ is not bool:
        for d in dtypes:
            if d.kind in "iu":
                break
        else:  # no integer tensor: its value cannot matter (`where(mask, g, 0)` in a VJP)
            return _weak_type(dtypes, int)
        try:
            return np.result_type(*dtypes, a)
        except OverflowError:  # out of an integer tensor's range: it wraps (`_number`)
            return _weak_type(dtypes, int)
    return _weak_type(dtypes, a.__class__)


def _number(a: int | float | bool, dtype: np.dtype) -> np.ndarray:
    """A Python number as a 0-d array of `dtype`, or of float32 for bfloat16 (kind V): PyTorch's
    kernels read numbers in the type they compute in (`x * 0.3` is not `x * 0.30078125`), and
    `_in_float32` rounds the result. An int out of an integer dtype's range wraps around as
    PyTorch's does (`uint8_image & -32`, `x + 300`), where NumPy raises."""
    try:
        return np.asarray(a, dtype if dtype.kind != "V" else np.float32)
    except OverflowError:
        if not isinstance(a, int) or dtype.kind not in "iu":
            raise
        return np.asarray(np.int64(a)).astype(dtype)  # past int64, PyTorch refuses it too


@functools.lru_cache(maxsize=256)
def _weak_type(dtypes: tuple[np.dtype, ...], kind: type) -> np.dtype:
    if BFLOAT16 in dtypes:  # NumPy knows no bfloat16: a number takes it, unless complex
        tensors = functools.reduce(promote_types, dtypes)
        if tensors == BFLOAT16:
            return np.dtype(np.complex64) if kind is complex else tensors
        return _weak_type((tensors,), kind)
    return np.result_type(*dtypes, kind(0))


def _weak(a: Any, weak: Any) -> bool:
    return isinstance(a, Tensor) and isinstance(a._value, ir.Value) and a._value in weak


def _all_weak(args: tuple[Any, ...], weak: Any) -> bool:
    """Every operand is a Python number or stands in for one, and one of them is traced."""
    tensors = [a for a in args if isinstance(a, Tensor)]
    return (
        bool(tensors)
        and all(_weak(a, weak) for a in tensors)
        and all(isinstance(a, Tensor) or is_number(a) for a in args)
    )


Primitive.__call__ = bind  # calling an op binds it: the front end gives the table its meaning

__all__ = ["Listeners", "ShapeError", "Tensor", "TraceError", "as_tensor", "bind",
           "get_default_dtype", "phase", "set_default_dtype", "user_location"]  # fmt: skip

"""Tracing: run a training step once on symbolic tensors and record one graph holding forward,
backward and the optimizer's update (runtime/trace.py compiles it and runs it from then on).

Tensors made before the call and touched inside it (parameters, their `.grad`, optimizer state)
become *state*: graph inputs read at every call, and outputs written back only after the plan
ran to the end, so a failing step changes nothing.
"""

from __future__ import annotations

import dis
import functools
import gc
import inspect
import random
import sys
import types
import weakref
import zlib
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracegrad.core import ir
from tracegrad.core import primitives as P
from tracegrad.core.errors import module_name
from tracegrad.core.vocabulary import Phase
from tracegrad.frontend import pytree
from tracegrad.frontend.scopes import module_names
from tracegrad.frontend.tensor import (
    Alias,
    Listeners,
    Tensor,
    TraceError,
    as_tensor,
    next_serial,
    user_location,
)
from tracegrad.frontend.torch_function import overrides


def _unreferenced(tensors: list[Tensor], records: Container[int] = ()) -> set[int]:
    """The ids of `tensors` that nothing but a trace's own records (its slots and refs, and
    the objects whose ids are in `records`) refers to (one sweep of the heap for all)."""
    ids = {id(t) for t in tensors}
    held: set[int] = set()
    for holder in gc.get_referrers(*tensors):
        if (
            holder is not tensors
            and not isinstance(holder, _TRACE_RECORDS)
            and id(holder) not in records
        ):
            held |= {id(x) for x in gc.get_referents(holder)} & ids
    return ids - held


def _substitute(new: Any, old: Any) -> None:
    """Make the dicts, lists and objects' attributes that refer to `new` refer to `old`, and
    the tuples (a recurrent layer's `(h, c)`): each is rebuilt with `old`, in its holders."""
    for holder in gc.get_referrers(new):
        if isinstance(holder, tuple) and any(v is new for v in holder):
            items = [old if v is new else v for v in holder]
            _substitute(holder, holder._make(items) if hasattr(holder, "_make") else
                        type(holder)(items))  # fmt: skip
        for p in _items(holder):
            if p.obj is new:
                p.holder[p.key] = old


@dataclass
class Place:
    """A dict's key or a list's index that holds `obj`: a kept tensor, or a tuple of them."""

    holder: dict | list
    key: Any
    obj: Any


def places(kept: Sequence[Tensor]) -> list[Place]:
    """Where Python state holds each tensor in `kept` (or a tuple of them, a recurrent layer's
    `(h, c)`): the dicts, lists and objects' attributes that refer to it, found in one sweep of
    the heap (two with tuples)."""
    places, tuples = [], []
    ids = {id(t) for t in kept}
    for holder in gc.get_referrers(*kept):
        if holder is kept or isinstance(holder, _TRACE_RECORDS):
            continue
        if isinstance(holder, tuple):
            tuples.append(holder)
        else:
            places += [p for p in _items(holder) if id(p.obj) in ids]
    if tuples:
        ids = {id(t) for t in tuples}
        for holder in gc.get_referrers(*tuples):
            if holder is not tuples and not isinstance(holder, (tuple, *_TRACE_RECORDS)):
                places += [p for p in _items(holder) if id(p.obj) in ids]
    return places


def _items(holder: Any) -> list[Place]:
    """The places of a dict, a list, or an object's attributes (none of anything else)."""
    if hasattr(holder, "__dict__") and not isinstance(holder, type):
        holder = vars(holder)  # an object's attributes (Python may report the object itself)
    if isinstance(holder, dict):
        return [Place(holder, k, v) for k, v in holder.items()]
    if isinstance(holder, list):
        return [Place(holder, i, v) for i, v in enumerate(holder)]
    return []


def _holds_tensor(holder: dict, key: Any) -> bool:
    return isinstance(holder.get(key), Tensor | tuple)


_GONE = object()  # a key a dict no longer has


def _number_at(spot: Spot) -> Any:
    """The value of the one-element tensor at `spot`, or None if none is there."""
    t = _occupant(*spot)
    return t._value.item() if t is not None and t._value.size == 1 else None


def put_back(places: list[Place]) -> None:
    """Make each place hold its object again: after a call, the attribute a step assigns holds
    what this plan wrote (another plan of the same step, for other shapes, wrote its own)."""
    for p in places:
        if isinstance(p.holder, dict):
            if p.holder.get(p.key) is not p.obj:
                p.holder[p.key] = p.obj
        elif p.key < len(p.holder) and p.holder[p.key] is not p.obj:
            p.holder[p.key] = p.obj


# Where Python state holds a result: the place, the position in the tuple there (None: the
# place holds the result itself), and which result
Held = tuple[Place, int | None, int]


def held_where(results: list, result: Any, state: Container[int] = ()) -> list[Held]:
    """Where Python state holds the step's result tensors (a forward's `self.last = out`, a
    forward hook's `features[name] = out`), apart from the containers of `result` itself.
    Tensors whose id is in `state` (the step's inputs) are not the step's to put anywhere.
    `result` is the step's return value as `capture` and `finish` hold it (`_held_elsewhere`)."""
    ids = {id(t): k for k, t in enumerate(results) if isinstance(t, Tensor) and id(t) not in state}
    if not ids:
        return []
    todo: list = [result]
    inside: list = []  # what the result's containers hold
    own = {id(results), id(todo), id(inside)}
    while todo:  # the result's own lists, tuples and dicts
        x = todo.pop()
        if isinstance(x, list | tuple | dict) and id(x) not in own:
            own.add(id(x))
            todo += x.values() if isinstance(x, dict) else x
            inside += x.values() if isinstance(x, dict) else x
    x = None
    if not _held_elsewhere(results, result, inside, ids):
        return []
    made = [t for t in results if id(t) in ids]
    return [(p, j, ids[id(x)]) for p in places(made) if id(p.holder) not in own
            for j, x in (enumerate(p.obj) if isinstance(p.obj, tuple) else [(None, p.obj)])
            if id(x) in ids]  # fmt: skip


def _held_elsewhere(results: list, result: Any, inside: list, ids: dict[int, int]) -> bool:
    """Whether a result tensor has more references than the step's own: its places in
    `results`, in the result's containers and in `inside` (which lists what those hold), the
    frames of `capture`, `finish`, `held_where` and this function holding a bare `result`, and
    `getrefcount`'s argument. Only then is the heap swept for its holders (a sweep of a large
    heap takes tens of ms, and a traced step's result is seldom kept). References the count
    misses only cost a sweep."""
    for k in set(ids.values()):
        own = sum(u is results[k] for u in results) + 2 * sum(u is results[k] for u in inside)
        own += 4 if result is results[k] else 0
        if sys.getrefcount(results[k]) > own + 1:
            return True
    return False


def keep(held: list[Held], results: Sequence[Any]) -> None:
    """Put a call's results where the trace found them held, as the eager step would have left
    them there (the trace's symbolic tensors must not stay there)."""
    for p, j, k in held:
        if j is None:
            p.holder[p.key] = results[k]
        else:
            parts = list(p.holder[p.key])
            parts[j] = results[k]
            p.holder[p.key] = tuple(parts)


class Before(tuple):
    """The tensors an attribute held as the step entered its object (one, or a tuple's); not a
    reference that keeps them in use (`_unreferenced`)."""

    was_tuple: bool

    @classmethod
    def of(cls, v: Any) -> Before:
        out = cls(v if isinstance(v, tuple) else (v,))
        out.was_tuple = isinstance(v, tuple)
        return out


def _computed_from(value: ir.Value, made_by: dict[ir.Value, ir.Node]) -> set[ir.Value]:
    """The values `value` is computed from (the step's inputs among them), itself included."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(made_by[v].inputs if v in made_by else ())
    return seen


def is_array(x: Any) -> bool:
    """A leaf of a traced call's results (and of its arguments, with `is_argument`)."""
    return isinstance(x, Tensor | np.ndarray)


@dataclass(eq=False)  # one per tensor: equal only to itself (fields hold tensors)
class Slot:
    """A tensor from outside the trace: what it held before, and its symbolic stand-in."""

    tensor: Tensor
    value: Any
    grad: Tensor | None
    version: int  # in-place writes so far: a write is counted when a plan stores it, not here
    input: ir.Value | None = None
    arg: int | None = None  # the position among the call's array arguments, if it is one
    at: Spot | None = None  # read from there at each call (`Tracer.follow_held`)
    requires_grad: bool = False  # as the step entered: a plan traced for one is wrong for the other

    @property
    def ref(self) -> Ref:
        return Ref(None, self.arg) if self.arg is not None else Ref(self.tensor, None, at=self.at)


# A place in Python state and the position in the tuple it holds there (None: the place itself)
Spot = tuple[dict | list, Any, int | None]


@dataclass(frozen=True, eq=False)
class Ref:
    """Whom a plan reads or writes: argument `arg` of each call (another tensor every call,
    maybe), a tensor captured while tracing (a parameter, optimizer state), or the tensor a
    spot in Python state holds at each call (state the step replaces by a result it keeps)."""

    tensor: Tensor | None
    arg: int | None
    grad: bool = False  # the `.grad` of that tensor at each call, whichever tensor it is then
    at: Spot | None = None

    def resolve(self, arg_leaves: Sequence[Any]) -> Any:
        if self.at is not None:
            t = _occupant(*self.at)
        else:
            t = self.tensor if self.arg is None else arg_leaves[self.arg]
        return t._grad if self.grad and t is not None else t

    def as_grad(self) -> Ref:
        return Ref(self.tensor, self.arg, True, self.at)


def _occupant(holder: dict | list, key: Any, pos: int | None) -> Tensor | None:
    """The tensor at a spot now, if one is there (a guard fails where none is)."""
    if isinstance(holder, dict):
        x = holder.get(key)
    else:
        x = holder[key] if key < len(holder) else None
    if pos is not None:
        x = x[pos] if isinstance(x, tuple) and pos < len(x) else None
    return x if isinstance(x, Tensor) else None


class Snapshot(dict):
    """A dict as the step entered it (`Tracer.dicts_before`): the trace's record, not Python
    state that keeps its tensors."""


# The trace's own records of tensors: not Python state that keeps or places them.
_TRACE_RECORDS = (Slot, Ref, Place, Before, Snapshot)


@dataclass
class Capture:
    """The result of tracing: the graph and how its inputs and outputs map to tensors."""

    graph: ir.Graph
    args: list[int]  # graph.inputs[:len(args)] are these array arguments; the rest are `reads`
    reads: list[tuple[Ref, bool]]  # graph.inputs after the arguments: (whom, read its .grad)
    value_writes: list[Ref]  # whose value the outputs after the results replace
    grad_writes: list[tuple[Ref, bool]]  # (whose grad, grad is None afterwards)
    result_tree: Any
    n_results: int
    numbers: list[int]  # results that are Python numbers (`.item()`), as 0-d values in the graph
    # per state tensor: its shape, dtype, whether its grad is None (None: either) and whether
    # it requires grad
    guards: list[tuple[Ref, tuple, np.dtype, bool | None, bool]] = field(default_factory=list)
    checks: list[Callable[[], bool]] = field(default_factory=list)  # from `guard()`
    watched: list[Watch] = field(default_factory=list)
    after: list[Callable[[], None]] = field(default_factory=list)  # from `after_call()`
    places: list[Place] = field(default_factory=list)  # where kept tensors go back (`put_back`)
    held: list[Held] = field(default_factory=list)  # where results go (`keep`)
    # a result autograd tracks from a function that ran no backward (a compiled forward or
    # loss): its gradient is the caller's to ask for, which a plan's results cannot give
    needs_backward: bool = False

    def changed(self) -> list[Watch]:
        """The baked-in values worth a warning that no longer hold: why a new trace."""
        return [w for w in self.watched if w.warn and not w.holds()]

    def guards_hold(self) -> bool:
        """Whether the plan holds for this call (loops, not all() over generators: a small
        step's every call asks each of its guards)."""
        for ref, shape, dtype, no_grad, grads in self.guards:
            if not _guard_holds(ref.resolve(()), shape, dtype, no_grad, grads):
                return False
        for w in self.watched:
            if not w.holds():
                return False
        for check in self.checks:
            if not check():
                return False
        return True


def _guard_holds(t: Tensor | None, shape: tuple, dtype: np.dtype, no_grad: bool | None,
                 requires_grad: bool) -> bool:  # fmt: skip
    """`no_grad`: whether its grad must be None (None: either, for a plan that reads no grad)."""
    if t is None:
        return False
    a = t._value  # its shape and dtype directly: a step checks a guard per state tensor
    return (a.shape == shape and a.dtype == dtype and no_grad in (None, t._grad is None)
            and t._requires_grad is requires_grad)  # fmt: skip


@dataclass
class Watch:
    """A Python value the trace read and baked in (a module's training flag, a number from the
    step's globals): the plan is valid while `get()` still equals `value`. `warn`: a change is
    worth a warning, since each one compiles a new plan (a module switching between train and
    eval is not)."""

    describe: str
    get: Callable[[], Any]
    value: Any
    warn: bool = True
    same: bool = False  # holds while `get()` is the very object (`_Reference`) it was

    def holds(self) -> bool:
        now = self.get()
        if self.same:
            return self.value.refers_to(now)
        # `is`: a NaN holds; the type: a tensor where a number was does not
        return now is self.value or type(now) is type(self.value) and now == self.value

    def change(self) -> str:
        """What changed, for a warning: "`name` changed (old -> new)"."""
        if self.same:
            return f"{self.describe} is another {type(self.get()).__name__} now"
        return f"{self.describe} changed ({self.value!r} -> {self.get()!r})"


def watch(key: Any, describe: str, get: Callable[[], Any], warn: bool = True,
          same: bool = False) -> None:  # fmt: skip
    """While tracing: the plan being traced is valid while `get()` returns what it returns now
    (once per `key`): an equal value, or with `same` the very object. Does nothing outside
    tracing."""
    if Listeners.tracers and key not in Listeners.tracers[-1].watched:
        value = _Reference(get()) if same else get()
        Listeners.tracers[-1].watched[key] = Watch(describe, get, value, warn, same)


class _Reference:
    """Which object (or tuple of objects: an LSTM's `(h, c)`) a place held: weakly where it can
    (a tensor the step replaces must not be kept alive by the watch), else strongly (a dict)."""

    def __init__(self, x: Any):
        self.kind = type(x)
        if isinstance(x, tuple):
            self.ref: Any = tuple(_Reference(v) for v in tuple.__iter__(x))
            return
        try:
            self.ref = weakref.ref(x)
        except TypeError:
            self.ref = lambda: x

    def refers_to(self, now: Any) -> bool:
        if type(now) is not self.kind:
            return False
        if isinstance(self.ref, tuple):
            return tuple.__len__(now) == len(self.ref) and all(  # as stored (`_stored_as`)
                r.refers_to(v) for r, v in zip(self.ref, tuple.__iter__(now), strict=True)
            )
        return now is self.ref()


GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
NAME_LOADS = GLOBAL_LOADS | {"LOAD_ATTR", "LOAD_METHOD"}  # not STORE_ATTR: `self.x = ...`


def name_of(fn: Any) -> str:
    """What messages and plans call a traced callable: a function's name; a
    `functools.partial`'s, its function's; a module's or another callable object's, its
    class's."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", None) or type(fn).__name__


def watch_python_values(fn: Callable) -> None:
    """Watch what `fn` reads from its globals and closure cells (and so do the functions and
    lambdas written inside it, and the functions it names there), and through them what the
    containers and objects there hold (`cfg["beta"]`, `args.kl_weight`, `state["model"]`; a
    bound method's object too): the trace bakes in the numbers, flags, strings and NumPy arrays
    it read, and the tensors, models and optimizers it found, so a plan holds while the same
    ones are there."""
    if hasattr(fn, "__wrapped__"):  # a decorator's function (functools.wraps), and the one inside
        watch_python_values(fn.__wrapped__)
    owner = getattr(fn, "__self__", None)
    while not hasattr(fn, "__code__") and hasattr(fn, "__func__") or hasattr(fn, "func"):
        fn = getattr(fn, "__func__", None) or fn.func  # bound methods, functools.partial
    code = getattr(fn, "__code__", None)
    if code is None or not Listeners.tracers or fn in Listeners.tracers[-1].functions_read:
        return
    Listeners.tracers[-1].functions_read.add(fn)
    if _is_ours(fn):  # the library's code: the user's function it wraps says `__wrapped__`
        return
    scope, names = fn.__globals__, names_read(fn)
    for name in _global_loads(code):
        _note_keys(scope.get(name))
        _watch_reached(functools.partial(_entry, scope, name), ("global", id(scope), name),
                       f"global `{name}`", names)  # fmt: skip
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
        if (content := _cell(cell)) is _MISSING:  # an empty cell
            continue
        _note_keys(content)
        _watch_reached(functools.partial(_cell, cell), ("closure", id(cell)),
                       f"`{name}` (from an enclosing function)", names)  # fmt: skip
    if owner is not None:
        _watch_entries(owner, type(owner).__name__, names, 1)


def watch_arguments(fn: Callable, args: tuple, kwargs: dict) -> None:
    """Watch what `fn` reads of the objects passed to it (a method's `self`: `self.alpha`, a
    module's settings), as of a bound method's object (`watch_python_values`); the arguments
    themselves are the signature's (compared by equality, most objects by identity)."""
    fn = inspect.unwrap(fn)  # a compiled forward's wrapper: the user's function
    code = getattr(fn, "__code__", None)
    if code is None or not Listeners.tracers:
        return
    params, names = code.co_varnames[: code.co_argcount], names_read(fn)
    named = [(params[i] if i < len(params) else str(i), a) for i, a in enumerate(args)]
    for name, value in [*named, *kwargs.items()]:
        if hasattr(value, "__dict__") and not isinstance(value, (Tensor, np.ndarray, *_CODE)):
            _watch_entries(value, f"argument `{name}`", names, 1)


REACH_DEPTH = 3  # `cfg.train.optim["lr"]`: deeper, the values are data more than settings
REACH_ENTRIES = 64  # a container or object with more entries is data, not settings
_MISSING = object()
# read by reference and not watched: modules, classes and functions (the code the step runs)
_CODE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
         types.MethodType, types.MethodWrapperType, functools.partial)  # fmt: skip


def _is_ours(fn: Any) -> bool:
    """Whether `fn` is tracegrad's own code (a module's forward, a compiled call's wrapper):
    what it reads of its globals is the library's, and the settings it reads are guarded where
    they are kept (`nn.modules._watch_settings`)."""
    name = module_name(fn.__globals__)
    return name == "tracegrad" or name.startswith("tracegrad.")


def _stored_as(seq: list | tuple) -> type:
    """list or tuple, whose own `len` and indexing read what a subclass stores (e3nn's `Irreps`
    redefines both, and its `len` raises)."""
    return tuple if isinstance(seq, tuple) else list


def _entry(holder: Any, key: Any) -> Any:
    """What a dict's key, a list's or tuple's index, or an object's attribute holds now."""
    if type(holder) is dict:
        return holder.get(key, _MISSING)
    if isinstance(holder, list | tuple):
        base = _stored_as(holder)
        return base.__getitem__(holder, key) if key < base.__len__(holder) else _MISSING
    return getattr(holder, key, _MISSING)


def put(get: Callable[[], Any], value: Any) -> None:
    """Put `value` where `get` (a partial of `_entry` or `_cell`, or of `_baked_at` of one)
    reads."""
    if get.func is _baked_at:
        get = get.args[0]
    if get.func is _cell:
        get.args[0].cell_contents = value
    elif get.func is _entry:
        holder, key = get.args
        if isinstance(holder, dict | list):
            holder[key] = value
        elif not isinstance(holder, tuple):
            setattr(holder, key, value)


def _spot(get: Callable[[], Any]) -> Spot | None:
    """The dict (an object's attributes) or list entry a partial of `_entry` reads; None for a
    closure cell or a tuple."""
    if not isinstance(get, functools.partial) or get.func is not _entry:
        return None
    holder, key = get.args
    if isinstance(holder, dict | list):
        return holder, key, None
    attrs = getattr(holder, "__dict__", None)
    return (attrs, key, None) if isinstance(attrs, dict) and key in attrs else None


def _baked_at(get: Callable[[], Any]) -> Any:
    """What the trace bakes in (`baked`) of the value `get()` returns."""
    return baked(get())


def _cell(cell: Any) -> Any:
    """What a closure cell holds now (`_MISSING` while it is empty)."""
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


def _holds_tensors(x: Any) -> bool:
    return isinstance(x, Tensor) or isinstance(x, tuple) and any(isinstance(v, Tensor) for v in x)


def _is_setting(x: Any) -> bool:
    """A value the trace bakes in where the step reads it: compared by value at each call."""
    return _is_baked(x) or x is None or isinstance(x, str | bytes)


def _watch_reached(get: Callable[[], Any], key: Any, describe: str, names: frozenset[str],
                   depth: int = 0, follow: bool = True) -> None:  # fmt: skip
    """Watch the value `get()` returns: a setting by value, anything else but code by identity,
    and a container's or object's entries in turn (`_watch_entries`). A tensor there is noted
    with its spot (unless not to `follow` it: a module's own), which `Tracer.follow_rebound`
    may read at each call instead of watching the tensor."""
    value = get()
    if _is_setting(value):
        Listeners.tracers[-1].reached.append(key)
        watch(key, describe, functools.partial(_baked_at, get))
    elif isinstance(value, types.FunctionType):  # a helper the step calls: what it reads
        watch_python_values(value)
    elif not isinstance(value, _CODE) and value is not _MISSING:
        Listeners.tracers[-1].reached.append(key)
        watch(key, describe, get, same=True)
        if isinstance(value, Tensor) and follow and (spot := _spot(get)) is not None:
            Listeners.tracers[-1].tensor_spots[key] = (id(value), spot)
        if depth < REACH_DEPTH:
            _watch_entries(value, describe, names, depth + 1)


def watch_place(holder: Any, key: Any, describe: str) -> None:
    """While tracing: the plan being traced holds while `holder`'s entry `key` (a dict's key, an
    object's attribute) holds what it holds now: the same value, or the same object (a
    module's parameter, a submodule), unless the step itself puts a tensor of its own there.
    Does nothing outside tracing."""
    if Listeners.tracers:
        _watch_reached(functools.partial(_entry, holder, key), ("entry", id(holder), key),
                       describe, frozenset(), REACH_DEPTH, follow=False)  # fmt: skip


def _watch_entries(value: Any, describe: str, names: frozenset[str], depth: int) -> None:
    """The entries of a dict, list or tuple, or the attributes of an object that the code names
    (`names`): watched in turn. An object that knows what a trace reads of it (a module, an
    optimizer) watches itself (`__tracegrad_watch__`); a tensor's value is the plan's input."""
    hook = getattr(type(value), "__tracegrad_watch__", None)
    if hook is not None:
        hook(value)
        return
    if isinstance(value, Tensor):
        return
    if type(value) is dict:
        keys, show = list(value), "{}[{!r}]"
    elif isinstance(value, list | tuple):
        keys, show = range(_stored_as(value).__len__(value)), "{}[{}]"
    else:
        attrs = getattr(value, "__dict__", None)
        keys, show = [k for k in (attrs or ()) if k in names], "{}.{}"
        for name in names if attrs is not None else ():  # `trainer.loss(x)`: what it reads
            if isinstance(inspect.getattr_static(type(value), name, None), types.FunctionType):
                watch_python_values(getattr(value, name))
    for k in keys if len(keys) <= REACH_ENTRIES else ():
        _watch_reached(functools.partial(_entry, value, k), ("entry", id(value), k),
                       show.format(describe, k), names, depth)  # fmt: skip


def _note_keys(x: Any) -> None:
    """A dict the step reads from its globals or a closure: its keys as the step enters, so
    that one it adds to keep a tensor it made is known for what it is (`Tracer.watch_filled`)."""
    if type(x) is dict and Listeners.tracers:
        Listeners.tracers[-1].dicts_before.setdefault(id(x), (x, Snapshot(x)))


@dataclass(frozen=True)
class Contents:
    """What a plan baked in of a NumPy array: its shape, dtype and a checksum of its bytes.
    Compared at each call, it sees the array changed in place (`np.random.shuffle(idx)`) or
    replaced by one with other contents, at the cost of reading it, not of keeping a copy."""

    shape: tuple
    dtype: str
    checksum: int

    def __repr__(self) -> str:
        return f"{self.dtype} array of shape {self.shape}, checksum {self.checksum:08x}"


def baked(x: Any) -> Any:
    """What the trace bakes in of `x`, to compare at each call: a number itself, an array's
    `Contents` (an array of objects: itself, compared by identity)."""
    if not isinstance(x, np.ndarray) or x.dtype.hasobject:
        return x
    data = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    return Contents(x.shape, x.dtype.name, zlib.crc32(data))


def names_read(*fns: Any) -> frozenset[str]:
    """The global and attribute names the code of `fns` (and of the functions written inside
    them) reads: `self.idx` in a method names `idx`; `self.idx = ...` does not."""
    codes = (getattr(getattr(f, "__func__", f), "__code__", None) for f in fns)
    return frozenset().union(*(_loads(c, NAME_LOADS) for c in codes if c is not None))


def _global_loads(code: Any) -> tuple[str, ...]:
    """The global names `code` reads, and the functions and lambdas written inside it, sorted
    (globals only: co_names also lists attribute names, and `opt.step()` is not global `step`)."""
    return tuple(sorted(_loads(code, GLOBAL_LOADS)))


@functools.lru_cache(maxsize=4096)
def _loads(code: Any, opnames: frozenset[str]) -> frozenset[str]:
    """The names `code` and the code written inside it load by instructions `opnames`:
    disassembled once per function, not at each call of a module's forward while tracing."""
    codes, names = [code], set()
    while codes:
        c = codes.pop()
        names.update(i.argval for i in dis.get_instructions(c) if i.opname in opnames)
        codes += [k for k in c.co_consts if hasattr(k, "co_names")]
    return frozenset(names)


def _is_baked(x: Any) -> bool:
    """A value the trace bakes in where the step reads it: a number or a NumPy array."""
    return isinstance(x, int | float | complex | np.number | np.ndarray)


def guard(check: Callable[[], bool]) -> None:
    """While tracing: the plan being traced is valid only while `check()` is true; a call for
    which it is false traces again. For Python values a traced function bakes in (an
    optimizer's momentum, a flag). Does nothing outside tracing."""
    if Listeners.tracers:
        Listeners.tracers[-1].checks.append(check)


def set_in_step(key: Any, apply: Callable[[], None]) -> None:
    """While tracing: the step sets the Python value `watch` calls `key` (a module's training
    flag: `train()` inside the step) by `apply()`. From then on the trace reads the step's own
    setting, not the caller's, so it is not guarded (unless read before); and each call of the
    plan ends with `apply()`, as the step would (the last setting wins). Does nothing outside
    tracing."""
    if Listeners.tracers:
        tracer = Listeners.tracers[-1]
        tracer.watched.setdefault(key, None)
        tracer.after[key] = apply


def after_call(key: Any, fn: Callable[[], None]) -> None:
    """While tracing: run `fn` after each call of the plan being traced has written its state
    back (once per `key`), to bring Python mirrors of that state up to date (a scheduler's
    `last_epoch` and its optimizer's `group["lr"]`). Does nothing outside tracing."""
    if Listeners.tracers:
        Listeners.tracers[-1].after.setdefault(key, fn)


class Tracer:
    """Listens to `bind` while a traced function runs; builds the graph node by node."""

    def __init__(self) -> None:
        self.start = next_serial()
        self.nodes: list[ir.Node] = []
        self.slots: dict[int, Slot] = {}
        self.consts: dict[int, tuple[Tensor, ir.Value]] = {}
        self.checks: list[Callable[[], bool]] = []
        self.watched: dict[Any, Watch | None] = {}  # None: set by the step (`set_in_step`)
        self.walked: set[int] = set()  # ids of the modules whose settings are watched
        self.after: dict[Any, Callable[[], None]] = {}
        self.weak: set[ir.Value] = set()  # stand-ins for Python numbers: they promote weakly
        self.made: list[weakref.ref[Tensor]] = []  # every symbolic tensor made while tracing
        self.made_values: list[tuple] = []  # those made with a value, and that value
        self.held_before: dict[int, dict[Any, Any]] = {}  # id(object's dict) -> its tensors
        self.list_lengths: dict[int, int] = {}  # id(a list attribute) -> its length, before
        # id(a module's attributes, a dict the step read) -> it and a copy as the step entered
        self.dicts_before: dict[int, tuple[dict, dict]] = {}
        self.read_tensors: dict[int, Tensor] = {}  # state read as Python values (`read`)
        self.reached: list[Any] = []  # keys of the watches `watch_python_values` made
        # tensors it found in Python state, by watch key: (the tensor's id, the spot holding
        # it); not the tensor, whose other referrers `follow_held` counts
        self.tensor_spots: dict[Any, tuple[int, Spot]] = {}
        self.functions_read: set[Callable] = set()  # the functions whose reads it watched

    def number(self, t: Tensor) -> Tensor:
        """`t.item()` while tracing: a 0-d tensor that promotes as a Python number (`weak`), as
        does arithmetic on it with numbers. Returned by the step, it is the call's number
        (`Capture.numbers`); used to decide (`if`, `float()`, formatting) it refuses, as before,
        and kept in Python state it refuses (`finish`): a plan would not append or store it at
        every call."""
        t = t.detach()  # a Python number carries no gradient
        out = P.reshape(t, shape=()) if t.shape != () else P.positive(t)
        self.weak.add(out._value)
        return out

    def read(self, t: Tensor, value: np.ndarray, what: str) -> None:
        """A concrete tensor (state the step has not used yet: a module's `initted` flag) read
        as a Python value by `what` (an `if`, `.item()`): the plan bakes in what it saw, so it
        holds while `t` holds that value, and another value traces again (PyTorch's compiler
        guards such a read, or breaks the graph there). Not for a constant made in the step."""
        if t._serial <= self.start and value.size == 1 and ("read", id(t)) not in self.watched:
            where = f"the tensor read by {what} at {user_location()}"
            self.watched["read", id(t)] = Watch(where, lambda: t._value.item(), value.item())
            self.read_tensors[id(t)] = t

    def remember(self, obj: Any) -> None:
        """What `obj`'s attributes hold as the step first enters it (a module's forward): a
        tensor the step keeps where one of them was replaced that one (`follow_replacements`).
        A detached alias stands for its tensor."""
        attrs = vars(obj)
        if id(attrs) not in self.held_before:
            self.dicts_before.setdefault(id(attrs), (attrs, Snapshot(attrs)))
            self.held_before[id(attrs)] = {k: Before.of(v) for k, v in attrs.items()
                                           if isinstance(v, Tensor | tuple)}  # fmt: skip
            self.list_lengths.update((id(v), len(v)) for v in attrs.values()
                                     if isinstance(v, list))  # fmt: skip
            for v in attrs.values():
                if isinstance(v, dict):  # a module's registries too (dict subclasses)
                    self.dicts_before.setdefault(id(v), (v, Snapshot(v)))

    def process(self, prim: Any, inputs: list[Tensor], params: dict, shape: tuple, dtype: Any):
        ins = [self.lift(t) for t in inputs]
        out = ir.Value(shape, dtype)
        update = Listeners.update if Listeners.phase is Phase.UPDATE else None
        node = ir.Node(prim, ins, [out], params, user_location(), Listeners.phase,
                       Listeners.module, update)  # a Scope until `finish` names it  # fmt: skip
        self.nodes.append(node)
        return out

    def lift(self, t: Tensor) -> ir.Value:
        """The symbolic value of `t`: its own, a constant, or a new state input."""
        if isinstance(t._value, ir.Value):
            return t._value
        if t._serial > self.start:
            if id(t) not in self.consts:
                self.consts[id(t)] = (t, ir.Value(t.shape, t.dtype, const=t._value))
            return self.consts[id(t)][1]
        return self.stand_in(t)

    def stand_in(self, t: Tensor, arg: int | None = None) -> ir.Value:
        """Make `t` a graph input: its value becomes symbolic until `restore()`."""
        slot = self.slot(t)
        slot.input, slot.arg = ir.Value(t.shape, t.dtype), arg
        t._value = slot.input
        return slot.input

    def slot(self, t: Tensor) -> Slot:
        if id(t) not in self.slots:
            self.slots[id(t)] = Slot(
                t, t._value, t._grad, t._version[0], requires_grad=t._requires_grad
            )
        return self.slots[id(t)]

    def will_write(self, t: Tensor) -> None:
        """Called before a tensor's value or grad changes: remember what to restore. A tensor
        made in the step with a value of its own (`zeros_like(p)`, an optimizer's state made at
        its first step) becomes symbolic: it is then one of the step's, which `escaped` finds."""
        if t._serial <= self.start:
            self.slot(t)
        elif t._value.__class__ is not ir.Value:
            self.made.append(weakref.ref(t))
            self.made_values.append((weakref.ref(t), t._value, t._grad, t._version[0]))

    def restore(self) -> None:
        """Every tensor the trace wrote holds what it held before: those from before the step,
        and those made in it with a value of their own (a refused trace leaves them in Python
        state, an optimizer's lazily made step count, which the eager run then steps)."""
        for s in self.slots.values():
            s.tensor._value, s.tensor._grad, s.tensor._version[0] = s.value, s.grad, s.version
        for ref, value, grad, version in self.made_values:
            t = ref()
            if t is not None:
                t._value, t._grad, t._version[0] = value, grad, version

    def escaped(self, results: list[Any]) -> list[Tensor]:
        """Tensors made inside the step, other than its results, that outlive it: kept in
        Python state (`self.mask = ...` in a module's forward, cached for the next call). Each
        becomes an output of the plan, written into that tensor at every call, so that after a
        call it holds what the eager step would have left in it (symbolic values of a finished
        trace would otherwise be read by later calls and traces)."""
        own = {*(v for n in self.nodes for v in n.outputs),
               *(s.input for s in self.slots.values() if s.input is not None)}  # fmt: skip
        skip = {id(x) for x in results} | set(self.slots)
        skip |= {id(s.tensor._grad) for s in self.slots.values()}
        out: dict[int, Tensor] = {}
        for ref in self.made:
            t = ref()
            if t is not None and id(t) not in skip and t._value.__class__ is ir.Value:
                if t._value in own:
                    out.setdefault(id(t), t)
        return list(out.values())

    def follow_replacements(self, results: list[Any]) -> None:
        """State the step replaced rather than updated (`self.running_mean = 0.9 *
        self.running_mean + ...`): the plan would read the old tensor at every call, while
        Python state holds the new one. Where a tensor made in the step and kept in Python
        state was computed from a state tensor of its shape and dtype that nothing but this
        trace refers to any more, the old tensor takes the new one's place in that state (its
        dicts, lists and attributes) and its value, as an in-place update would: the plan then
        reads and writes it at every call."""
        escaped = tuple(self.escaped(results))  # a tuple: `_substitute` rewrites lists
        kinds = {(t.shape, t.dtype) for t in escaped}
        state = [s.tensor for s in self.slots.values()
                 if s.arg is None and (s.tensor.shape, s.tensor.dtype) in kinds]  # fmt: skip
        if not state:
            return  # the common case: nothing made in the step outlives it
        gone = _unreferenced(state, self.snapshot_tuples())
        replaced = [s for s in self.slots.values() if id(s.tensor) in gone]
        made_by = {v: n for n in self.nodes for v in n.outputs}
        where = self._held_where(escaped)
        # those in the attribute whose old tensor they replaced claim it first: a tensor kept
        # only by its detached alias (`(0.5 * self.h + x).detach()`) was computed from it too
        for new in sorted(escaped, key=lambda t: id(t) not in where):
            reads = _computed_from(new._value, made_by)
            pairs = [s for s in replaced if s.input in reads
                     and (s.tensor.shape, s.tensor.dtype) == (new.shape, new.dtype)]  # fmt: skip
            was, name = where.get(id(new), (None, None))
            if was is not None and was.input in reads:
                if was not in replaced:
                    raise TraceError(
                        f"the step replaced the tensor of shape {new.shape} in attribute "
                        f"`{name}` by one it computed from it, and the old one stays referenced "
                        "elsewhere (`prev = cur; cur = f(cur)`): a compiled step reads fixed "
                        "tensors and cannot follow that; update it in place (`cur.copy_(...)`) "
                        "or pass the state in and return it"
                    )
                pairs = [was]
            if len(pairs) == 1:
                _substitute(new, pairs[0].tensor)
                pairs[0].tensor._value = new._value
                replaced.remove(pairs[0])

    def _held_where(self, kept: Sequence[Tensor]) -> dict[int, tuple[Slot, Any]]:
        """For each kept tensor found in an attribute (or a tuple in one) of an object the
        step entered, the state tensor that attribute held before (`remember`): the one it
        replaced, whichever others it was also computed from (an LSTM's new h from h and c)."""
        out = {}
        for p in places(kept) if self.held_before else ():
            before = self.held_before.get(id(p.holder), {}).get(p.key)
            if before is None or isinstance(p.obj, tuple) != before.was_tuple:
                continue
            for new, old in zip(p.obj if before.was_tuple else (p.obj,), before, strict=False):
                # a detached alias stands for its tensor, if the step read that one
                bases = (old._base, old) if isinstance(old, Alias) else (old,)
                slot = next((self.slots[id(b)] for b in bases if id(b) in self.slots), None)
                if (
                    slot is not None
                    and slot.arg is None
                    and isinstance(new, Tensor)
                    and ((old.shape, old.dtype) == (new.shape, new.dtype))
                ):
                    out[id(new)] = slot, p.key
        return out

    def follow_held(self, held: list[Held], results: list[Any]) -> None:
        """A result the step also keeps where a state tensor was, computed from it (`self.h =
        0.5 * self.h + x; return self.h`): each call leaves its result there (`keep`), so the
        next must read what that spot holds then, not the tensor the trace read, which the
        plan never writes. Where one such state tensor is gone from Python state, it is read
        from the spot from now on (`Slot.at`); in a module's attribute, the one it held as the
        step entered the module."""
        state = [s for s in self.slots.values() if s.arg is None and s.input is not None]
        if not held or not state:
            return
        gone = _unreferenced([s.tensor for s in state], self.snapshot_tuples())
        made_by = {v: n for n in self.nodes for v in n.outputs}
        for place, pos, i in held:
            new = results[i]
            if new._value.__class__ is not ir.Value:
                continue  # a constant: computed from nothing
            reads = _computed_from(new._value, made_by)
            kind = (new.shape, new.dtype)
            pairs = [s for s in state if s.input in reads and id(s.tensor) in gone
                     and s.at is None and (s.tensor.shape, s.tensor.dtype) == kind]  # fmt: skip
            before = self.held_before.get(id(place.holder), {}).get(place.key)
            if before is not None:  # a module's attribute: the tensor it held then
                old = before[pos if before.was_tuple and pos is not None else 0]
                olds = (old, getattr(old, "_base", None))  # (a detached alias: its tensor)
                pairs = [s for s in pairs if any(s.tensor is o for o in olds)]
            if len(pairs) == 1:
                pairs[0].at = (place.holder, place.key, pos)
                keep([(place, pos, 0)], [pairs[0].tensor])  # the first call reads it there

    def follow_rebound(self) -> None:
        """A tensor that does not require grad, read by the step from a global, a dict, a list
        or an object's attribute (a batch, a hidden state made outside): each call reads the
        tensor that place holds then, guarded by its shape and dtype as an argument is, instead
        of this tensor by identity; a loop that rebinds `x = next_batch()` before each call then
        runs one plan, as PyTorch's compiled step does. (A parameter keeps its identity watch:
        its optimizer updates that object.)"""
        for key, (ident, spot) in self.tensor_spots.items():
            s, w = self.slots.get(ident), self.watched.get(key)
            if s is None or w is None or s.arg is not None or s.at is not None:
                continue
            if not s.requires_grad and _occupant(*spot) is s.tensor:  # not replaced by the step
                s.at = spot
                del self.watched[key]

    def follow_reads(self) -> None:
        """A tensor read as a Python value that the step then replaced in its module's
        attribute (`if self.initted: ...; self.register_buffer("initted", tensor(False))`):
        the next call's Python reads what the attribute holds then, so the guard does too."""
        for id_attrs, before in self.held_before.items() if self.read_tensors else ():
            attrs = self.dicts_before[id_attrs][0]
            for name, held in before.items():
                for pos, old in enumerate(held):
                    spot = (attrs, name, pos if held.was_tuple else None)
                    if id(old) in self.read_tensors and _occupant(*spot) is not old:
                        self.watched["read", id(old)].get = functools.partial(_number_at, spot)

    def watch_filled(self, kept_at: list[Place]) -> None:
        """State the step makes where it found none (`if self.h is None: self.h = zeros(...)`,
        a key it adds to a dict of its globals or of a module's attributes): the Python test
        that chose to make it is baked in, so this plan holds only while the place holds no
        tensor. After the first call it holds one, and the next call traces a plan that reads
        it (a warm-up, as `.grad` is)."""
        for p in kept_at:
            known = self.dicts_before.get(id(p.holder)) if isinstance(p.holder, dict) else None
            filled = known is not None and not isinstance(known[1].get(p.key), Tensor | tuple)
            if filled:
                get = functools.partial(_holds_tensor, p.holder, p.key)
                self.watched[("filled", id(p.holder), p.key)] = Watch(
                    f"`{p.key}`, which the step filled", get, False, warn=False
                )

    def snapshot_tuples(self) -> set[int]:
        """The tuples that only `dicts_before` still holds (an LSTM's old `(h, c)`): records,
        not state keeping their tensors."""
        tuples = [v for _, before in self.dicts_before.values() for v in before.values()
                  if type(v) is tuple]  # fmt: skip
        return {id(t) for t in tuples if all(isinstance(r, _TRACE_RECORDS) or r is tuples
                                             for r in gc.get_referrers(t))}  # fmt: skip

    def undo(self) -> None:
        """Put back the module attributes and dict entries a discarded trace (a refusal; a
        forward whose backward compiles apart) changed: the call has not happened, and the
        eager run or the next trace of it must find them as they were (not a trace's symbolic
        tensors, not a flag the step already cleared)."""
        for d, before in self.dicts_before.values():
            for k in [k for k in d if k not in before]:
                del d[k]
            d.update((k, v) for k, v in before.items() if d.get(k, _GONE) is not v)

    def donated_grads(self) -> list[Slot]:
        """The parameters whose `.grad` the step replaces (`zero_grad()` then `backward()`)
        without reading the old one: the old grad's buffer becomes an input the plan may write
        the new grad into (`plan.state_updates`), so that the step's end need not copy every
        gradient out of the arena. The guards keep the old grad there at each call."""
        return [
            s for s in self.slots.values()
            if s.arg is None and s.grad is not None and s.tensor._grad is not s.grad
            and s.tensor._grad is not None and id(s.grad) not in self.slots
            and (s.grad.shape, s.grad.dtype) == (s.tensor._grad.shape, s.tensor._grad.dtype)
        ]  # fmt: skip

    def changed_settings(self) -> list[tuple[Any, Watch]]:
        """The numbers, flags, strings and arrays the step read and has changed, by key (not
        a tensor it put there: `unwatch_replaced`)."""
        changed = [(key, w) for key in self.reached if (w := self.watched.get(key)) is not None
                   and not w.same and not w.holds()]  # fmt: skip
        return [(key, w) for key, w in changed if isinstance(now := w.get(), Contents)
                or _is_setting(now)]  # fmt: skip

    def follow_changed_settings(self) -> None:
        """A setting the step read and changed (`self.calls += 1`, a mode it switches): each
        call of the plan ends by setting what the step left (`after_call`), which is what an
        eager call leaves, since a plan runs only from the values the trace started from (its
        watches); the trace's own change is undone (`put_back_settings`). An array cannot be
        put back (the watch keeps its checksum): refused."""
        for key, w in self.changed_settings():
            if isinstance(w.get(), Contents) or isinstance(w.value, Contents):
                raise TraceError(
                    f"the step changed {w.describe}, a NumPy array it reads: a plan would not "
                    "change it again. Change it outside the compiled step, or keep it in a "
                    "tensor"
                )
            self.after[("set", key)] = functools.partial(put, w.get, w.get())

    def put_back_settings(self) -> None:
        """Undo the trace's changes to the settings the step read (the step ran its Python
        once, while tracing): they are the plan's to make at each call, or, where the trace
        refused, the eager call's."""
        for _, w in self.changed_settings():
            if not isinstance(w.value, Contents):
                put(w.get, w.value)

    def unwatch_replaced(self, filled: Sequence[Place]) -> None:
        """Forget the watches of places where the step itself puts a tensor (or a tuple of
        them: an LSTM's `(h, c)`) it made, `filled` or found there now: the plan puts its
        result there at each call, and the next call reads what is there (`follow_held`)."""
        spots = {(id(p.holder), p.key) for p in filled}
        for key in self.reached:
            w = self.watched.get(key)
            if w is None:
                continue
            if (
                key[0] in ("entry", "global")
                and key[1:] in spots
                or (not w.holds() and _holds_tensors(w.get()))
            ):
                del self.watched[key]

    def _refuse_lists(self, where: list[Place]) -> None:
        """A tensor the step made that a list holds, at an index the list did not have as the
        step entered the module holding it (or a list of no module's), may have been appended
        (`saved.append(x)`, REINFORCE's log-probabilities): a plan would not append it again
        at each call. A module's list entry assigned (`self.log[0] = x`) is written back."""
        appended = [p for p in where if isinstance(p.holder, list)
                    and p.key >= self.list_lengths.get(id(p.holder), 0)]  # fmt: skip
        if not appended:
            return
        listed = appended[0].obj
        for p in sorted(appended, key=lambda p: -p.key):  # the trace's own: an eager run follows
            if p.key < len(p.holder) and p.holder[p.key] is p.obj:
                del p.holder[p.key]
        values = {t._value for t in (listed if isinstance(listed, tuple) else (listed,))}
        made_at = next((n.source for n in self.nodes if values & set(n.outputs)), "its line")
        raise TraceError(
            "a tensor made in the traced function is kept in a list (`saved.append(x)`): a "
            "plan would not append it again at each call; return it and append it outside, or "
            f"keep it in an attribute or a dict (made at {made_at})"
        )

    def finish(self, result: Any) -> Capture:
        for ref in self.made:  # a view's base lives on only if the step keeps it (`escaped`)
            t = ref()
            if t is not None:
                t._view = None
        leaves, tree = pytree.flatten(result, is_array)
        outputs = [self.lift(as_tensor(x)) for x in leaves]
        # A gradient tensor read or written in the step is whatever `.grad` its owner holds at
        # each call: `zero_grad()` (set_to_none) between calls makes a new one.
        owners = {id(s.grad): s for s in self.slots.values() if s.grad is not None}

        def ref(s: Slot) -> Ref:
            return owners[id(s.tensor)].ref.as_grad() if id(s.tensor) in owners else s.ref

        self.follow_replacements(leaves)
        value_writes, grad_writes = [], []
        for s in list(self.slots.values()):
            t = s.tensor
            if t._value is not s.value and t._value is not s.input:
                value_writes.append(ref(s))
                outputs.append(self.lift(t))  # symbolic: _assign lifts what it stores
        kept = self.escaped(leaves)
        kept_numbers = [t._value for t in kept if t._value in self.weak]
        if kept_numbers:
            made_at = next(n.source for n in self.nodes if kept_numbers[0] in n.outputs)
            raise TraceError(
                "the number of a Tensor.item() in the traced step is kept in Python state (a "
                "list, an attribute): a plan would not store it again at every call; return it "
                f"from the step instead (made at {made_at})"
            )
        kept_at = places(kept) if kept else []
        held = held_where(leaves, result, self.slots)
        self._refuse_lists([*kept_at, *(p for p, _, _ in held)])
        self.follow_held(held, leaves)
        self.follow_rebound()
        self.follow_reads()
        self.watch_filled([*kept_at, *(p for p, _, _ in held)])
        for t in kept:
            value_writes.append(Ref(t, None))
            outputs.append(t._value)
            t._node = None  # the trace's tape is gone: the plan keeps values, not a graph
        for s in list(self.slots.values()):
            t = s.tensor
            if t._grad is not s.grad:
                grad_writes.append((ref(s), t._grad is None))
                if t._grad is not None:
                    outputs.append(self.lift(t._grad))
        args = [s for s in self.slots.values() if s.arg is not None and s.input is not None]
        state = [s for s in self.slots.values() if s.arg is None and s.input is not None]
        module_names(self.nodes)
        reads = [
            (owners[id(s.tensor)].ref, True) if id(s.tensor) in owners else (s.ref, False)
            for s in state
        ]
        donated = self.donated_grads()
        reads += [(s.ref, True) for s in donated]
        inputs = [s.input for s in args + state] + [ir.Value(s.grad.shape, s.grad.dtype)
                                                    for s in donated]  # fmt: skip
        graph = ir.Graph(inputs, self.nodes, outputs)
        self.unwatch_replaced([*kept_at, *(p for p, _, _ in held)])
        guards = [
            (ref(s), s.tensor._value.shape, s.tensor._value.dtype, s.grad is None, s.requires_grad)
            for s in self.slots.values()
            if ref(s).arg is None  # an argument's (and its .grad's) are in the signature
        ]
        numbers = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)
                   and x._value.__class__ is ir.Value and x._value in self.weak]  # fmt: skip
        tracked = any(isinstance(x, Tensor) and x.requires_grad for x in leaves)
        backward = any(n.phase is not Phase.FORWARD for n in self.nodes)
        return Capture(graph, [s.arg for s in args], reads, value_writes, grad_writes, tree,
                       len(leaves), numbers, guards, self.checks,
                       [w for w in self.watched.values() if w is not None],
                       list(self.after.values()), kept_at,
                       held, tracked and not backward)  # fmt: skip


def is_argument(x: Any) -> bool:
    """A leaf of a call's signature (`signature`): an array or a Python float."""
    return is_array(x) or type(x) is float


def _array_facts(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    """An argument's shape and NumPy dtype, read off a tensor's array (asked at every call)."""
    a = x._value if isinstance(x, Tensor) else x
    return tuple(np.shape(a)), np.dtype(a.dtype)


def signature(args: tuple, kwargs: dict, dynamic: frozenset[int] = frozenset()) -> tuple:
    """The leaves of a call (arrays and Python floats) and its key: the pytree of the other
    arguments; per array its shape, dtype, whether its grad is None, whether it requires grad,
    and which earlier leaf it is, if any (the same tensor passed twice); per float its value,
    unless its position is `dynamic` (then it is an input of the plan, as a 0-d float64)."""
    leaves, tree = pytree.flatten((args, kwargs), is_argument)
    odd = next((type(x) for x in leaves if overrides(type(x))), None)
    if odd is not None:
        raise TraceError(f"@trace: an argument is a {odd.__name__}, a Tensor subclass with its "
                         "own __torch_function__, which a compiled step would not call (the plan "
                         "runs tracegrad's ops): call the function uncompiled, or pass "
                         "x.as_subclass(torch.Tensor)")  # fmt: skip
    ids = [id(x) for x in leaves]
    spec = tuple(
        (("float", x) if i not in dynamic else ("dynamic float",))
        if type(x) is float
        else (*_array_facts(x), getattr(x, "_grad", None) is None,
              getattr(x, "requires_grad", False), ids.index(ident))
        for i, (x, ident) in enumerate(zip(leaves, ids, strict=True))
    )  # fmt: skip
    try:
        hash(tree)
    except TypeError as e:
        raise TypeError(f"@trace: a non-tensor argument must be hashable ({e})") from None
    return leaves, (tree, spec)


def capture(
    fn: Callable, args: tuple, kwargs: dict, dynamic: frozenset[int] = frozenset()
) -> Capture:
    """Run `fn` once on symbolic stand-ins for its tensor arguments (and the Python floats at
    `dynamic` positions of `signature`'s leaves) and record everything."""
    leaves, tree = pytree.flatten((args, kwargs), is_argument)
    tracer = Tracer()
    Listeners.tracers.append(tracer)
    discarded = True  # unless it returns a capture that a plan will run
    try:
        stand_ins: list[Any] = []
        for i, x in enumerate(leaves):
            if type(x) is float and i not in dynamic:
                stand_ins.append(x)  # baked in: the key holds its value
                continue
            t = x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))
            if not any(t is u for u in stand_ins):  # the same tensor twice: one input
                tracer.stand_in(t, arg=i)
                if type(x) is float:
                    tracer.weak.add(t._value)
            stand_ins.append(t)
        call_args, call_kwargs = pytree.unflatten(tree, stand_ins)
        watch_python_values(fn)
        watch_arguments(fn, args, kwargs)
        before = _global_random_states()
        result = fn(*call_args, **call_kwargs)
        tracer.follow_changed_settings()
        if _global_random_states() != before:
            raise TraceError(
                "the traced step drew numbers from Python's `random` or NumPy's global "
                "generator (np.random.rand, ...): a plan would repeat the ones drawn while tracing "
                "at every call. Draw with tracegrad's generator inside the step (torch.rand, "
                "torch.randint: drawn afresh at each call), or draw outside the step and pass "
                "the result as an argument"
            )
        cap = tracer.finish(result)
        discarded = cap.needs_backward  # traced again with its backward (`compiled_module`)
        return cap
    finally:
        Listeners.tracers.remove(tracer)
        tracer.put_back_settings()
        tracer.restore()
        if discarded:
            tracer.undo()


def _global_random_states() -> tuple:
    """Python's and NumPy's global generators' states: a draw changes one."""
    key, position = np.random.get_state()[1:3]
    return random.getstate(), position, key.tobytes()


def interpret(graph: ir.Graph, *args: Any) -> list[np.ndarray]:
    """The reference interpreter: every node with its primitive's NumPy implementation."""
    return ir.evaluate(graph, [np.asarray(a) for a in args])


__all__ = ["Capture", "TraceError", "Watch", "after_call", "capture", "guard", "interpret",
           "name_of", "set_in_step", "signature", "watch"]  # fmt: skip

"""The tape and the one backward engine behind `Tensor.backward`, `GradManager.backward`,
`vjp` and `grad` (those two are in grad_manager.py: they record with a GradManager).

A result of a recorded op points to a `TapeNode`; nodes point to their parents' nodes, never to
tensors. A node keeps only the values its VJP reads (the primitive's `saves`), so an intermediate
that backward does not need dies with its last Python reference. Leaves get an `AccumulateGrad`
node that holds them weakly, where gradients are delivered.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.errors import TraceError, user_location
from tracegrad.core.vocabulary import Phase
from tracegrad.frontend.tensor import Listeners, Tensor, as_tensor


class ShapeDtype:
    """What the tape remembers of an input it does not save: enough for `sum_to` and casts."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape, self.dtype = shape, dtype

    ndim = property(lambda self: len(self.shape))


class AccumulateGrad:
    """Where gradients for a leaf (or a tensor attached with no history) arrive (PyTorch's
    name for it)."""

    __slots__ = ("ref", "hooks", "post_hooks", "__weakref__")
    is_leaf = True
    parents: tuple = ()

    def __init__(self, tensor: Tensor):
        self.ref = weakref.ref(tensor)
        self.hooks: dict | None = None
        self.post_hooks: dict | None = None  # functions of the leaf, run after `accumulate`

    def name(self) -> str:
        """PyTorch's name of the node that accumulates into a leaf."""
        return "torch::autograd::AccumulateGrad"

    @property
    def variable(self) -> Tensor | None:
        """The leaf (PyTorch's AccumulateGrad.variable)."""
        return self.ref()

    next_functions: tuple = ()


# (pack, unpack) of `torch.autograd.graph.saved_tensors_hooks`, innermost last: what an op saves
# for backward is `pack(tensor)`, and backward reads `unpack(packed)`
SAVED_TENSORS_HOOKS: list[tuple[Callable[[Tensor], Any], Callable[[Any], Tensor]]] = []


class Packed:
    """A saved value as a saved-tensors hook packed it, and the hook that unpacks it."""

    __slots__ = ("packed", "unpack")

    def __init__(self, tensor: Tensor) -> None:
        pack, self.unpack = SAVED_TENSORS_HOOKS[-1]
        hooks = SAVED_TENSORS_HOOKS[:]
        SAVED_TENSORS_HOOKS.clear()  # what pack itself computes is not packed again
        try:
            self.packed = pack(tensor)
        finally:
            SAVED_TENSORS_HOOKS[:] = hooks

    def value(self) -> np.ndarray:
        return as_tensor(self.unpack(self.packed))._value


def _saved(value: Any) -> Any:
    """A saved value's array (unpacked, if a hook packed it)."""
    return value.value() if value.__class__ is Packed else value


class TapeNode:
    """One recorded op: its parents' nodes and exactly the values its VJP reads. What it holds
    of its inputs is in tuples of shapes, dtypes and arrays, which Python's cycle collector stops
    tracking (a graph of thousands of nodes is walked at each collection: a small op's worth of
    time per node); `unpack` makes the VJP's objects from them."""

    __slots__ = ("prim", "params", "parents", "saved_in", "saved_out", "avals", "freed",
                 "retained", "versions", "module", "hooks", "tracer", "__weakref__")  # fmt: skip
    is_leaf = False

    def __init__(self, prim: Any, params: dict, parents: list, inputs: list, out: Tensor):
        self.prim, self.params, self.parents = prim, params, parents
        self.avals = tuple([(t._value.shape, t._value.dtype) for t in inputs])
        kept = range(len(inputs))[prim.saved_inputs]
        self.saved_in = {i: inputs[i]._value for i in kept}
        saved = [inputs[i] for i in kept]
        if prim.saves_output:
            self.saved_out = out._value
            saved.append(out)
        else:
            self.saved_out = None
        if SAVED_TENSORS_HOOKS:  # each saved value given to the innermost hook's pack
            self.saved_in = {i: Packed(inputs[i]) for i in kept}
            self.saved_out = None if self.saved_out is None else Packed(out)
        versions = []  # each saved tensor's counter and its count now, in one flat list
        for t in saved:
            versions += (t._version, t._version[0])
        self.versions = versions
        self.freed = False
        self.retained: weakref.ref | None = None  # the tensor that called retain_grad()
        self.module = Listeners.module  # while tracing: its backward ops belong there too
        self.tracer = Listeners.tracers[-1] if Listeners.tracers else None  # recorded in it
        self.hooks: dict | None = None  # register_hook's functions of the cotangent, in order

    def name(self) -> str:
        """PyTorch's kind of name: its type's (MulBackward0, see `_node_type`)."""
        return type(self).__name__

    @property
    def next_functions(self) -> tuple[tuple[Any, int], ...]:
        """(node, 0) per input, as PyTorch's graph walk reads it: a leaf's node, an op's, or
        None for an input autograd does not track."""
        return tuple((p, 0) for p in self.parents)

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    def unpack(self) -> tuple[list, Tensor | None]:
        """The VJP's view of the inputs and output: tensors wired to this node's history."""
        if self.freed and (self.prim.saves_inputs or self.prim.saves_output):
            raise RuntimeError(
                f"trying to backward through '{self.name()}' a second time: its saved values were "
                "freed after the first backward. Pass retain_graph=True to the first backward "
                "if you need to backward twice."
            )
        versions = self.versions
        if any(versions[i][0] != versions[i + 1] for i in range(0, len(versions), 2)):
            raise RuntimeError(
                f"a value that '{self.name()}' saved for backward was modified in place after it "
                "was saved (e.g. a parameter updated under no_grad before backward); call "
                "backward before updating, or compute the update out of place"
            )
        ins = [
            Tensor._wrap(_saved(self.saved_in[i]), p) if i in self.saved_in else ShapeDtype(*aval)
            for i, (aval, p) in enumerate(zip(self.avals, self.parents, strict=True))
        ]
        out = None if self.saved_out is None else Tensor._wrap(_saved(self.saved_out), self)
        return ins, out

    def free(self) -> None:
        self.saved_in, self.saved_out = {}, None
        self.freed = True


# --- recording ---------------------------------------------------------------------------------

_NODE_TYPES: dict[Any, type] = {}


def _node_type(prim: Any) -> type:
    """The class of `prim`'s nodes, named as PyTorch names its (mul's `MulBackward0`; the op
    names are tracegrad's), for code that shows `type(t.grad_fn).__name__` (torchviz's
    drawings) or tests `grad_fn.name()`."""
    name = "".join(word.capitalize() for word in prim.name.split("_")) + "Backward0"
    _NODE_TYPES[prim] = type(name, (TapeNode,), {"__slots__": ()})
    return _NODE_TYPES[prim]


def _leaf_of(t: Tensor) -> Tensor | None:
    """The user's leaf behind `t` (itself, or the original of a saved-value view)."""
    if t._node is None:
        return t
    return t._node.ref() if t._node.is_leaf else None


def edge(t: Tensor) -> Any:
    """The node gradients of `t` flow into, or None if no one tracks `t`."""
    node = t._node
    if node is not None and (not node.is_leaf or t._requires_grad):
        return node  # an op's result, or a leaf that requires grad with its node made
    if node is None and not t._requires_grad and not Listeners.recording:
        return None  # the common untracked tensor, asked about at every op
    leaf = _leaf_of(t)
    recording = Listeners.recording
    if leaf is None or not (leaf._requires_grad or any(gm._has(leaf) for gm in recording)):
        return None
    if leaf._node is None:
        leaf._node = AccumulateGrad(leaf)
    return leaf._node


def record(prim: Any, inputs: list[Tensor], out: Tensor, params: dict) -> None:
    """Called by `bind` after every op: keep a node iff some input is tracked."""
    kind = out._value.dtype.kind
    if kind != "f" and kind != "c" and kind != "V":  # V: bfloat16's bits
        return
    for t in inputs:  # the common op on untracked tensors, asked about first (`edge`'s test)
        if t._node is not None or t._requires_grad:
            break
    else:
        if not Listeners.recording:
            return
    parents = [edge(t) for t in inputs]
    if parents.count(None) != len(parents):
        if kind == "c" and not prim.complex_grad:
            raise RuntimeError(
                f"{prim.name} does not support automatic differentiation for outputs with "
                f"complex dtype (its gradient rule is for real values; inputs "
                f"{', '.join(f'{t._value.dtype}{list(t.shape)}' for t in inputs)}, at "
                f"{user_location()}): compute it on the real and imaginary parts"
            )
        node_type = _NODE_TYPES.get(prim) or _node_type(prim)
        out._node = node_type(prim, params, parents, inputs, out)
        if anomaly.enabled:
            anomaly.made_at[out._node] = user_location()


class _Anomaly:
    """Anomaly detection (`torch.autograd.detect_anomaly`): while enabled, each recorded op
    remembers the user's line that ran it, and backward raises at the first op whose
    cotangents hold a nan, naming the op and that line."""

    def __init__(self) -> None:
        self.enabled = False
        self.made_at: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def check(self, node: TapeNode, cotangents: Sequence[Tensor | None]) -> None:
        for i, g in enumerate(cotangents):
            if g is not None and not g.is_symbolic and np.isnan(g._value).any():
                where = self.made_at.get(node)
                raise RuntimeError(
                    f"Function '{node.name()}' returned nan values in its {i}th output"
                    + (f" (the forward op ran at {where})" if where else "")
                )


anomaly = _Anomaly()


class detect_anomaly(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    """Inside (or in a function it decorates), backward raises where a nan first appears."""

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        self._previous.append(anomaly.enabled)
        anomaly.enabled = self.check_nan

    def __exit__(self, *exc: Any) -> None:
        anomaly.enabled = self._previous.pop()


class _SetNow:
    """A setting changed at once and, used as a context manager, restored on exit (PyTorch's
    `set_grad_enabled`, `set_detect_anomaly`)."""

    def __init__(self, owner: Any, attribute: str, value: bool) -> None:
        self._owner, self._attribute = owner, attribute
        self._previous = getattr(owner, attribute)
        setattr(owner, attribute, value)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        setattr(self._owner, self._attribute, self._previous)


class set_detect_anomaly(_SetNow):  # noqa: N801 (PyTorch's name)
    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        super().__init__(anomaly, "enabled", bool(mode) and check_nan)


def is_anomaly_enabled() -> bool:
    return anomaly.enabled


type(Listeners).record = staticmethod(record)  # for every thread


@contextlib.contextmanager
def _grad_mode(enabled: bool) -> Iterator[None]:
    previous = Listeners.grad_enabled
    Listeners.grad_enabled = enabled
    try:
        yield
    finally:
        Listeners.grad_enabled = previous


class _GradMode(contextlib.ContextDecorator):
    """Set grad mode inside: a context manager, `@no_grad()` or a bare `@no_grad`."""

    enabled = False

    def __new__(cls, func: Callable | None = None) -> Any:
        self = super().__new__(cls)
        if func is None:
            return self
        self.__init__()
        return self(func)  # used bare, as `@no_grad`: decorate the function

    def __init__(self, func: Callable | None = None) -> None:
        self._previous: list[bool] = []  # a stack: one decorator instance may be re-entered

    def __enter__(self) -> None:
        self._previous.append(Listeners.grad_enabled)
        Listeners.grad_enabled = self.enabled

    def __exit__(self, *exc: Any) -> None:
        Listeners.grad_enabled = self._previous.pop()


class no_grad(_GradMode):
    """Stop recording: `with no_grad():`, `@no_grad()` or `@no_grad`."""


class enable_grad(_GradMode):
    """Record again inside a `no_grad` region."""

    enabled = True


class set_grad_enabled(_SetNow):  # noqa: N801 (PyTorch's name)
    def __init__(self, mode: bool) -> None:
        super().__init__(Listeners, "grad_enabled", bool(mode))


def is_grad_enabled() -> bool:
    return Listeners.grad_enabled


# --- the engine ----------------------------------------------------------------------------------


def _order(roots: Sequence[Any], is_target: Callable[[Any], bool]) -> tuple[list, set]:
    """Nodes reachable from `roots` in reverse topological order, and those that reach a target."""
    post, seen, useful = [], set(), set()
    stack = [(r, False) for r in roots]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            post.append(node)
            if is_target(node) or not useful.isdisjoint(node.parents):
                useful.add(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        # the first parent (the data path) is expanded first, so a side branch such as the
        # `W.T` of `x @ W.T` comes right after its consumer in the order, not after the whole
        # data path: otherwise every layer's dW waits, with its inputs, for the end of backward
        for p in reversed(node.parents):
            if p is not None and p not in seen:
                stack.append((p, False))
    return post[::-1], useful


def run_backward(
    ys: Sequence[Tensor],
    dys: Sequence[Tensor],
    deliver: Callable[[Any], Callable[[Tensor], None] | None],
    retain_graph: bool = False,
    create_graph: bool = False,
    stop_at_sinks: bool = False,
) -> None:
    """Propagate cotangents `dys` from `ys` to every node for which `deliver(node)` gives a sink.

    With `create_graph` the VJP ops are themselves recorded (higher-order gradients). With
    `stop_at_sinks` a sink's node passes nothing on: the gradients are partial derivatives in
    the sinks as independent inputs (functional `vjp`), not total ones through each other."""
    grads: dict[Any, Tensor] = {}
    roots = []
    for y, dy in zip(ys, dys, strict=True):
        node = edge(y)
        if node is None:
            continue
        if dy._value.shape != y._value.shape:
            raise ValueError(f"backward: dy of shape {dy.shape} for y of shape {y.shape}")
        # as PyTorch's engine: a cotangent takes its value's dtype
        if dy._value.dtype != y._value.dtype:
            dy = dy.astype(y.dtype)
        grads[node] = grads[node] + dy if node in grads else dy
        roots.append(node)
    order, useful = _order(roots, lambda n: deliver(n) is not None)
    retain_graph = retain_graph or create_graph
    _AT_END.append([])
    # the backward phase, grad mode on only to record a differentiable backward (`phase` and
    # `_grad_mode`, spelled out: a small model's backward is a few dozen microseconds)
    outer = Listeners.phase, Listeners.grad_enabled
    Listeners.phase, Listeners.grad_enabled = Phase.BACKWARD, create_graph
    try:
        _propagate(order, useful, grads, deliver, retain_graph, create_graph, stop_at_sinks)
        for callback in _AT_END[-1]:
            callback()
    finally:
        Listeners.phase, Listeners.grad_enabled = outer
        _AT_END.pop()


# per backward running (a hook may run another), what runs when it has delivered every gradient
_AT_END: list[list[Callable[[], None]]] = []


def queue_callback(callback: Callable[[], None]) -> None:
    """Run `callback()` when the backward now running has delivered every gradient (PyTorch's
    `Variable._execution_engine.queue_callback`: data parallelism waits there for the
    gradients' all-reduce)."""
    if not _AT_END:
        raise RuntimeError("queue_callback: no backward is running (call it from a hook)")
    _AT_END[-1].append(callback)


def _propagate(order, useful, grads, deliver, retain_graph, create_graph, stop_at_sinks) -> None:
    sums = _Sums(grads, in_place=not create_graph and not Listeners.tracers)
    tracer = Listeners.tracers[-1] if Listeners.tracers else None
    for node in order:
        g, unshared = sums.pop(node)
        if g is None or node not in useful:
            continue
        if node.hooks:
            hooked = _hooked(node, g)
            g, unshared = hooked, unshared and hooked is g
        sink = deliver(node)
        if sink is not None:
            sink(Unshared._wrap(g._value, g._node) if unshared else g)
        if node.is_leaf or (stop_at_sinks and sink is not None):
            continue
        wanted = [parent in useful for parent in node.parents]
        if not any(wanted):  # a sink with nothing to pass on does not run (nor free what it
            continue  # saved: `grad` to a layer's output, then from it to the input, as captum)
        if tracer is not None and node.tracer is not tracer:
            _refuse_outside_history(node)
        ins, out = node.unpack()
        outer, Listeners.module = Listeners.module, node.module  # its module, traced
        try:
            _pass_on(node, g, out, ins, wanted, sums, create_graph)
        finally:
            Listeners.module = outer
        if not retain_graph:
            node.free()


def _refuse_outside_history(node: TapeNode) -> None:
    """A traced backward that reaches an op recorded before the step began (a forward run
    eagerly, its outputs kept for the step: a policy's log-probabilities) cannot be replayed:
    the plan would hold that one forward's values and apply them at every call."""
    raise TraceError(
        f"backward() inside a traced step reached {node.name()!r}, an op recorded before the step "
        f"began (at {user_location()}): a plan cannot replay a forward run outside it, so each "
        "call would repeat the first one's gradients. Run the forward inside the traced "
        "function, or call backward() eagerly"
    )


def _hooked(node: Any, g: Tensor) -> Tensor:
    """The cotangent after the tensor's hooks, each of which may return a replacement."""
    for hook in list(node.hooks.values()):
        new = hook(g)
        if new is not None:
            new = as_tensor(new, g.dtype)
            if new.shape != g.shape:
                raise RuntimeError(
                    f"hook {getattr(hook, '__name__', hook)!r} returned a gradient of shape "
                    f"{new.shape} for a tensor of shape {g.shape}"
                )
            g = new
    return g


def register_hook(t: Tensor, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
    """`t.register_hook(hook)`: `hook(grad)` runs when backward computes `t`'s gradient, and
    what it returns (if not None) replaces that gradient, for `t`'s history and its `.grad`."""
    node = edge(t)
    if node is None:
        raise RuntimeError(
            f"register_hook: cannot register a hook on a tensor (shape {t.shape}) that does not "
            "require grad"
        )
    if node.hooks is None:
        node.hooks = {}
    handle = RemovableHandle(node.hooks)
    node.hooks[handle.id] = hook
    return handle


def register_post_accumulate_grad_hook(t: Tensor, hook: Callable[[Tensor], None]) -> Any:
    """`t.register_post_accumulate_grad_hook(hook)`: `hook(t)` runs after backward added to the
    `.grad` of `t`, a leaf (an optimizer step per parameter, as soon as its gradient is
    final)."""
    if not t.is_leaf:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    node = edge(t)
    if node is None:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if node.post_hooks is None:
        node.post_hooks = {}
    handle = RemovableHandle(node.post_hooks)
    node.post_hooks[handle.id] = hook
    return handle


class RemovableHandle:
    """What registering a hook returns (PyTorch's `torch.utils.hooks.RemovableHandle`), for a
    hook stored in `registry` under `handle.id`: `remove()` unregisters it (twice is harmless)
    and calls `on_remove`; as a context manager, it removes the hook on exit."""

    _ids = itertools.count()

    def __init__(self, registry: dict, on_remove: Callable[[], None] | None = None) -> None:
        self.registry, self.id, self.on_remove = registry, next(RemovableHandle._ids), on_remove

    def remove(self) -> None:
        self.registry.pop(self.id, None)
        if self.on_remove is not None:
            self.on_remove()

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _pass_on(node: TapeNode, g: Tensor, out: Tensor | None, ins: list, wanted: list[bool],
             sums: _Sums, create_graph: bool) -> None:  # fmt: skip
    """Add the node's cotangents of its wanted inputs to `sums`: straight into the input's buffer
    where the op can (`vjp_into`), else as its VJP gives them, cast to the inputs' dtypes."""
    if (
        sums.in_place
        and node.prim.vjp_into is not None
        and wanted[0]
        and not any(wanted[1:])
        and g._value.dtype.kind != "V"  # bfloat16's bits: NumPy cannot add them
    ):
        arrays = [t._value if isinstance(t, Tensor) else t for t in ins]
        into = sums.buffer(node.parents[0], *node.avals[0])
        node.prim.vjp_into(into, g._value, *arrays, **node.params)
        return
    cotangents = _cotangents(node, wanted, g, out, ins, create_graph)
    if anomaly.enabled:
        anomaly.check(node, cotangents)
    seen = [g, out, *ins, *cotangents]
    for parent, gi, (_, dtype) in zip(node.parents, cotangents, node.avals, strict=True):
        if gi is None:
            continue
        if gi._value.dtype == dtype:
            sums.add(parent, gi, _made_here(gi, seen))
        else:  # float32 inputs get float32 grads; a real input the real part
            gi = P.real(gi) if gi.dtype.kind == "c" and dtype.kind != "c" else gi
            sums.add(parent, gi.astype(dtype), True)


def _made_here(t: Tensor, seen: list) -> bool:
    """`t` holds an array of its own that a VJP just made (not a view, not the cotangent or a
    saved value passed on, nor one given to two inputs): nothing else can hold it."""
    a = t._value
    return a.__class__ is np.ndarray and a.base is None and [x is t for x in seen].count(True) == 1


class Unshared(Tensor):
    """A cotangent delivered with an array nothing else holds: `accumulate` keeps that array
    as the new `.grad` instead of copying it (a weight's gradient is a copy less per step)."""

    __slots__ = ()


class _Sums:
    """The cotangent gathered so far for each node. A sum the engine made itself, or an array a
    VJP just made (`_made_here`), which nothing else holds, takes later terms in place: a weight
    used at every step of a loop, or the slices x[t] of one tensor (`Primitive.vjp_into`),
    gather into one buffer, not a new array per term; and it is delivered `Unshared`. Not with
    `create_graph` (each sum is a node of the graph) nor while tracing (symbolic)."""

    def __init__(self, grads: dict, in_place: bool):
        self.grads, self.in_place, self.own = grads, in_place, {}

    def pop(self, node: Any) -> tuple[Tensor | None, bool]:
        """The node's cotangent, and whether the engine owns its array."""
        g = self.grads.pop(node, None)
        return g, self.own.pop(node, None) is g and g is not None

    def add(self, node: Any, g: Tensor, fresh: bool = False) -> None:
        total = self.grads.get(node)
        if total is None:
            self.grads[node] = g
            if fresh and self.in_place:
                self.own[node] = g
        elif (
            self.own.get(node) is total
            and (total.shape, total.dtype) == (g.shape, g.dtype)
            and g._value.dtype.kind != "V"  # bfloat16's bits: NumPy cannot add them
        ):
            np.add(total._value, g._value, out=total._value)
        else:
            total = self.grads[node] = total + g
            if self.in_place:
                self.own[node] = total

    def buffer(self, node: Any, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """The node's sum as an array that may take terms in place (zeros, if it had none)."""
        total = self.grads.get(node)
        if total is None or self.own.get(node) is not total:
            fresh = np.zeros(shape, dtype) if total is None else np.array(total._value)
            self.grads[node] = self.own[node] = total = Tensor._wrap(fresh)
        return total._value


def _cotangents(node: TapeNode, wanted: list[bool], g: Tensor, out: Tensor | None, ins: list,
                create_graph: bool) -> Sequence[Tensor | None]:  # fmt: skip
    prim = node.prim  # an op that keeps only its result (log_softmax) has a VJP in ops
    if (
        prim.decompose is not None
        and prim.saves_inputs
        and (create_graph or any(w and prim.vjp_rule(i) is None for i, w in enumerate(wanted)))
    ):
        return _decomposed_cotangents(prim, wanted, g, ins, node.params, create_graph)
    return prim.input_grads(wanted, g, out, ins, node.params, create_graph)


def _decomposed_cotangents(prim: Any, wanted: list[bool], g: Tensor, ins: list, params: dict,
                           create_graph: bool) -> list[Tensor | None]:  # fmt: skip
    """The cotangents of an op with a decomposition, by differentiating that: what its own
    rules, first derivatives of the common inputs, leave out. Each wanted input gets a node of
    its own, a fresh leaf unless the cotangents must be differentiable in the input's history
    (an input no one tracks now has none: a primal of a finished `vjp`, whose pullback a
    Jacobian-vector product differentiates in the cotangent)."""
    with _grad_mode(True):
        xs = [
            (x + 0.0 if create_graph and edge(x) is not None
             else Tensor._wrap(x._value).requires_grad_()) if w else x
            for x, w in zip(ins, wanted, strict=True)
        ]  # fmt: skip
        y = prim.decompose(*xs, **params)
    slots = {edge(x): i for i, x in enumerate(xs) if wanted[i]}
    grads: list[Tensor | None] = [None] * len(xs)

    def collect(node: Any) -> Callable | None:
        i = slots.get(node)
        return None if i is None else functools.partial(grads.__setitem__, i)

    run_backward([y], [g], collect, create_graph=create_graph, stop_at_sinks=True)
    return grads


def accumulate(t: Tensor, g: Tensor) -> None:
    """`t.grad += g`: a fresh buffer the first time, then in place, as PyTorch does (an alias of
    `.grad` sees the sum; a traced step writes the same buffer). A gradient that carries a graph
    (`create_graph`) gets a new, differentiable sum instead."""
    if t.grad is None and g.__class__ is Unshared:
        t.grad = Tensor._wrap(g._value, g._node)  # no one else holds the array
    elif t.grad is None:
        t.grad = Tensor._wrap(np.array(g._value), g._node) if not g.is_symbolic else g
    elif t.grad._node is None and g._node is None:
        grad, a, b = t.grad, t.grad._value, g._value
        if (not Listeners.tracers and a.__class__ is np.ndarray and a.flags.writeable
                and a.shape == b.shape and a.dtype == b.dtype):  # fmt: skip
            np.add(a, b, out=a)  # `_assign` of the sum, without the sum's own array and call
            grad._version[0] += 1
        else:
            grad._assign(grad + g)
    else:
        t.grad = t.grad + g
    node = t._node
    if node is not None and node.is_leaf and node.post_hooks:
        for hook in list(node.post_hooks.values()):
            hook(t)


def retained_sink(node: Any) -> Callable | None:
    """Delivery into the non-leaf whose `retain_grad()` asked for its gradient, if alive."""
    t = None if node.is_leaf or node.retained is None else node.retained()
    return None if t is None else functools.partial(accumulate, t)


def default_dy(y: Tensor) -> Tensor:
    if y._value.dtype.kind == "c":
        raise RuntimeError("grad can be implicitly created only for real scalar outputs; y is "
                           f"{y.dtype}: pass dy, or take a real loss (abs, real)")  # fmt: skip
    if y.size != 1:
        raise RuntimeError(
            f"grad can be implicitly created only for scalar outputs; y has shape {y.shape}: "
            "pass dy (the cotangent, same shape as y)"
        )
    return Tensor._of(bfloat16.full(y._value.shape, 1, y._value.dtype))


def tensor_backward(
    y: Tensor,
    gradient: Any = None,
    retain_graph: bool = False,
    create_graph: bool = False,
    *,
    dy: Any = None,
) -> None:
    """`y.backward()`: gradients into every reachable leaf that requires grad (PyTorch).
    `gradient` is the cotangent (MegEngine's and tracegrad's older name: `dy`)."""
    dy = gradient if dy is None else dy
    if y.is_leaf and not y.requires_grad:
        raise RuntimeError(
            "backward: this tensor does not require grad and has no grad_fn (no input of the "
            "computation requires grad)"
        )
    dy = default_dy(y) if dy is None else as_tensor(dy, y.dtype)
    run_backward([y], [dy], into_grads, retain_graph, create_graph)


def into_grads(node: Any) -> Callable | None:
    """Where backward delivers: `.grad` of a leaf that requires grad, or of a retaining
    non-leaf."""
    if node.is_leaf:
        t = node.ref()
        if t is None:  # no one holds the leaf, but PyTorch's graph does: what leads to it runs
            return _dropped  # (hooks, Functions' backward), and its gradient is dropped
        return None if not t._requires_grad else functools.partial(accumulate, t)
    return retained_sink(node)


def _dropped(g: Tensor) -> None:
    """The sink of a leaf that no longer exists."""


def backward(tensors: Tensor | Sequence[Tensor], grad_tensors: Any = None,
             retain_graph: bool | None = None, create_graph: bool = False,
             inputs: Any = None) -> None:  # fmt: skip
    """`torch.autograd.backward`: one backward from several outputs at once (their cotangents
    `grad_tensors`, 1 for scalars), into the `.grad` of every leaf, or only of `inputs`."""
    ys = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    given = grad_tensors if isinstance(grad_tensors, list | tuple) else [grad_tensors] * len(ys)
    pairs = zip(ys, given, strict=True)
    dys = [default_dy(y) if g is None else as_tensor(g, y.dtype) for y, g in pairs]
    deliver = into_grads
    if inputs is not None:
        wanted = {edge(t) for t in ([inputs] if isinstance(inputs, Tensor) else inputs)}
        deliver = lambda node: into_grads(node) if node in wanted else None  # noqa: E731
    retain = create_graph if retain_graph is None else retain_graph
    run_backward(ys, dys, deliver, retain, create_graph)

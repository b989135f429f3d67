"""Tracing: run a training step once on symbolic tensors and record one graph holding forward,
backward and the optimizer's update (runtime.py compiles it and runs it from then on).

Tensors made before the call and touched inside it (parameters, their `.grad`, optimizer state)
become *state*: graph inputs read at every call, and outputs written back only after the plan
ran to the end, so a failing step changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ir, pytree
from .tensor import Listeners, Tensor, TraceError, _serials, as_tensor, user_location


def _is_leaf(x: Any) -> bool:
    return isinstance(x, Tensor | np.ndarray)


@dataclass
class Slot:
    """A tensor from outside the trace: what it held before, and its symbolic stand-in."""

    tensor: Tensor
    value: Any
    grad: Tensor | None
    version: int  # in-place writes so far: a write is counted when a plan stores it, not here
    input: ir.Value | None = None
    is_arg: bool = False


@dataclass
class Capture:
    """The result of tracing: the graph and how its inputs and outputs map to tensors."""

    graph: ir.Graph
    n_args: int  # graph.inputs[:n_args] are the call's tensor arguments, the rest state
    state: list[tuple[Tensor, bool]]  # read as graph.inputs[n_args:]: (tensor, read its .grad)
    value_writes: list[Tensor]  # tensors whose value the outputs after the results replace
    grad_writes: list[tuple[Tensor, bool]]  # (tensor, grad is None afterwards)
    result_tree: Any
    n_results: int
    guards: list[tuple[Tensor, tuple, np.dtype, bool]] = field(default_factory=list)
    checks: list[Callable[[], bool]] = field(default_factory=list)  # from `guard()`

    def guards_hold(self) -> bool:
        return all(
            t.shape == shape and t.dtype == dtype and (t._grad is None) == no_grad
            for t, shape, dtype, no_grad in self.guards
        ) and all(check() for check in self.checks)


def guard(check: Callable[[], bool]) -> None:
    """While tracing: the plan being traced is valid only while `check()` is true; a call for
    which it is false traces again. For Python values a traced function bakes in (an
    optimizer's momentum, a flag). Does nothing outside tracing."""
    if Listeners.tracers:
        Listeners.tracers[-1].checks.append(check)


class Tracer:
    """Listens to `bind` while a traced function runs; builds the graph node by node."""

    def __init__(self) -> None:
        self.start = next(_serials)
        self.nodes: list[ir.Node] = []
        self.slots: dict[int, Slot] = {}
        self.consts: dict[int, tuple[Tensor, ir.Value]] = {}
        self.checks: list[Callable[[], bool]] = []

    def process(self, prim: Any, inputs: list[Tensor], params: dict, shape: tuple, dtype: Any):
        ins = [self.lift(t) for t in inputs]
        out = ir.Value(shape, dtype)
        node = ir.Node(prim, ins, [out], params, user_location(), Listeners.phase)
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

    def stand_in(self, t: Tensor, is_arg: bool = False) -> ir.Value:
        """Make `t` a graph input: its value becomes symbolic until `restore()`."""
        slot = self.slot(t)
        slot.input, slot.is_arg = ir.Value(t.shape, t.dtype), is_arg
        t._value = slot.input
        return slot.input

    def slot(self, t: Tensor) -> Slot:
        if id(t) not in self.slots:
            self.slots[id(t)] = Slot(t, t._value, t._grad, t._version[0])
        return self.slots[id(t)]

    def will_write(self, t: Tensor) -> None:
        """Called before a tensor's value or grad changes: remember what to restore."""
        if t._serial <= self.start:
            self.slot(t)

    def restore(self) -> None:
        for s in self.slots.values():
            s.tensor._value, s.tensor._grad, s.tensor._version[0] = s.value, s.grad, s.version

    def finish(self, result: Any) -> Capture:
        leaves, tree = pytree.flatten(result, _is_leaf)
        outputs = [self.lift(as_tensor(x)) for x in leaves]
        value_writes, grad_writes = [], []
        for s in self.slots.values():
            t = s.tensor
            if t._value is not s.value and t._value is not s.input:
                value_writes.append(t)
                outputs.append(self.lift(t))
        for s in self.slots.values():
            t = s.tensor
            if t._grad is not s.grad:
                grad_writes.append((t, t._grad is None))
                if t._grad is not None:
                    outputs.append(self.lift(t._grad))
        args = [s for s in self.slots.values() if s.is_arg and s.input is not None]
        state = [s for s in self.slots.values() if not s.is_arg and s.input is not None]
        graph = ir.Graph([s.input for s in args + state], self.nodes, outputs)
        owners = {id(s.grad): s.tensor for s in self.slots.values() if s.grad is not None}
        readers = [
            (owners[id(s.tensor)], True) if id(s.tensor) in owners else (s.tensor, False)
            for s in state
        ]
        guards = [
            (s.tensor, s.tensor.shape, s.tensor.dtype, s.grad is None)
            for s in self.slots.values()
            if not s.is_arg
        ]
        return Capture(graph, len(args), readers, value_writes, grad_writes, tree, len(leaves),
                       guards, self.checks)  # fmt: skip


def signature(args: tuple, kwargs: dict) -> tuple[list, Any]:
    leaves, tree = pytree.flatten((args, kwargs), _is_leaf)
    spec = tuple((tuple(np.shape(x)), np.dtype(x.dtype)) for x in leaves)
    try:
        hash(tree)
    except TypeError as e:
        raise TypeError(f"@trace: a non-tensor argument must be hashable ({e})") from None
    return leaves, (tree, spec)


def capture(fn: Callable, args: tuple, kwargs: dict) -> Capture:
    """Run `fn` once on symbolic stand-ins for its tensor arguments and record everything."""
    leaves, tree = pytree.flatten((args, kwargs), _is_leaf)
    tracer = Tracer()
    Listeners.tracers.append(tracer)
    try:
        stand_ins = []
        for x in leaves:
            t = x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))
            tracer.stand_in(t, is_arg=True)
            stand_ins.append(t)
        call_args, call_kwargs = pytree.unflatten(tree, stand_ins)
        result = fn(*call_args, **call_kwargs)
        return tracer.finish(result)
    finally:
        Listeners.tracers.remove(tracer)
        tracer.restore()


def interpret(graph: ir.Graph, *args: Any) -> list[np.ndarray]:
    """The reference interpreter: every node with its primitive's NumPy implementation."""
    return ir.evaluate(graph, [np.asarray(a) for a in args])


__all__ = ["Capture", "TraceError", "capture", "guard", "interpret", "signature"]

"""PyTorch's `torch.autograd.Function`: an op whose forward and backward the user writes in
tensor ops. `apply` runs `forward` untracked and records one tape node whose VJP calls the
user's `backward`: eagerly it runs on arrays, in a traced step its ops are recorded as the
backward graph (so a Function compiles with the rest of the step), and with `create_graph` they
are themselves recorded (higher order). `tracegrad.defprimitive` is the way to a new op that fuses
into kernels; this is the way PyTorch code already has."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core.primitives import sum_to
from tracegrad.frontend import forward_ad
from tracegrad.frontend.autodiff import (
    SAVED_TENSORS_HOOKS,
    Packed,
    ShapeDtype,
    TapeNode,
    edge,
    is_grad_enabled,
    no_grad,
)
from tracegrad.frontend.creation import zeros
from tracegrad.frontend.functions import cat
from tracegrad.frontend.promotion import promote_types
from tracegrad.frontend.tensor import Tensor

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The `ctx` a Function's forward fills for its backward: saved tensors, which inputs need
    a gradient, and any attribute the forward sets."""

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self.to_save: tuple = ()
        self.non_differentiable: tuple = ()
        self.dirty: tuple = ()
        self._versions: list[int] = []
        self._freed = False

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Keep these (inputs, outputs or None) for backward; an in-place write to one before
        backward makes `saved_tensors` raise, as PyTorch's version check does."""
        self.to_save = tensors
        self._versions = [(t._version, t._version[0]) for t in tensors if isinstance(t, Tensor)]

    @property
    def saved_tensors(self) -> tuple:
        if self._freed and self.to_save:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or to read saved tensors "
                "after they were freed); pass retain_graph=True to the first backward"
            )
        if any(counter[0] != seen for counter, seen in self._versions):
            raise RuntimeError(
                "one of the tensors saved by save_for_backward was modified by an inplace "
                "operation before backward"
            )
        return tuple(_unpacked(t) for t in self.to_save)

    saved_variables = saved_tensors  # PyTorch's old name

    def save_for_forward(self, *tensors: Tensor | None) -> None:
        """Keep these for `jvp`, where `saved_tensors` gives them (forward-mode AD)."""
        self.to_save_forward = tensors

    def mark_non_differentiable(self, *outputs: Tensor) -> None:
        """These outputs get no gradient (backward sees zeros for them)."""
        self.non_differentiable = outputs

    def mark_dirty(self, *tensors: Tensor) -> None:
        """These inputs were modified in place by forward and are returned as outputs: they
        take the Function's node as their history."""
        self.dirty = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """With False, backward gets None (not zeros) for an output that got no gradient."""
        self.materialize_grads = bool(value)


class SavedOutput:
    """An output saved for backward, kept as its value and a weak link to its node: the output
    tensor itself would make a cycle (output -> node -> ctx -> output) that only the garbage
    collector frees. Where the output is one of several, its node dies with it (the user kept
    only another: `Sinh.apply(x)[1]`); a double backward then needs that history, so it is made
    again on the Function's node, which lives while its backward can run (`remake`)."""

    def __init__(self, t: Tensor, remake: Callable[[Tensor], TapeNode | None] | None = None):
        self.value, self.node, self.remake = t._value, weakref.ref(t._node), remake

    def tensor(self) -> Tensor:
        t = Tensor._wrap(self.value, self.node())
        if t._node is None and self.remake is not None:
            t._node = self.remake(t)
        return t


class _Rule:
    """The part of a primitive the tape asks of a node (its name, what it saves, its VJP), for
    a Function's node: the values it reads live in its ctx, not in the node."""

    saved_inputs = slice(0, 0)
    saves_inputs = saves_output = False
    vjp_into = decompose = None

    def __init__(self, name: str, input_grads: Callable) -> None:
        self.name, self.input_grads = name, input_grads


class FunctionNode(TapeNode):
    """A Function's node on the tape; freeing it frees what its ctx saved."""

    __slots__ = ("ctx",)

    def name(self) -> str:
        return self.prim.name  # PyTorch's: the Function's class name and "Backward"

    def free(self) -> None:
        super().free()
        self.ctx._freed = True
        self.ctx.to_save = (None,) * len(self.ctx.to_save)  # the memory goes now, not with ctx


class OutputNode(TapeNode):
    """Output `i` of a Function with several differentiable outputs: it passes its cotangent
    on to the Function's node as its slice of one flat vector, so that the node sums the
    cotangents of all outputs and calls backward once, as PyTorch does."""

    __slots__ = ()

    def name(self) -> str:
        return self.prim.name.partition(".")[0]  # the Function's, as all its outputs' in PyTorch

    def __init__(self, rule: _Rule, parent: FunctionNode, flat: ShapeDtype, out: Tensor):
        super().__init__(rule, {}, [parent], [], out)
        self.avals = ((flat.shape, flat.dtype),)


class Function:
    """Subclass with static `forward(ctx, *args)` (or `forward(*args)` and
    `setup_context(ctx, inputs, output)`) and `backward(ctx, *grad_outputs)`, which returns one
    gradient (or None) per forward argument; call it as `MyFunction.apply(*args)`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{type(self).__name__}: legacy autograd functions (an instance called on tensors) "
            "are not supported; make forward and backward static methods and call "
            f"{type(self).__name__}.apply(...)"
        )

    @staticmethod
    def forward(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define forward")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: Any) -> Any:
        return NotImplemented  # not overridden: forward takes ctx itself

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define backward to be differentiated")

    vjp = backward  # PyTorch's alias

    @staticmethod
    def jvp(ctx: FunctionCtx, *grad_inputs: Any) -> Any:
        """The outputs' tangents from the inputs' (forward-mode AD, `forward_ad`); without it,
        tangents are pulled through `backward`."""
        raise NotImplementedError("a Function subclass must define jvp for forward-mode AD")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        tracked = is_grad_enabled()
        parents = [edge(a) if tracked and isinstance(a, Tensor) else None for a in args]
        ctx = FunctionCtx(tuple(p is not None for p in parents))
        with no_grad():
            if cls.setup_context is Function.setup_context:
                out = cls.forward(ctx, *args, **kwargs)
            else:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
        if not any(ctx.needs_input_grad):
            return out
        many = isinstance(out, tuple | list)
        outs = [_output(o, args, ctx) for o in (out if many else [out])]
        _record(cls, ctx, args, parents, outs)
        if cls.jvp is not Function.jvp:
            _tangents(cls, ctx, args, outs)
        return type(out)(outs) if many else outs[0]


def _tangents(cls: type, ctx: FunctionCtx, args: tuple, outs: list) -> None:
    """Inside a dual level, the outputs' tangents by the Function's own `jvp`, which reads
    what forward saved for it (`save_for_forward`) as `saved_tensors`."""
    kept = ctx.to_save
    ctx.to_save = getattr(ctx, "to_save_forward", kept)
    try:
        forward_ad.function_tangents(cls.jvp, ctx, args, outs)
    finally:
        ctx.to_save = kept


def _output(o: Any, args: tuple, ctx: FunctionCtx) -> Any:
    """A result the node can own: a new tensor for an input returned as it is or a result with
    a history of its own (only inputs marked dirty keep their identity)."""
    if not isinstance(o, Tensor) or any(o is d for d in ctx.dirty):
        return o
    if o._node is None and not any(o is a for a in args):
        return o
    return Tensor._wrap(o._value)


def _differentiable(o: Any, ctx: FunctionCtx) -> bool:
    return (
        isinstance(o, Tensor)
        and o.dtype.kind == "f"
        and not any(o is n for n in ctx.non_differentiable)
    )


def _record(cls: type, ctx: FunctionCtx, args: tuple, parents: list, outs: list) -> None:
    """Hang the node on the differentiable outputs: directly on a single one, through an
    `OutputNode` each when there are several."""
    for d in ctx.dirty:
        if d.is_leaf and d.requires_grad:
            raise RuntimeError(
                f"{cls.__name__}: a leaf tensor that requires grad (shape {d.shape}) was "
                "modified in place by forward (mark_dirty)"
            )
    slots = [i for i, a in enumerate(args) if parents[i] is not None]
    inputs = [args[i] for i in slots]
    diff = [i for i, o in enumerate(outs) if _differentiable(o, ctx)]
    if not diff:
        return
    layout = _Layout(outs, diff)
    name = f"{cls.__name__}Backward"
    rule = _Rule(name, functools.partial(_backward, cls, ctx, len(args), slots, layout))
    node = FunctionNode(rule, {}, [parents[i] for i in slots], inputs, outs[diff[0]])
    node.ctx = ctx
    remakes: dict[int, Callable | None] = {diff[0]: None}
    if len(diff) == 1:
        outs[diff[0]]._node = node
    else:
        flat = ShapeDtype((layout.total,), layout.dtype)
        for i in diff:
            select = _Rule(f"{name}.output{i}", functools.partial(_into_slot, layout, i))
            outs[i]._node = OutputNode(select, node, flat, outs[i])
            remakes[i] = functools.partial(_output_node, select, weakref.ref(node), flat)
    ctx.to_save = tuple(_saved(t, outs, remakes) for t in ctx.to_save)


def _saved(t: Any, outs: list, remakes: dict[int, Callable | None]) -> Any:
    """What ctx keeps of a saved tensor: what the innermost saved-tensors hook packed, if one
    is on (as for ops' saved values), else a `SavedOutput` for a differentiable output."""
    if SAVED_TENSORS_HOOKS and isinstance(t, Tensor):
        return Packed(t)
    i = next((i for i in remakes if t is outs[i]), None)
    return t if i is None else SavedOutput(t, remakes[i])


def _unpacked(t: Any) -> Any:
    """A saved tensor as backward reads it."""
    if isinstance(t, SavedOutput):
        return t.tensor()
    return t.unpack(t.packed) if isinstance(t, Packed) else t


def _output_node(select: _Rule, parent: weakref.ref, flat: ShapeDtype,
                 out: Tensor) -> TapeNode | None:  # fmt: skip
    """A new node for a Function's output (one of several) whose own has died, on the
    Function's node, if that still lives."""
    node = parent()
    return None if node is None else OutputNode(select, node, flat, out)


class _Layout:
    """Where each differentiable output's cotangent sits in the flat vector."""

    def __init__(self, outs: list, diff: list[int]) -> None:
        self.dtype = functools.reduce(promote_types, [outs[i].dtype for i in diff])
        self.spans: dict[int, tuple[int, int]] = {}
        self.shapes = [o.shape if isinstance(o, Tensor) else None for o in outs]
        self.dtypes = [o.dtype if isinstance(o, Tensor) else None for o in outs]
        start = 0
        for i in diff:
            self.spans[i] = (start, start + outs[i].size)
            start += outs[i].size
        self.total = start


def _into_slot(layout: _Layout, i: int, wanted: Sequence[bool], g: Tensor, *rest: Any,
               **kw: Any) -> list:  # fmt: skip
    """Output i's cotangent as the flat vector with zeros around its span."""
    start, stop = layout.spans[i]
    parts = [zeros(start, dtype=layout.dtype), g.reshape(-1).astype(layout.dtype),
             zeros(layout.total - stop, dtype=layout.dtype)]  # fmt: skip
    return [cat([p for p in parts if p.size])]


def _backward(cls: type, ctx: FunctionCtx, nargs: int, slots: list[int], layout: _Layout,
              wanted: Sequence[bool], g: Tensor, out: Any, ins: Sequence[Any], params: dict,
              create_graph: bool = False) -> list:  # fmt: skip
    """Call the user's backward with one cotangent per output, and check what it returns."""
    grads_out = []
    for i, (shape, dtype) in enumerate(zip(layout.shapes, layout.dtypes, strict=True)):
        if i in layout.spans and len(layout.spans) == 1:
            grads_out.append(g)
        elif i in layout.spans:
            start, stop = layout.spans[i]
            grads_out.append(g[start:stop].reshape(shape).astype(dtype))
        elif shape is not None and ctx.materialize_grads:
            grads_out.append(zeros(shape, dtype=dtype))
        else:
            grads_out.append(None)
    result = cls.backward(ctx, *grads_out)
    grads = list(result) if isinstance(result, tuple | list) else [result]
    if len(grads) < nargs or any(x is not None for x in grads[nargs:]):
        raise RuntimeError(
            f"function {cls.__name__}Backward returned an incorrect number of gradients "
            f"(expected {nargs}, got {len(grads)})"
        )
    return [_checked(cls, grads[i], x.shape, i) if w else None
            for i, x, w in zip(slots, ins, wanted, strict=True)]  # fmt: skip


def _checked(cls: type, g: Any, shape: tuple[int, ...], i: int) -> Tensor | None:
    """A gradient of the input's shape: summed over broadcast axes as PyTorch does, or refused."""
    if g is None:
        return None
    if not isinstance(g, Tensor):
        raise TypeError(
            f"function {cls.__name__}Backward returned a {type(g).__name__} as the gradient of "
            f"input {i}; expected a tensor or None"
        )
    if g.shape == shape:
        return g
    try:
        expands = np.broadcast_shapes(shape, g.shape) == g.shape
    except ValueError:
        expands = False
    if not expands:
        raise RuntimeError(
            f"function {cls.__name__}Backward returned an invalid gradient at index {i} - got "
            f"{list(g.shape)} but expected shape compatible with {list(shape)}"
        )
    return sum_to(g, shape)


def once_differentiable(backward: Callable) -> Callable:
    """PyTorch's decorator for a backward that is not itself differentiable: it runs
    untracked, so a double backward through it sees no history instead of a wrong one."""

    @functools.wraps(backward)
    def run(ctx: FunctionCtx, *grads: Any) -> Any:
        with no_grad():
            return backward(ctx, *grads)

    return run

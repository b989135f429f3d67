"""MegEngine's GradManager over the one tape (attach tensors, record, backward, release), and the
functional `vjp` and `grad` built on it."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.frontend import autodiff, pytree
from tracegrad.frontend.tensor import Listeners, Tensor, as_tensor

Callback = Callable[[Tensor, Tensor], Tensor]


class GradManager:
    """Records computation that depends on attached tensors and accumulates their gradients.

    >>> gm = GradManager().attach(model.parameters())
    >>> with gm:
    ...     loss = model(x).mean()
    ...     gm.backward(loss)
    """

    def __init__(self) -> None:
        self._attached: dict[int, tuple[weakref.ref, list[Callback]]] = {}
        self._recording = False
        self._backward_ended_recording = False  # for the error of a second backward

    def attach(
        self,
        tensors: Tensor | Iterable[Tensor],
        callbacks: Callback | Sequence[Callback] | None = None,
    ) -> GradManager:
        """Track `tensors` (held weakly); `callbacks` run as `cb(tensor, grad) -> grad`, in order,
        before the gradient is accumulated. Attaching again adds callbacks, not duplicates.
        A callback with a `flush()` method is flushed at the end of `backward`, before the
        gradients it returned are accumulated (an asynchronous one goes last)."""
        tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
        callbacks = [callbacks] if callable(callbacks) else list(callbacks or ())
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"GradManager.attach: expected Tensors, got {type(t).__name__}")
            if t.dtype.kind not in "fc":
                raise TypeError(f"GradManager.attach: only floating point and complex tensors, "
                                f"not {t.dtype}")  # fmt: skip
        for t in tensors:
            key = id(t)
            if key not in self._attached or self._attached[key][0]() is not t:
                self._attached[key] = (weakref.ref(t, self._forget(key)), [])
            self._attached[key][1].extend(callbacks)
        return self

    def _forget(self, key: int) -> Callable:
        this = weakref.ref(self)

        def drop(_: Any) -> None:
            gm = this()
            if gm is not None:
                gm._attached.pop(key, None)

        return drop

    def _has(self, t: Tensor) -> bool:
        entry = self._attached.get(id(t))
        return entry is not None and entry[0]() is t

    def attached_tensors(self) -> list[Tensor]:
        return [t for t in (ref() for ref, _ in self._attached.values()) if t is not None]

    @property
    def is_recording(self) -> bool:
        return self._recording

    def record(self) -> None:
        if self._recording:
            raise RuntimeError("GradManager.record: already recording")
        self._recording = True
        self._backward_ended_recording = False
        Listeners.recording.append(self)

    def release(self) -> None:
        """Stop recording; safe to call at any time."""
        if self._recording:
            self._recording = False
            if self in Listeners.recording:  # else it records in another thread
                Listeners.recording.remove(self)

    def __enter__(self) -> GradManager:
        self.record()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def backward(self, y: Any = None, dy: Any = None) -> None:
        """Accumulate d(y . dy)/d(attached) into each attached tensor's `.grad`, then release.

        y and dy may be Tensors or lists; dy defaults to ones."""
        if not self._recording and self._backward_ended_recording:
            raise RuntimeError(
                "GradManager.backward: called again after a backward, which released what was "
                "recorded. Give all outputs to one call (`gm.backward([y1, y2])`), or record "
                "again (`with gm:`) around a new forward computation"
            )
        if not self._recording:
            raise RuntimeError(
                "GradManager.backward: nothing was recorded. Did you forget `gm.record()` or "
                "`with gm:` around the forward computation?"
            )
        self._backward_ended_recording = True
        if y is None:
            self.release()
            return
        ys = [y] if isinstance(y, Tensor) else list(y)
        if dy is None:
            dys = [Tensor._of(bfloat16.full(t.shape, 1, t.dtype)) for t in ys]
        else:
            dys = [as_tensor(d, t.dtype) for t, d in zip(ys, [dy] if isinstance(dy, Tensor) else dy,
                                                        strict=True)]  # fmt: skip
        pending: list[tuple[Tensor, Tensor]] = []
        sinks = self._sinks(pending)
        self.release()
        create = bool(Listeners.recording) and Listeners.grad_enabled
        deliver = lambda node: sinks.get(node) or autodiff.retained_sink(node)
        autodiff.run_backward(ys, dys, deliver, create_graph=create)
        callbacks = (cb for _, cbs in self._attached.values() for cb in cbs)
        for cb in dict.fromkeys(cb for cb in callbacks if hasattr(cb, "flush")):
            cb.flush()
        for t, g in pending:
            autodiff.accumulate(t, g)

    def _sinks(self, pending: list) -> dict[Any, Callable[[Tensor], None]]:
        """Node -> delivery into the attached tensor whose gradient arrives there."""
        sinks = {}
        for ref, callbacks in self._attached.values():
            t = ref()
            node = None if t is None else autodiff.edge(t)
            if node is not None:
                sinks[node] = functools.partial(_deliver, t, callbacks, pending)
        return sinks


def _deliver(t: Tensor, callbacks: list[Callback], pending: list, g: Tensor) -> None:
    """Run the callbacks, then accumulate; a callback with a `flush()` method (an asynchronous
    one, such as a non-blocking all-reduce) returns a gradient whose data is only there once
    `flush()` returned, so that accumulation waits until the end of `backward`."""
    if callbacks and g.__class__ is autodiff.Unshared:  # a callback may keep what it is given
        g = Tensor._wrap(g._value, g._node)
    for cb in callbacks:
        g = cb(t, g)
    if any(hasattr(cb, "flush") for cb in callbacks):
        pending.append((t, g))
    else:
        autodiff.accumulate(t, g)


# --- functional transformations -----------------------------------------------------------------


def vjp(fn: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """`out, vjp_fn = vjp(fn, *primals)`; `vjp_fn(cotangent)` gives one gradient per primal.
    `out` may be a tensor or nested tuples, lists and dicts of them, and the cotangent has its
    structure. With `has_aux`, `fn` returns `(out, aux)` and so does this, as `(out, vjp_fn,
    aux)` (`torch.func.vjp`'s). A primal may be a dict, list or tuple of tensors (a model's
    parameters by name): its gradient has that structure.

    Nests: inside another `vjp`/`grad`/GradManager the returned gradients are differentiable."""
    trees = [pytree.flatten(p, _is_leaf) for p in primals]
    xs = [as_tensor(leaf) for leaves, _ in trees for leaf in leaves]
    grad_mode = Listeners.grad_enabled
    # a transform records whatever the caller's grad mode (PyTorch's: an outer no_grad, or a
    # backward hook, does not reach inside; a no_grad inside `fn` still holds)
    with GradManager() as gm, autodiff.enable_grad():
        # a primal passed twice gets a node of its own, so each slot gets only its own part
        xs = [x + 0.0 if any(x is y for y in xs[:i]) else x for i, x in enumerate(xs)]
        gm.attach(xs)
        result = fn(*_rebuilt(trees, xs))
        out, aux = result if has_aux else (result, None)
        outs, tree = pytree.flatten(out, _is_tensor)
        # a primal returned as it is: recorded, so that backward reaches the primal after the
        # block (its gradient is the cotangent)
        outs = [o + 0.0 if any(o is x for x in xs) else o for o in outs]
        slots = {autodiff.edge(x): i for i, x in enumerate(xs)}

    def vjp_fn(cotangent: Any) -> tuple[Tensor, ...]:
        cotangents, _ = pytree.flatten(cotangent, _is_leaf)
        if len(cotangents) != len(outs):
            raise ValueError(f"vjp: {len(cotangents)} cotangents for {len(outs)} outputs")
        grads: list[Tensor | None] = [None] * len(xs)

        def collect(node: Any) -> Callable | None:
            i = slots.get(node)
            return None if i is None else (lambda g: grads.__setitem__(i, g))

        create = bool(Listeners.recording) and Listeners.grad_enabled
        dys = [as_tensor(c, o.dtype) for c, o in zip(cotangents, outs, strict=True)]
        autodiff.run_backward(outs, dys, collect, True, create, stop_at_sinks=True)
        return _rebuilt(trees, [
            Tensor._of(np.zeros(x.shape, x.dtype)) if g is None else g
            for x, g in zip(xs, grads, strict=True)
        ])  # fmt: skip

    # under an outer no_grad the value carries no history out (the gradients use `outs`)
    out = pytree.unflatten(tree, outs if grad_mode else [o.detach() for o in outs])
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _rebuilt(trees: list[tuple[list, Any]], flat: list[Tensor]) -> tuple:
    """The primals' structures (`trees`, as flattened) around the tensors of `flat`, in order."""
    out, start = [], 0
    for leaves, tree in trees:
        out.append(pytree.unflatten(tree, flat[start : start + len(leaves)]))
        start += len(leaves)
    return tuple(out)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, Tensor)


def _is_leaf(x: Any) -> bool:
    return not isinstance(x, tuple | list | dict)


def grad(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of a scalar-valued `fn` with respect to argument(s) `argnums` (a tuple of
    gradients for a tuple of argnums). With `has_aux`, `fn` returns `(value, aux)` and the
    gradient function `(grads, aux)` (`torch.func.grad`'s)."""
    return _with_value(fn, argnums, has_aux, value=False)


def grad_and_value(fn: Callable, argnums: int | Sequence[int] = 0,
                   has_aux: bool = False) -> Callable:  # fmt: skip
    """`grad`, also returning the value: `(grads, value)`, or `(grads, (value, aux))`."""
    return _with_value(fn, argnums, has_aux, value=True)


def _with_value(fn: Callable, argnums: int | Sequence[int], has_aux: bool,
                value: bool) -> Callable:  # fmt: skip
    def grad_fn(*args: Any, **kwargs: Any) -> Any:
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

        def partial_fn(*xs: Any) -> Any:
            full = list(args)
            for n, x in zip(nums, xs, strict=True):
                full[n] = x
            return fn(*full, **kwargs)

        out, vjp_fn, *aux = vjp(partial_fn, *(args[n] for n in nums), has_aux=has_aux)
        grads = vjp_fn(autodiff.default_dy(out))
        grads = grads[0] if isinstance(argnums, int) else grads
        if not value:
            return (grads, aux[0]) if has_aux else grads
        return grads, ((out, aux[0]) if has_aux else out)

    return grad_fn

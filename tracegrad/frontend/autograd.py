"""`tracegrad.autograd`: PyTorch's functional gradient, `grad(outputs, inputs)`, over the one
tape (the same engine as `Tensor.backward` and `GradManager.backward`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.frontend import autodiff, functions
from tracegrad.frontend.autodiff import (
    backward,
    detect_anomaly,
    enable_grad,
    is_anomaly_enabled,
    no_grad,
    set_detect_anomaly,
    set_grad_enabled,
)
from tracegrad.frontend.function import Function, FunctionCtx, once_differentiable
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = ["Function", "FunctionCtx", "backward", "detect_anomaly", "enable_grad", "grad",
           "is_anomaly_enabled", "no_grad", "once_differentiable", "set_detect_anomaly",
           "set_grad_enabled"]  # fmt: skip


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    only_inputs: bool = True,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple[Tensor | None, ...]:
    """The gradients of `outputs` (weighted by `grad_outputs`, 1 for scalars) with respect to
    `inputs`, returned rather than accumulated into `.grad`. With `create_graph` they are
    differentiable (higher order). An input the outputs do not depend on raises, or with
    `allow_unused` has None, or with `materialize_grads` zeros (which implies `allow_unused`,
    as in PyTorch). `only_inputs` is PyTorch's deprecated flag, which it ignores too
    (torch-optimizer's Adahessian passes it). With `is_grads_batched` each of `grad_outputs`
    holds a batch of weights along its first dimension, and each gradient has that dimension
    too (rows of a Jacobian, say)."""
    if is_grads_batched:
        rows = _batches(outputs, grad_outputs)
        found = [grad(outputs, inputs, row, True if i + 1 < len(rows) else retain_graph,
                      create_graph, allow_unused, materialize_grads=materialize_grads)
                 for i, row in enumerate(rows)]  # fmt: skip
        return tuple(None if g[0] is None else functions.stack(g) for g in zip(*found, strict=True))
    if materialize_grads and allow_unused is False:
        raise ValueError("grad: materialize_grads=True needs allow_unused to be None or True")
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outs)
    dys = [
        autodiff.default_dy(y) if g is None else as_tensor(g, y.dtype)
        for y, g in zip(outs, grad_outputs, strict=True)
    ]
    slots: dict[Any, list[int]] = {}
    for i, x in enumerate(ins):
        node = autodiff.edge(x)
        if node is None:
            raise RuntimeError(f"grad: input {i} does not require grad and was not recorded")
        slots.setdefault(node, []).append(i)
    found: list[Tensor | None] = [None] * len(ins)

    def deliver(node: Any) -> Callable | None:
        if node not in slots:
            return None
        return lambda g: [found.__setitem__(i, g) for i in slots[node]]

    retain = create_graph if retain_graph is None else retain_graph
    autodiff.run_backward(outs, dys, deliver, retain, create_graph)
    missing = [i for i, g in enumerate(found) if g is None]
    if missing and materialize_grads:
        for i in missing:
            found[i] = Tensor._of(np.zeros(ins[i].shape, ins[i].dtype))
    elif missing and not allow_unused:
        raise RuntimeError(
            f"grad: inputs {missing} were not used to compute the outputs; pass allow_unused=True "
            "to get None for them"
        )
    return tuple(found)


def _batches(outputs: Tensor | Sequence[Tensor], grad_outputs: Any) -> list[list[Tensor]]:
    """`grad_outputs` of `is_grads_batched`, one list of weights (one per output) per row of
    their common first dimension: PyTorch's vmap over them, as a loop of backward passes."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    gs = [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs or [])
    gs = [as_tensor(g) if g is not None else None for g in gs]
    if len(gs) != len(outs) or any(g is None or g.ndim == 0 for g in gs):
        raise ValueError("grad: is_grads_batched needs grad_outputs, one tensor with a batch "
                         "dimension first for each output")  # fmt: skip
    batches, shapes = {g.shape[0] for g in gs}, [tuple(y.shape) for y in outs]
    if len(batches) > 1 or 0 in batches or [g.shape[1:] for g in gs] != shapes:
        raise ValueError(f"grad: is_grads_batched: grad_outputs of shapes "
                         f"{[tuple(g.shape) for g in gs]} are not one batch size (not 0) before "
                         f"the outputs' shapes {shapes}")  # fmt: skip
    return [[g[i] for g in gs] for i in range(batches.pop())]

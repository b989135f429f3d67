"""`tracegrad.autograd`: PyTorch's functional gradient, `grad(outputs, inputs)`, over the one
tape (the same engine as `Tensor.backward` and `GradManager.backward`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.frontend import autodiff
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
    (torch-optimizer's Adahessian passes it)."""
    if is_grads_batched:
        raise NotImplementedError(
            "grad: is_grads_batched (vmap over grad_outputs) is not supported"
        )
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

"""`nn.utils`: gradient clipping, written with tensor ops so that a traced step clips too (the
scale is computed in the graph, not read back into Python)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from tracegrad.core.primitives import abs, minimum, sqrt
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import clip, stack
from tracegrad.frontend.reductions import amax, sum
from tracegrad.frontend.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _with_grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p for p in params if p.grad is not None]


@no_grad()
def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
    error_if_nonfinite: bool = False, foreach: bool | None = None,
) -> Tensor:  # fmt: skip
    """Scale all gradients together so that their joint norm is at most `max_norm`; returns
    the norm before clipping (PyTorch's). `error_if_nonfinite` raises on a nan or infinite norm
    (eagerly; a traced step cannot look at it); `foreach` is accepted."""
    params = _with_grads(parameters)
    if not params:
        return Tensor(0.0)
    if norm_type == math.inf:
        total = amax(stack([amax(abs(p.grad)) for p in params]))
    else:
        # g * g for the 2-norm: |g| ** 2 exactly, in one pass over each gradient, not two
        power = (lambda g: g * g) if norm_type == 2.0 else (lambda g: abs(g) ** float(norm_type))
        parts = stack([sum(power(p.grad)) for p in params])
        total = sqrt(sum(parts)) if norm_type == 2.0 else sum(parts) ** (1.0 / norm_type)
    if error_if_nonfinite and not total.is_symbolic and not math.isfinite(total.item()):
        raise RuntimeError(
            f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is "
            f"{total.item()}, so they cannot be clipped (error_if_nonfinite=True)"
        )
    scale = minimum(max_norm / (total + 1e-6), 1.0)
    for p in params:
        p.grad = p.grad * scale.astype(p.grad.dtype)
    return total


@no_grad()
def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clip every gradient element to [-clip_value, clip_value]."""
    for p in _with_grads(parameters):
        p.grad = clip(p.grad, -clip_value, clip_value)

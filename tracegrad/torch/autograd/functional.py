"""`torch.autograd.functional`: Jacobians, Hessians and their products with vectors, over
tracegrad's tape (`tracegrad.frontend.transforms`)."""

from typing import Any

from tracegrad.frontend.creation import ones_like
from tracegrad.frontend.grad_manager import vjp as _vjp
from tracegrad.frontend.tensor import Tensor
from tracegrad.frontend.transforms import hessian, hvp, jacobian, jvp, vhp
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


def vjp(func: Any, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple:  # fmt: skip
    """(func(inputs), v^T J), each shaped as PyTorch's: a tensor or a tuple as `inputs` is."""
    many = isinstance(inputs, tuple | list)
    out, vjp_fn = _vjp(func, *(inputs if many else (inputs,)))
    grads = vjp_fn(ones_like(out) if v is None else v)
    grads = tuple(grads) if many else grads[0]
    if not create_graph:
        out = out.detach() if isinstance(out, Tensor) else out
        grads = tuple(g.detach() for g in grads) if many else grads.detach()
    return out, grads


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

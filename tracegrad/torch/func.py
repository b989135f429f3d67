"""`torch.func`: function transforms (`grad`, `grad_and_value`, `vjp`, `jvp`, `jacrev`,
`jacfwd`, `hessian`, `vmap`, `functional_call`, `stack_module_state`) over tracegrad's tape."""

from typing import Any

from tracegrad.frontend.grad_manager import grad, grad_and_value, vjp
from tracegrad.frontend.transforms import func_hessian as hessian
from tracegrad.frontend.transforms import func_jvp as jvp
from tracegrad.frontend.transforms import (
    functional_call,
    jacfwd,
    jacrev,
    stack_module_state,
    vmap,
)
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp",
           "stack_module_state", "vjp", "vmap"]  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

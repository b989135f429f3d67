"""`torch.autograd.forward_ad`: dual tensors (`tracegrad.frontend.forward_ad`): inside
`with dual_level():`, `make_dual(primal, tangent)` and `unpack_dual(y).tangent`, the
Jacobian-vector product; outside a level every tangent is None, as code checks before taking
a path for dual inputs (kornia's augmentations, at every call)."""

from typing import Any

from tracegrad.frontend.forward_ad import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

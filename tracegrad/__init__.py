"""tracegrad: eager autodiff over NumPy that compiles whole training steps for the CPU.

Layers, each importing only those before it: core (errors, ir, the op table in primitives),
front end (tensor, api, autodiff, grad_manager, tracer), nn and optim, compiler (the top-level
`passes` package, codegen, kernels), runtime (`@trace`, the arena, reports).
"""

from . import api as _api
from . import nn, optim
from .api import *  # noqa: F403 (the op table's public ops and the NumPy-style functions)
from .autodiff import is_grad_enabled, no_grad
from .errors import MemoryBudgetError, ShapeError, TraceError
from .grad_manager import GradManager, grad, vjp
from .ir import GraphError
from .runtime import trace
from .serialization import CheckpointError, load, save
from .tensor import Tensor
from .tracer import guard, interpret

float32 = _api.np.float32
float64 = _api.np.float64


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor. Python floats become float32; an ndarray keeps its dtype."""
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


__all__ = [name for name in dir() if not name.startswith("_")]

"""tracegrad: eager autodiff over NumPy that compiles whole training steps for the CPU.

Layers, one folder each, each importing only those before it: core (errors, the IR, the op
table), frontend (Tensor, the tape, GradManager, the tracer), the library (nn, optim, numpy,
utils, distributed), the compiler (the top-level `passes` package and `compiler`: lowering, codegen,
kernels) and runtime (`@trace`, plans, the arena, reports); this module is the front door.
"""

from tracegrad import nn, optim, utils
from tracegrad import numpy as _numpy_extra
from tracegrad.core.errors import MemoryBudgetError, ShapeError, TraceError
from tracegrad.core.ir import GraphError
from tracegrad.frontend import autograd
from tracegrad.frontend import functions as _api
from tracegrad.frontend.autodiff import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from tracegrad.frontend.functions import *  # noqa: F403 (the op table's public ops and the NumPy-style functions)
from tracegrad.frontend.grad_manager import GradManager, grad, vjp
from tracegrad.frontend.random import Generator
from tracegrad.frontend.serialization import CheckpointError, load, save
from tracegrad.frontend.tensor import Tensor
from tracegrad.frontend.tracer import guard, interpret
from tracegrad.numpy import *  # noqa: F403 (the rest of NumPy's differentiable functions)
from tracegrad.numpy import linalg
from tracegrad.runtime.trace import trace as _compile

float32 = _api.np.float32
float64 = _api.np.float64
float16 = _api.np.float16
int64 = _api.np.int64
int32 = _api.np.int32
long = int64
pi, e, inf, nan = _api.np.pi, _api.np.e, _api.np.inf, _api.np.nan
Size = tuple  # t.shape is a tuple; `t.size()` gives it too
as_tensor = _api.as_tensor
cat = _api.concatenate


def trace(fn=None, *args, **kwargs):
    """`@trace` compiles a training step (see runtime.trace); given an array instead of a
    function it is NumPy's trace(a, offset, axis1, axis2), the sum along a diagonal."""
    if fn is not None and not callable(fn) or isinstance(fn, Tensor):
        return _numpy_extra.trace(fn, *args, **kwargs)
    return _compile(fn, *args, **kwargs)


def manual_seed(seed: int) -> None:
    """Seed every generator tracegrad draws from: randn/rand and parameter initialization."""
    _api.seed(seed)
    nn.manual_seed(seed)


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor. Python floats become float32; an ndarray keeps its dtype."""
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


__all__ = [name for name in dir() if not name.startswith("_")]

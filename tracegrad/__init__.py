"""tracegrad: eager autodiff over NumPy that compiles whole training steps for the CPU."""

from . import nn, optim
from . import primitives as _primitives  # attaches Tensor's operators
from .autodiff import grad, is_grad_enabled, no_grad, vjp
from .grad_manager import GradManager
from .primitives import (
    PRIMITIVES,
    abs,
    argmax,
    astype,
    broadcast_to,
    clip,
    concatenate,
    cos,
    equal,
    exp,
    expand_dims,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log_softmax,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    neg,
    not_equal,
    ones,
    ones_like,
    pow,
    prod,
    reshape,
    sigmoid,
    sign,
    sin,
    softmax,
    sqrt,
    squeeze,
    stack,
    sum,
    tanh,
    transpose,
    where,
    zeros,
    zeros_like,
)
from .serialization import CheckpointError, load, save
from .tensor import ShapeError, Tensor, TraceError

float32 = _primitives.np.float32
float64 = _primitives.np.float64


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor. Python floats become float32; an ndarray keeps its dtype."""
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


from .tracer import guard, interpret, trace  # noqa: E402 (after the op table it traces)

__all__ = [name for name in dir() if not name.startswith("_")]

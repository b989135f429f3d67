"""`torch.nn.grad`: a convolution's gradients with respect to its input and to its weight, as
functions of the output's gradient (what custom backward passes and `autograd.Function`s of
convolutions call), by differentiating the convolution itself."""

from collections.abc import Callable
from typing import Any

from tracegrad.frontend.autograd import grad
from tracegrad.frontend.creation import zeros
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import functional as F
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["conv1d_input", "conv1d_weight", "conv2d_input", "conv2d_weight", "conv3d_input",
           "conv3d_weight"]  # fmt: skip


def _gradient(conv: Callable, of_input: bool) -> Callable:
    def gradient(x: Any, w: Any, grad_output: Tensor, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1) -> Tensor:  # fmt: skip
        given = w if of_input else x  # the tensor given; the other comes as its size
        size = x if of_input else w
        free = zeros(tuple(size), dtype=grad_output.dtype, requires_grad=True)
        args = (free, given) if of_input else (given, free)
        out = conv(*args, None, stride, padding, dilation, groups)
        nested = grad_output.requires_grad or given.requires_grad
        return grad(out, free, grad_output, create_graph=nested)[0]

    return gradient


def _pair(conv: Callable, name: str) -> tuple[Callable, Callable]:
    of_input, of_weight = _gradient(conv, True), _gradient(conv, False)
    of_input.__name__ = of_input.__qualname__ = f"{name}_input"
    of_weight.__name__ = of_weight.__qualname__ = f"{name}_weight"
    of_input.__doc__ = (
        f"`{name}`'s gradient with respect to its input (of size `input_size`):"
        " `(input_size, weight, grad_output, stride, padding, dilation, groups)`."
    )
    of_weight.__doc__ = (
        f"`{name}`'s gradient with respect to its weight (of size "
        "`weight_size`): `(input, weight_size, grad_output, stride, ...)`."
    )
    return of_input, of_weight


conv1d_input, conv1d_weight = _pair(F.conv1d, "conv1d")
conv2d_input, conv2d_weight = _pair(F.conv2d, "conv2d")
conv3d_input, conv3d_weight = _pair(F.conv3d, "conv3d")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

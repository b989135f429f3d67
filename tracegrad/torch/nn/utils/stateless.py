"""`torch.nn.utils.stateless`: the first home of `functional_call`, which PyTorch keeps, with a
deprecation warning, for the code written against it."""

import warnings
from typing import Any

from tracegrad.frontend.transforms import functional_call as _functional_call
from tracegrad.torch._support import not_provided as _not_provided


def functional_call(module: Any, parameters_and_buffers: Any, args: Any = None,
                    kwargs: Any = None, *, tie_weights: bool = True, strict: bool = False,
                    ) -> Any:  # fmt: skip
    """`torch.func.functional_call`: `module` run with these tensors in place of its own."""
    warnings.warn("torch.nn.utils.stateless.functional_call is deprecated; use "
                  "torch.func.functional_call instead", FutureWarning, stacklevel=2)  # fmt: skip
    return _functional_call(module, parameters_and_buffers, args, kwargs,
                            tie_weights=tie_weights, strict=strict)  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

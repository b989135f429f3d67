"""`torch.nn`: tracegrad's layers (`tracegrad.nn`) with PyTorch's submodules `functional`,
`init`, `utils` and `parallel`."""

from typing import Any

from tracegrad.nn import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.nn import (
    attention,
    common_types,
    grad,
    modules,
    parallel,
    parameter,
    quantized,
)
from tracegrad.torch.nn.parallel import DataParallel

# isort: split
# after the star import, which bound tracegrad.nn's own: these packages' files (F's
# multi_head_attention_forward, init's missing names that say so, utils' rnn, parametrize, ...)
import tracegrad.torch.nn.functional as functional
import tracegrad.torch.nn.init as init
import tracegrad.torch.nn.utils as utils


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.nn`: tracegrad's layers (`tracegrad.nn`) with PyTorch's submodules `functional`,
`init`, `utils` and `parallel`."""

from typing import Any

from tracegrad.nn import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.nn import (
    attention,
    common_types,
    functional,
    grad,
    init,
    modules,
    parallel,
    parameter,
    quantized,
)
from tracegrad.torch.nn.parallel import DataParallel

# isort: split
# after the star import: the package (rnn, parametrize, ...), not tracegrad.nn's utils
import tracegrad.torch.nn.utils as utils


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

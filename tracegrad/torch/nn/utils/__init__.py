"""`torch.nn.utils`: `tracegrad.nn.utils` (gradient clipping, parameters as a vector, the
hook-based weight_norm and spectral_norm), with PyTorch's submodules `rnn`, `parametrize` and
`parametrizations`, `prune`."""

from typing import Any

from tracegrad.nn.utils import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.nn.utils import fusion, parametrizations, parametrize, prune, rnn  # noqa: E402, I001


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.utils.data`: tracegrad's (`tracegrad.utils.data`), also under PyTorch's submodule
names `dataloader`, `dataset` and `sampler`."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.utils.data import _utils, dataloader, dataset, distributed, sampler  # noqa: E402, I001
from tracegrad.utils.data import *  # noqa: F403


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

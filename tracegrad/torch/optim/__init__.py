"""`torch.optim`: tracegrad's optimizers (`tracegrad.optim`), `lr_scheduler` and `swa_utils`."""

from typing import Any

from tracegrad.optim import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided

# the star import bound tracegrad.optim's submodules, which `from tracegrad.torch.optim import`
# would take for this package's: drop them, so that torch.optim.lr_scheduler is the module whose
# missing names say they are not provided
del lr_scheduler, swa_utils  # noqa: F821
from tracegrad.torch.optim import lr_scheduler, optimizer, swa_utils  # noqa: E402


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

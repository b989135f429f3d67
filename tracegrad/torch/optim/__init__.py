"""`torch.optim`: tracegrad's optimizers (`tracegrad.optim`), `lr_scheduler` and `swa_utils`."""

import types
from typing import Any

from tracegrad.optim import *  # noqa: F403
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided

# the star import bound tracegrad.optim's submodules, which `from tracegrad.torch.optim import`
# would take for this package's: drop them, so that torch.optim.lr_scheduler is the module whose
# missing names say they are not provided
del lr_scheduler, swa_utils  # noqa: F821
from tracegrad.torch.optim import lr_scheduler, optimizer, swa_utils  # noqa: E402

# PyTorch's file for each optimizer: code and pickles name the class there
# (`torch.optim.rmsprop.RMSprop`, which stable-baselines3 pickles in its saved models)
_FILES = {"_adafactor": "Adafactor", "adadelta": "Adadelta", "adagrad": "Adagrad", "adam": "Adam",
          "adamax": "Adamax", "adamw": "AdamW", "asgd": "ASGD", "lbfgs": "LBFGS", "nadam": "NAdam",
          "radam": "RAdam", "rmsprop": "RMSprop", "rprop": "Rprop", "sgd": "SGD"}  # fmt: skip


def _file(name: str, cls: str) -> types.ModuleType:
    held = {cls: globals()[cls]} if cls in globals() else {}
    return file_module(f"{__name__}.{name}", f"`torch.optim.{name}`: {cls}", held)


globals().update({name: _file(name, cls) for name, cls in _FILES.items()})


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

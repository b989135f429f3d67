"""`torch.functional`: the file PyTorch defines some of its tensor functions in. Code imports
them from here (`from torch.functional import einsum`; opt_einsum_fx builds the set
`{torch.functional.einsum, torch.einsum}`); each is `torch`'s own function."""

import sys
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

_NAMES = ("atleast_1d", "atleast_2d", "atleast_3d", "broadcast_shapes", "broadcast_tensors",
          "cartesian_prod", "block_diag", "cdist", "chain_matmul", "einsum", "istft", "lu",
          "norm", "meshgrid", "pca_lowrank", "split", "stft", "svd_lowrank", "tensordot",
          "unique", "unique_consecutive", "unravel_index")  # fmt: skip
__all__ = list(_NAMES)  # (looked up when asked, below)


def __getattr__(name: str) -> Any:  # looked up when asked: `torch` defines some after this file
    if name in _NAMES:
        return getattr(sys.modules["tracegrad.torch"], name)  # (this file's package: loaded)
    raise _not_provided(__name__, name)

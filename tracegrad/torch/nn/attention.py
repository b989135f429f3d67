"""`torch.nn.attention`: `sdpa_kernel(backends)`, the context in which PyTorch chooses among its
attention kernels (flash, memory-efficient, math, cuDNN). tracegrad has one attention op (with
a Numba kernel each way) whatever is asked, so the context changes nothing; `SDPBackend` names
the choices."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


@contextlib.contextmanager
def sdpa_kernel(backends: Any, set_priority: bool = False) -> Iterator[None]:
    """Accepted: the attention inside runs tracegrad's one attention op."""
    yield


class BlockMask:
    """Flex attention's block-sparse mask (a type code checks for); flex attention is not
    provided: `F.scaled_dot_product_attention` takes masks as tensors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torch.nn.attention.flex_attention is not provided by tracegrad: use "
            "F.scaled_dot_product_attention with a mask"
        )


def _no_flex(*args: Any, **kwargs: Any) -> Any:
    BlockMask()


flex_attention = file_module(
    f"{__name__}.flex_attention", "`torch.nn.attention.flex_attention`: named, not provided",
    {"BlockMask": BlockMask, "flex_attention": _no_flex, "create_block_mask": _no_flex,
     "create_mask": _no_flex, "and_masks": _no_flex, "or_masks": _no_flex,
     "noop_mask": _no_flex, "_DEFAULT_SPARSE_BLOCK_SIZE": 128,
     "AuxRequest": type("AuxRequest", (), {}), "_mask_mod_signature": Any,
     "_score_mod_signature": Any},
)  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

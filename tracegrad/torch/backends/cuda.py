"""`torch.backends.cuda`: not built; its flags (`matmul.allow_tf32`, the attention kernels'
`enable_flash_sdp`, ...) and the deprecated `sdp_kernel` context are accepted and change
nothing: tracegrad has one attention op."""

import contextlib
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                         allow_bf16_reduced_precision_reduction=True)  # fmt: skip


def is_built() -> bool:
    return False


_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def _enable(kind: str) -> Any:
    def enable(enabled: bool) -> None:
        _sdp[kind] = bool(enabled)

    enable.__name__ = f"enable_{kind}_sdp"
    return enable


def _enabled(kind: str) -> Any:
    def enabled() -> bool:
        return _sdp[kind]

    enabled.__name__ = f"{kind}_sdp_enabled"
    return enabled


enable_flash_sdp, flash_sdp_enabled = _enable("flash"), _enabled("flash")
enable_mem_efficient_sdp, mem_efficient_sdp_enabled = (
    _enable("mem_efficient"),
    _enabled("mem_efficient"),
)
enable_math_sdp, math_sdp_enabled = _enable("math"), _enabled("math")
enable_cudnn_sdp, cudnn_sdp_enabled = _enable("cudnn"), _enabled("cudnn")


@contextlib.contextmanager
def sdp_kernel(enable_flash: bool = True, enable_math: bool = True,
               enable_mem_efficient: bool = True,
               enable_cudnn: bool = True) -> Iterator[None]:  # fmt: skip
    """PyTorch's deprecated form of `torch.nn.attention.sdpa_kernel`, with its warning."""
    warnings.warn(
        "`torch.backends.cuda.sdp_kernel()` is deprecated. In the future, this context manager "
        "will be removed. Please see `torch.nn.attention.sdpa_kernel()` for the new context "
        "manager, with updated signature.",
        FutureWarning,
        stacklevel=3,
    )
    before = dict(_sdp)
    _sdp.update(flash=enable_flash, math=enable_math, mem_efficient=enable_mem_efficient,
                cudnn=enable_cudnn)  # fmt: skip
    try:
        yield
    finally:
        _sdp.update(before)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

"""`torch.backends.cuda`: not built; its flags (`matmul.allow_tf32`, ...) are accepted and
change nothing."""

from types import SimpleNamespace
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                         allow_bf16_reduced_precision_reduction=True)  # fmt: skip


def is_built() -> bool:
    return False


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

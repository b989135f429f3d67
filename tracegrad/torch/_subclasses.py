"""`torch._subclasses`: PyTorch's fake tensors (shapes without values, for its compiler's
tracing). None are made here; code that asks whether a tensor is one (kornia, at import) is
told no."""

from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided


class FakeTensor:
    """Nothing here is one (`isinstance` checks name it)."""


def is_fake(x: Any) -> bool:
    return False


fake_tensor = file_module(f"{__name__}.fake_tensor", "`torch._subclasses.fake_tensor`",
                          {"FakeTensor": FakeTensor, "is_fake": is_fake})  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

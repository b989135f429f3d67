"""`torch._dynamo`, as training scripts touch it (`torch._dynamo.reset()`, `config.<option> =
...` before `torch.compile`): tracegrad's compiler is `trace`, which has no Dynamo, so the
settings are accepted and mean nothing; `disable`, `reset` and `is_compiling` are
`torch.compiler`'s."""

from __future__ import annotations

from types import SimpleNamespace

from tracegrad.torch.compiler import disable, is_compiling, reset

__all__ = ["config", "disable", "is_compiling", "reset"]

config = SimpleNamespace(
    suppress_errors=False, cache_size_limit=8, verbose=False, optimize_ddp=True,
    capture_scalar_outputs=False, automatic_dynamic_shapes=True,
)  # fmt: skip

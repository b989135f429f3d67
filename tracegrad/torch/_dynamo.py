"""`torch._dynamo`, as training scripts touch it (`torch._dynamo.reset()`, `config.<option> =
...` before `torch.compile`): tracegrad's compiler is `trace`, which has no Dynamo, so the
settings are accepted and mean nothing; `disable`, `reset` and `is_compiling` are
`torch.compiler`'s; `eval_frame.OptimizedModule` is the class `torch.compile(module)` returns
(code tests for it to unwrap `_orig_mod`)."""

from __future__ import annotations

from types import SimpleNamespace

from tracegrad.runtime.compiled_module import OptimizedModule
from tracegrad.torch.compiler import disable, is_compiling, reset

__all__ = ["config", "disable", "eval_frame", "is_compiling", "reset"]

eval_frame = SimpleNamespace(OptimizedModule=OptimizedModule)

config = SimpleNamespace(
    suppress_errors=False, cache_size_limit=8, verbose=False, optimize_ddp=True,
    capture_scalar_outputs=False, automatic_dynamic_shapes=True,
)  # fmt: skip

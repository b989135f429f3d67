"""`torch._dynamo`, as training scripts touch it (`torch._dynamo.reset()`, `config.<option> =
...` before `torch.compile`): tracegrad's compiler is `trace`, which has no Dynamo, so the
settings are accepted and mean nothing; `disable`, `reset`, `is_compiling`, `allow_in_graph`
and the shape hints are `torch.compiler`'s; `eval_frame.OptimizedModule` is the class
`torch.compile(module)` returns (code tests for it to unwrap `_orig_mod`)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

from tracegrad.runtime.compiled_module import OptimizedModule
from tracegrad.torch._support import file_module
from tracegrad.torch.compiler import (
    allow_in_graph,
    assume_constant_result,
    disable,
    is_compiling,
    mark_dynamic,
    mark_static,
    mark_static_address,
    maybe_mark_dynamic,
    reset,
)

__all__ = [
    "allow_in_graph", "assume_constant_result", "config", "disable", "eval_frame",
    "is_compiling", "mark_dynamic", "mark_static", "mark_static_address", "maybe_mark_dynamic",
    "reset",
]  # fmt: skip

eval_frame = SimpleNamespace(OptimizedModule=OptimizedModule)

config = SimpleNamespace(
    suppress_errors=False, cache_size_limit=8, verbose=False, optimize_ddp=True,
    capture_scalar_outputs=False, automatic_dynamic_shapes=True,
)  # fmt: skip


def is_compile_supported(device_type: Any) -> bool:
    """Whether `torch.compile` compiles for `device_type`: the CPU, the only device here."""
    return str(getattr(device_type, "type", device_type)).split(":")[0] == "cpu"


utils = file_module(f"{__name__}.utils", "`torch._dynamo.utils`",
                    {"is_compile_supported": is_compile_supported})  # fmt: skip


class TransformGetItemToIndex(contextlib.nullcontext):
    """Dynamo's rewrite of `x[i]` to index ops inside vmapped mask functions: nothing to
    rewrite here (no Dynamo)."""


_trace_wrapped_higher_order_op = file_module(
    f"{__name__}._trace_wrapped_higher_order_op",
    "`torch._dynamo._trace_wrapped_higher_order_op`",
    {"TransformGetItemToIndex": TransformGetItemToIndex},
)

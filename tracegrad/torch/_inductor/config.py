"""`torch._inductor.config`: the settings training scripts write before `torch.compile`
(`coordinate_descent_tuning`, `triton.unique_kernel_names`, ...), accepted and meaning nothing:
tracegrad's compiler plans and fuses the whole step itself."""

from types import SimpleNamespace
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

coordinate_descent_tuning = False
coordinate_descent_check_all_directions = False
epilogue_fusion = True
max_autotune = False
max_autotune_gemm = False
freezing = False
fx_graph_cache = True
force_fuse_int_mm_with_mul = False
use_mixed_mm = False
triton = SimpleNamespace(unique_kernel_names=False, cudagraphs=False, cudagraph_trees=True)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

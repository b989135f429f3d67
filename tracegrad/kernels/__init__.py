"""Numba kernels for the compiled plan: fused elementwise groups, fast float32 math, the cache.

`compile_group(inputs, nodes, outputs)` returns `kernel(*input_arrays, *output_arrays)`.
See docs/kernels.md for what is supported, the accuracy of the float32 math and the cache.
"""

from .cache import cache_dir
from .fused import FusedKernel, Structure, compile_group

__all__ = ["FusedKernel", "Structure", "cache_dir", "compile_group"]

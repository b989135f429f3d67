"""Numba kernels for the compiled plan: fused elementwise groups, fast float32 math, the cache.

`compile_group(inputs, nodes, outputs)` returns `kernel(*input_arrays, *output_arrays)`.
See docs/kernels.md for what is supported, the accuracy of the float32 math and the cache.
"""

import os

# Numba's OpenMP threads spin for milliseconds after each parallel kernel, fighting NumPy's BLAS
# threads (and any other busy process) for the cores: the gelu training step took 500 ms
# instead of 190 ms. Passive waiting is the default unless the user chose otherwise; it only
# takes effect if no OpenMP runtime has started in this process yet.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from .cache import cache_dir  # noqa: E402
from .fused import FusedKernel, Structure, compile_group, compile_groups  # noqa: E402

__all__ = ["FusedKernel", "Structure", "cache_dir", "compile_group", "compile_groups"]

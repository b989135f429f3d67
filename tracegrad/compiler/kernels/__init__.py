"""Numba kernels for the compiled plan: fused elementwise groups, fast float32 math, the cache.

`compile_group(inputs, nodes, outputs)` returns `kernel(*input_arrays, *output_arrays)`.
See docs/kernels.md for what is supported, the accuracy of the float32 math and the cache.
"""

import os

# How Numba's OpenMP threads wait for the next kernel: spinning 3,000 rounds (a short while),
# then asleep. A plan runs its matrix products on these threads too (`gemm`), so between one
# kernel or product and the next they are mostly still awake, and waking a sleeping team costs
# more than a short spin. Longer spins gain nothing on an idle machine and take the cores other
# processes need on a busy one; libgomp's default (300,000 rounds) kept the threads spinning
# through every BLAS call of the plan (docs/kernels.md, "Threads and a busy machine"). Only
# where the user chose neither; it takes effect only if no OpenMP runtime has started in this
# process yet.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "3000")

from tracegrad.compiler.kernels.cache import cache_dir  # noqa: E402
from tracegrad.compiler.kernels.fused import FusedKernel, Structure, compile_group, compile_groups  # noqa: E402

__all__ = ["FusedKernel", "Structure", "cache_dir", "compile_group", "compile_groups"]

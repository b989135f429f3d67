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


def _full_width_vectors() -> None:
    """Let LLVM vectorize kernels 512 bits wide where the host has AVX-512. LLVM's tuning for
    Intel's AVX-512 cores prefers 256-bit vectors, since 512-bit instructions lowered the clock
    of the first such chips; but a plan's GEMMs run 512-bit code anyway, so its kernels pay that
    clock already, and the compute-bound ones (GELU, SiLU, softmax's exp) do half the
    instructions at full width (docs/kernels.md, "Numba flags"). Only where the user chose no CPU
    name or features for Numba, and before Numba's CPU target exists: every function of the
    process is compiled for one target (the children compiling kernels are given it, `cache`)."""
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    from numba.core.registry import cpu_target

    if config.CPU_NAME or config.CPU_FEATURES is not None:
        return
    if "_toplevel_target_context" in vars(cpu_target):  # Numba compiled something already
        return
    features = get_host_cpu_features()
    if "+avx512f" in features.split(","):
        config.CPU_FEATURES = features + ",-prefer-256-bit"


_full_width_vectors()

from tracegrad.compiler.kernels.cache import cache_dir  # noqa: E402
from tracegrad.compiler.kernels.fused import FusedKernel, Structure, compile_group, compile_groups  # noqa: E402

__all__ = ["FusedKernel", "Structure", "cache_dir", "compile_group", "compile_groups"]

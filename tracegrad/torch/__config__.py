"""`torch.__config__`: how this torch was built. tracegrad is NumPy and Numba: no MKL or oneDNN
operators of PyTorch's (`USE_MKL=OFF`; PyG reads it), NumPy's BLAS for products."""

from __future__ import annotations

import numba
import numpy as np


def show() -> str:
    return (f"tracegrad on NumPy {np.__version__} and Numba {numba.__version__}\n"
            "  - USE_MKL=OFF, USE_MKLDNN=OFF, USE_CUDA=OFF, USE_OPENMP=OFF\n")  # fmt: skip


def parallel_info() -> str:
    return f"Numba threads: {numba.config.NUMBA_NUM_THREADS} (products: NumPy's BLAS threads)\n"

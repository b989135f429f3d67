"""Matrix products on Numba's threads: each thread runs its share of the rows (or columns) of the
result through a single-threaded GEMM routine (`blas.gemm_symbols`: MKL's where the `mkl`
extra is installed, else NumPy's OpenBLAS's, whose thread count is set to one meanwhile).

Why not `np.matmul`: it runs on OpenBLAS's own threads, which a plan wakes for every product and
which must sleep again at once (`blas.quiet_openblas`: spinning, they took the cores from the
Numba kernels in between); the Numba threads sleep too, and every product then pays for two
teams' wake-ups. Run on Numba's threads, products and kernels share one team, which spins
briefly between them (GOMP_SPINCOUNT, `kernels/__init__.py`; docs/kernels.md, "Threads and a
busy machine", has the measurements). Results differ from NumPy's only by rounding (a
single-threaded call, or MKL, blocks the sums its own way). 2-D operands, or stacks of one batch
shape (each product on one thread, the stack shared), of float32 or float64 in any layout BLAS
reads (rows or columns contiguous); other layouts, and read-only operands, go to `np.matmul`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import team
from tracegrad.compiler.kernels.blas import gemm_symbols
from tracegrad.compiler.kernels.cache import GeneratedKernel, named
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node

OPS = {P.matmul: "product"}
STRIDED = True  # reads operands where they lie (`lowering._slices_copied`)
DTYPES = ("float32", "float64")
ALIGN = 16  # a thread's share of rows or columns is a multiple of this many
# A product wider than tall has its rows split between the threads too where each share has
# ROWS_MIN rows and the inner dimension is at most K_ROWS_MAX (a weight's gradient over a small
# batch, out x batch by batch x in): each thread then packs all of the right operand, which is
# cheap for a short inner dimension, and writes whole rows of the result, which dominates; with
# a long one (a transformer's weight gradients over its tokens) packing dominates and the
# columns are split, as for fewer rows, which run below BLAS's rate (docs/benchmarks.md,
# "2026-12-06, evening").
ROWS_MIN = 128
K_ROWS_MAX = 256
# Products with an operand of this many elements run here whatever the plan's size
# (`lowering`): from about there, np.matmul's call into OpenBLAS's threads costs more than a
# kernel's launch (a recurrent net's per-step products, `benchmarks/kernels.py gemm`).
KERNEL_MIN = 1 << 12
# Products of fewer multiply-adds than this run on the calling thread alone: waking the other
# threads, asleep after a pause longer than their spin, costs more than such a product's work,
# and splitting it gains little when they are awake (`benchmarks/kernels.py gemm`).
SERIAL_MAX = 1 << 21

DECLARATIONS = """from numba import types

from tracegrad.compiler.kernels.blas import gemm_symbols

gemm_symbols()  # the names below, registered with LLVM in this process
I, T = types.{ints}, types.{dtype}
gemm = types.ExternalFunction(
    "tracegrad_cblas_{letter}gemm",
    types.void(types.int32, types.int32, types.int32, I, I, I, T, types.intp, I, types.intp, I,
               T, types.intp, I),
)
get_blas_threads = types.ExternalFunction("tracegrad_openblas_get_num_threads", types.int32())
set_blas_threads = types.ExternalFunction(
    "tracegrad_openblas_set_num_threads", types.void(types.int32)
)
ROW_MAJOR, AS_IS, TRANSPOSED = 101, 111, 112
"""

_SOURCE = '''"""Matrix product ({dtype}) on Numba's threads: compiler.kernels.gemm generated it."""

import numpy as np
from numba import njit, prange

{declarations}

@njit(cache=True)
def operand(x):
    """How BLAS reads x: (AS_IS or TRANSPOSED, leading dimension), or (0, 0) if it cannot."""
    size, (rows, cols), (s0, s1) = x.itemsize, x.shape, x.strides
    if s1 == size and s0 % size == 0 and s0 >= max(cols, 1) * size:
        return AS_IS, s0 // size
    if s0 == size and s1 % size == 0 and s1 >= max(rows, 1) * size:
        return TRANSPOSED, s1 // size
    return 0, 0


@njit("boolean({dtype}[:, :], {dtype}[:, :], {dtype}[:, ::1], int64)", parallel=True, cache=True)
def kernel(a, b, c, threads):
    """c = a @ b in `threads` shares, True; False (nothing written) if BLAS cannot read a or b
    as they lie. (The count is an argument: `get_num_threads` in here would keep Numba from
    caching the kernel.)"""
    (ta, lda), (tb, ldb) = operand(a), operand(b)
    if ta == 0 or tb == 0:
        return False
    (m, k), n, size = a.shape, b.shape[1], c.itemsize
    if k == 0:
        c[:] = 0
    if m == 0 or n == 0 or k == 0:
        return True
    blas_threads = get_blas_threads()
    set_blas_threads(1)  # for every thread of the process (OpenBLAS's count is global)
    if threads == 1:  # on this thread alone: the loop below would wake the others
        gemm(ROW_MAJOR, ta, tb, m, n, k, T(1), a.ctypes.data, lda, b.ctypes.data, ldb, T(0),
             c.ctypes.data, n)
        set_blas_threads(blas_threads)
        return True
    by_rows = m >= n or m >= {rows_min} * threads and k <= {k_rows_max}
    extent = m if by_rows else n
    share = -(-extent // threads)
    share = -(-share // {align}) * {align}
    for part in prange(-(-extent // share)):
        lo = part * share
        hi = min(extent, lo + share)
        if by_rows:
            a_at = a.ctypes.data + lo * (lda if ta == AS_IS else 1) * size
            gemm(ROW_MAJOR, ta, tb, hi - lo, n, k, T(1), a_at, lda, b.ctypes.data, ldb, T(0),
                 c.ctypes.data + lo * n * size, n)
        else:
            b_at = b.ctypes.data + lo * (1 if tb == AS_IS else ldb) * size
            gemm(ROW_MAJOR, ta, tb, m, hi - lo, k, T(1), a.ctypes.data, lda, b_at, ldb, T(0),
                 c.ctypes.data + lo * size, n)
    set_blas_threads(blas_threads)
    return True


@njit("boolean({dtype}[:, :, :], {dtype}[:, :, :], {dtype}[:, :, ::1], int64)", parallel=True,
      cache=True)
def batched(a, b, c, threads):
    """c[i] = a[i] @ b[i] for each i, the products shared between `threads` (attention's
    scores and weighted values, a batch of small products each below a thread's worth); False
    (nothing written) if BLAS cannot read an operand as it lies."""
    count, (m, k), n = a.shape[0], a.shape[1:], b.shape[2]
    if count == 0:
        return True
    (ta, lda), (tb, ldb) = operand(a[0]), operand(b[0])  # every matrix of a stack lies alike
    if ta == 0 or tb == 0:
        return False
    if k == 0:
        c[:] = 0
    if m == 0 or n == 0 or k == 0:
        return True
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    share = -(-count // threads)
    for part in prange(-(-count // share)):
        for i in range(part * share, min(count, (part + 1) * share)):
            gemm(ROW_MAJOR, ta, tb, m, n, k, T(1), a[i].ctypes.data, lda, b[i].ctypes.data, ldb,
                 T(0), c[i].ctypes.data, n)
    set_blas_threads(blas_threads)
    return True
'''


def declarations(dtype: str, ints: str) -> str:
    """Module text declaring `gemm` (`cblas_?gemm` for `dtype`, sizes of integer type `ints`),
    NumPy's OpenBLAS's thread-count getter and setter, and the CBLAS constants, for generated
    kernels."""
    letter = {"float32": "s", "float64": "d"}[dtype]
    return DECLARATIONS.format(dtype=dtype, ints=ints, letter=letter)


def generate_source(dtype: str, ints: str) -> str:
    """The text of the kernel's module for `dtype`, BLAS sizes of integer type `ints`."""
    return _SOURCE.format(dtype=dtype, declarations=declarations(dtype, ints), align=ALIGN,
                          rows_min=ROWS_MIN, k_rows_max=K_ROWS_MAX)  # fmt: skip


def module(node: Node) -> tuple[str, str]:
    """The name and text of a matrix product's kernel module; NotImplementedError unless both
    operands are 2-D, or stacks of matrices of one batch shape, not constants, and of the
    result's dtype, float32 or float64, and there are GEMM routines to call
    (`blas.gemm_symbols`)."""
    dtype = node.outputs[0].dtype.name
    ints = gemm_symbols()
    a, b = node.inputs
    if (
        ints is None
        or dtype not in DTYPES
        or any(v.ndim < 2 or v.dtype.name != dtype or v.const is not None for v in node.inputs)
        or a.shape[:-2] != b.shape[:-2]
    ):
        raise NotImplementedError(
            f"no BLAS kernel for matmul of {[v.type_str for v in node.inputs]}"
        )
    return named("gemm", generate_source(dtype, ints))


class GemmKernel(GeneratedKernel):
    """`kernel(a, b, out)`: out = a @ b, on Numba's threads where BLAS can read a and b
    (`compiled` for 2-D operands, `batched` for stacks)."""

    def __init__(self, compiled: Callable, path: Path, batched: Callable):
        super().__init__(compiled, path)
        self.threads = numba.get_num_threads()  # as many shares, from now on (as conv's)
        self.fast = True
        self.batched = batched

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        if a.ndim == 2:
            (m, k), n = a.shape, b.shape[-1]
            if self.fast and self._ran(self.compiled, (a, b, out), m * k * n):
                return
        else:  # stacks of one batch shape as one batch axis: a view where the batch axes merge
            (m, k), n, count = a.shape[-2:], b.shape[-1], math.prod(a.shape[:-2])
            stacks = [np.reshape(x, (count, *x.shape[-2:])) for x in (a, b, out)]
            # (a transposed key's still do; a result reshaped into a copy is not written)
            in_out = np.may_share_memory(stacks[2], out)
            if self.fast and in_out and self._ran(self.batched, stacks, m * k * n * count):
                return
        np.matmul(a, b, out=out)

    def _ran(self, kernel: Callable, arrays: Sequence[np.ndarray], work: int) -> bool:
        """Whether `kernel` computed the product, on the threads from SERIAL_MAX multiply-adds.
        Its signature refuses (TypeError, before anything runs) a read-only operand, an `out`
        that is not C-contiguous, another dtype: checking each here cost more than a small
        product's work. Numba's error costs far more than a product, and what a plan passes
        (a read-only input, say) is the same at every call: after one, NumPy's from then on."""
        threads = self.threads if work >= SERIAL_MAX else 1
        try:
            if not kernel(*arrays, threads):
                return False
        except TypeError:
            self.fast = False
            return False
        if threads > 1:
            team.finished()
        return True


def launcher(node: Node, compiled: Callable, path: Path) -> GemmKernel:
    return GemmKernel(compiled, path, compiled.py_func.__globals__["batched"])

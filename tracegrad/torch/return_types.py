"""`torch.return_types`: the named tuples PyTorch's functions return (`torch.return_types.max`
holds `values` and `indices`), as the types tracegrad's functions return, for isinstance
checks and pytree registrations."""

from typing import Any

from tracegrad.frontend import counting, elementwise, linalg, reductions, sorting
from tracegrad.torch._support import not_provided as _not_provided

max, min = reductions.MaxResult, reductions.MinResult  # noqa: A001 (PyTorch's names)
aminmax = reductions.AminmaxResult
cummax, cummin = reductions.CummaxResult, reductions.CumminResult
sort, topk, kthvalue = sorting.SortResult, sorting.TopkResult, sorting.KthvalueResult
median, nanmedian, mode = sorting.MedianResult, sorting.NanmedianResult, sorting.ModeResult
frexp, histogram = elementwise.FrexpResult, counting.HistogramResult
slogdet = linalg_slogdet = linalg.SlogdetResult
linalg_eig, linalg_eigh = linalg.EigResult, linalg.EighResult
linalg_svd, svd = linalg.SVDResult, linalg.SVDTopResult
qr = linalg_qr = linalg.QRResult
triangular_solve, linalg_lstsq, geqrf = (linalg.TriangularSolveResult, linalg.LstsqResult,
                                         linalg.GeqrfResult)  # fmt: skip
linalg_inv_ex, linalg_cholesky_ex = linalg.InvExResult, linalg.CholeskyExResult
linalg_solve_ex, linalg_lu = linalg.SolveExResult, linalg.LUResult
linalg_lu_factor, linalg_lu_factor_ex = linalg.LUFactorResult, linalg.LUFactorExResult

all_return_types = [
    max, min, aminmax, cummax, cummin, sort, topk, kthvalue, median, nanmedian, mode, frexp,
    histogram, slogdet, linalg_eig, linalg_eigh, linalg_svd, svd, qr, triangular_solve,
    linalg_lstsq, geqrf, linalg_inv_ex, linalg_cholesky_ex, linalg_solve_ex, linalg_lu,
    linalg_lu_factor, linalg_lu_factor_ex,
]  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

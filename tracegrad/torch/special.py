"""`torch.special`: tracegrad's special functions under PyTorch's names there (`gammaln` is
lgamma, `psi` digamma, `expit` the sigmoid, `gammainc` igamma); the values and gradients are the
op table's (core/ops/special.py) and `tracegrad.frontend.special`'s compositions."""

from typing import Any

from tracegrad.core.primitives import (
    digamma,
    erf,
    erfc,
    erfcx,
    erfinv,
    exp2,
    expm1,
    i0,
    i0e,
    i1,
    i1e,
    log1p,
    sigmoid,
    zeta,
)
from tracegrad.core.primitives import igamma as gammainc
from tracegrad.core.primitives import igammac as gammaincc
from tracegrad.core.primitives import lgamma as gammaln
from tracegrad.frontend.elementwise import round, sinc
from tracegrad.frontend.functions import astype, pytorch_keywords
from tracegrad.frontend.reductions import log_softmax as _log_softmax
from tracegrad.frontend.reductions import logsumexp
from tracegrad.frontend.reductions import softmax as _softmax
from tracegrad.frontend.special import (
    airy_ai,
    bessel_j0,
    bessel_j1,
    bessel_y0,
    bessel_y1,
    chebyshev_polynomial_t,
    chebyshev_polynomial_u,
    chebyshev_polynomial_v,
    chebyshev_polynomial_w,
    entr,
    hermite_polynomial_h,
    hermite_polynomial_he,
    laguerre_polynomial_l,
    legendre_polynomial_p,
    log_ndtr,
    logit,
    modified_bessel_i0,
    modified_bessel_i1,
    modified_bessel_k0,
    modified_bessel_k1,
    ndtr,
    ndtri,
    polygamma,
    scaled_modified_bessel_k0,
    scaled_modified_bessel_k1,
    shifted_chebyshev_polynomial_t,
    shifted_chebyshev_polynomial_u,
    shifted_chebyshev_polynomial_v,
    shifted_chebyshev_polynomial_w,
    spherical_bessel_j0,
    xlog1py,
    xlogy,
)
from tracegrad.frontend.special import mvlgamma as multigammaln
from tracegrad.frontend.tensor import Tensor, as_tensor
from tracegrad.torch._support import not_provided as _not_provided

expit, psi = sigmoid, digamma


@pytorch_keywords
def softmax(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    """softmax along `dim` (required here, as in PyTorch), of input cast to `dtype` first."""
    x = as_tensor(input)
    return _softmax(x if dtype is None else astype(x, dtype), dim)


@pytorch_keywords
def log_softmax(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    x = as_tensor(input)
    return _log_softmax(x if dtype is None else astype(x, dtype), dim)


__all__ = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "chebyshev_polynomial_t",
           "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w", "digamma",
           "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammainc",
           "gammaincc", "gammaln", "hermite_polynomial_h", "hermite_polynomial_he", "i0", "i0e",
           "i1", "i1e", "laguerre_polynomial_l", "legendre_polynomial_p", "log1p", "log_ndtr",
           "log_softmax", "logit", "logsumexp", "modified_bessel_i0", "modified_bessel_i1",
           "modified_bessel_k0", "modified_bessel_k1", "multigammaln", "ndtr", "ndtri",
           "polygamma", "psi", "round", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
           "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
           "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "sinc", "softmax",
           "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

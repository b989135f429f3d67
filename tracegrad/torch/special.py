"""`torch.special`: tracegrad's special functions under PyTorch's names there (`gammaln` is
lgamma, `psi` digamma, `expit` the sigmoid); the values and gradients are the op table's
(core/ops/special.py) and `tracegrad.frontend.special`'s compositions."""

from typing import Any

from tracegrad.core.primitives import (
    digamma,
    erf,
    erfc,
    erfinv,
    exp2,
    expm1,
    i0,
    i1,
    log1p,
    sigmoid,
)
from tracegrad.core.primitives import lgamma as gammaln
from tracegrad.frontend.elementwise import round, sinc
from tracegrad.frontend.functions import astype, pytorch_keywords
from tracegrad.frontend.reductions import log_softmax as _log_softmax
from tracegrad.frontend.reductions import logsumexp
from tracegrad.frontend.reductions import softmax as _softmax
from tracegrad.frontend.special import (
    entr,
    log_ndtr,
    logit,
    ndtr,
    ndtri,
    polygamma,
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


__all__ = ["digamma", "entr", "erf", "erfc", "erfinv", "exp2", "expit", "expm1", "gammaln", "i0",
           "i1", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr",
           "ndtri", "polygamma", "psi", "round", "sinc", "softmax", "xlog1py",
           "xlogy"]  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

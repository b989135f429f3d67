"""`torch.distributions.multivariate_normal`: MultivariateNormal, and PyTorch's helpers there
that libraries reuse (pyro: `_batch_mahalanobis`, `_batch_mv`)."""

from typing import Any

import numpy as np

import tracegrad as _tg
from tracegrad.distributions import MultivariateNormal  # noqa: F401


def _batch_mv(bmat: Any, bvec: Any) -> Any:
    """Batched matrix-vector products, broadcasting the batch dimensions."""
    return (bmat @ bvec.unsqueeze(-1)).squeeze(-1)


def _batch_mahalanobis(bL: Any, bx: Any) -> Any:
    """x^T (L L^T)^-1 x for lower-triangular L, by one triangular solve, batches broadcast."""
    batch = np.broadcast_shapes(bL.shape[:-2], bx.shape[:-1])
    L = bL.expand(*batch, *bL.shape[-2:])
    x = bx.expand(*batch, bx.shape[-1]).unsqueeze(-1)
    return _tg.linalg.solve_triangular(L, x, upper=False).squeeze(-1).square().sum(-1)


def _precision_to_scale_tril(P: Any) -> Any:
    """The lower Cholesky factor of P^-1 without inverting P: the Cholesky factor of P with its
    order reversed is the inverse transpose of the factor sought."""
    flipped = _tg.linalg.cholesky(_tg.flip(P, (-2, -1)))
    inverse = _tg.flip(flipped, (-2, -1)).transpose(-2, -1)
    eye = _tg.eye(P.shape[-1], dtype=P.dtype)
    return _tg.linalg.solve_triangular(inverse, eye, upper=False)

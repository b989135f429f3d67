"""What PyTorch's distribution files import at their top, which code imports from them in turn
(`from torch.distributions.multivariate_normal import Distribution, _batch_mahalanobis`): each
file module of `torch.distributions` looks a name it lacks up here before refusing it."""

from __future__ import annotations

import math
import numbers
from typing import Any

from tracegrad.torch._support import not_provided


def _batch_mv(bmat: Any, bvec: Any) -> Any:
    """Batched matrix-vector products, broadcasting the batch dimensions."""
    return (bmat @ bvec.unsqueeze(-1)).squeeze(-1)


def _batch_mahalanobis(bL: Any, bx: Any) -> Any:
    """x^T (L L^T)^-1 x for lower-triangular L, by one triangular solve, batches broadcast."""
    import tracegrad.torch as torch

    batch = torch.broadcast_shapes(bL.shape[:-2], bx.shape[:-1])
    L = bL.expand(*batch, *bL.shape[-2:])
    x = bx.expand(*batch, bx.shape[-1]).unsqueeze(-1)
    return torch.linalg.solve_triangular(L, x, upper=False).squeeze(-1).square().sum(-1)


def _precision_to_scale_tril(P: Any) -> Any:
    """The lower Cholesky factor of P^-1 without inverting P: the Cholesky factor of P with its
    order reversed is the inverse transpose of the factor sought."""
    import tracegrad.torch as torch

    flipped = torch.linalg.cholesky(torch.flip(P, (-2, -1)))
    inverse = torch.flip(flipped, (-2, -1)).transpose(-2, -1)
    eye = torch.eye(P.shape[-1], dtype=P.dtype)
    return torch.linalg.solve_triangular(inverse, eye, upper=False)


def shared(module: str, name: str) -> Any:
    """`name` as PyTorch's file `module` has it in its namespace, or the refusal."""
    import tracegrad.torch as torch

    for space in (torch.distributions, torch.distributions.utils, torch.distributions.transforms):
        if name in vars(space):
            return vars(space)[name]
    extras = {
        "torch": torch, "Tensor": torch.Tensor, "math": math, "nan": math.nan, "inf": math.inf,
        "Number": numbers.Number, "_Number": int | float, "_size": torch.Size | list | tuple,
        "F": torch.nn.functional, "_batch_mv": _batch_mv, "_batch_mahalanobis": _batch_mahalanobis,
        "_precision_to_scale_tril": _precision_to_scale_tril,
    }  # fmt: skip
    if name in extras:
        return extras[name]
    raise not_provided(module, name)

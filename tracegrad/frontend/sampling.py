"""Sampling from distributions a tensor holds: `multinomial` (the next token of a language
model) and `bernoulli`. The numbers come from the counter-based random state
(`frontend/random.py`), so a traced step draws afresh at every call and draws what an eager
run with the same seed draws; not PyTorch's numbers (its generator is another)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.ops.random import uniform_dtype
from tracegrad.frontend import random
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import pytorch_keywords
from tracegrad.frontend.sorting import topk
from tracegrad.frontend.tensor import Tensor, as_tensor


@pytorch_keywords(aliases=False)
def multinomial(input: Any, num_samples: int, replacement: bool = False, *,
                generator: Any = None) -> Tensor:  # fmt: skip
    """Indices drawn by the weights in each row of `input` (1-D or 2-D, not necessarily
    normalized): `num_samples` per row, distinct unless `replacement`. int64, no gradient."""
    state = random.state_of(generator)
    with no_grad():
        p = as_tensor(input).detach()
        if p.ndim not in (1, 2) or p.dtype.kind != "f":
            raise ValueError(f"multinomial: expects a 1-D or 2-D float tensor, got {p.shape} "
                             f"{p.dtype}")  # fmt: skip
        n = p.shape[-1]
        if not replacement and num_samples > n:
            raise ValueError(f"multinomial: cannot draw {num_samples} samples without "
                             f"replacement from {n} categories")  # fmt: skip
        if not p.is_symbolic:
            _check_weights(p.numpy())
        if replacement or num_samples == 1:
            return random.draw(P.categorical, state, p, num_samples=num_samples)
        # distinct draws: the k largest of log(u) / p (Efraimidis and Spirakis's keys)
        u = random.uniform(p.shape, uniform_dtype(p.dtype), state)
        keys = P.where(p > 0, P.log1p(-u) / P.where(p > 0, p, 1.0), -np.inf)
        return topk(keys, num_samples, dim=-1).indices


def _check_weights(p: np.ndarray) -> None:
    if not np.isfinite(p).all() or (p < 0).any():
        raise ValueError("multinomial: the weights must be finite and non-negative")
    if (p.sum(-1) <= 0).any():
        raise ValueError("multinomial: a row of weights sums to 0")


def bernoulli(input: Any, p: Any = None, *, generator: Any = None) -> Tensor:
    """1 with probability `input` (elementwise; or `p` for every element), else 0, in input's
    dtype; no gradient."""
    with no_grad():
        x = as_tensor(input).detach()
        dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
        u = random.uniform(x.shape, uniform_dtype(dtype), random.state_of(generator))
        draw = u < (x if p is None else p)
        return draw.astype(dtype)


__all__ = ["bernoulli", "multinomial"]

"""The connectionist temporal classification loss (speech and handwriting recognition): the
negative log-likelihood of each target sequence summed over all its alignments to the input
frames, by the forward algorithm in log space. The recursion is tensor ops over the batch and
the blank-extended targets, one step per frame, so autodiff gives PyTorch's gradient and a
traced step unrolls it (targets and lengths may be traced inputs too; only the padded sizes are
fixed)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend.functions import cat, reshape, take_along
from tracegrad.frontend.reductions import mean, sum
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = ["ctc_loss"]

# Unreachable states hold this instead of -inf: exp of it is 0 and no gradient becomes 0/0
UNREACHABLE = -1e30


def _logaddexp(*terms: Tensor) -> Tensor:
    top = terms[0]
    for t in terms[1:]:
        top = P.maximum(top, t)
    top = top.detach()
    total = P.exp(terms[0] - top)
    for t in terms[1:]:
        total = total + P.exp(t - top)
    return P.log(total) + top


def _shifted(alpha: Tensor, by: int) -> Tensor:
    """alpha moved `by` states along the extended targets, unreachable states coming in."""
    n = alpha.shape[0]
    fill = Tensor._of(bfloat16.full((n, by), UNREACHABLE, alpha.dtype))
    return cat([fill, alpha[:, :-by]], 1)


def _padded_targets(targets: Tensor, lengths: Tensor, n: int) -> Tensor:
    """(N, S) targets, from PyTorch's (N, S) or its 1-d concatenation (read eagerly)."""
    if targets.ndim == 2:
        return targets
    if targets.ndim != 1:
        raise ShapeError(f"ctc_loss: targets {targets.shape} must be (N, S) or 1-d (concatenated)")
    flat = targets._concrete("ctc_loss of concatenated targets")
    counts = lengths._concrete("ctc_loss of concatenated targets").astype(np.int64)
    rows = np.zeros((n, max(int(counts.max(initial=0)), 1)), np.int64)
    for i, start in enumerate(np.concatenate([[0], np.cumsum(counts)[:-1]])):
        rows[i, : counts[i]] = flat[start : start + counts[i]]
    return Tensor._of(rows)


def ctc_loss(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
             blank: int = 0, reduction: str = "mean",
             zero_infinity: bool = False) -> Tensor:  # fmt: skip
    """PyTorch's CTC loss of (T, N, C) `log_probs` (log-softmax over C; (T, C) for one sample)
    and (N, S) or concatenated `targets`: "mean" divides each sample's loss by its target length
    before averaging the batch. An impossible alignment costs inf (0 with `zero_infinity`)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"ctc_loss: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
    lp = as_tensor(log_probs)
    batched = lp.ndim == 3
    if not batched:
        if lp.ndim != 2:
            raise ShapeError(f"ctc_loss: log_probs {lp.shape} must be (T, N, C) or (T, C)")
        lp = reshape(lp, (lp.shape[0], 1, lp.shape[1]))
    t_max, n, _ = lp.shape
    in_len = reshape(as_tensor(input_lengths), (n,))
    tgt_len = reshape(as_tensor(target_lengths), (n,))
    tgt = as_tensor(targets)
    tgt = _padded_targets(tgt if batched or tgt.ndim != 1 else reshape(tgt, (1, -1)), tgt_len, n)
    s_max = tgt.shape[1]
    width = 2 * s_max + 1
    # the blank-extended targets: blank, y1, blank, y2, ..., blank
    odd = Tensor._of(np.arange(width) % 2 == 1)
    label_at = Tensor._of(np.clip((np.arange(width) - 1) // 2, 0, s_max - 1))
    ext = P.where(odd, tgt[:, label_at].astype(np.int64), blank)  # (N, width)
    # a state may skip the blank before it when its label differs from the one two back
    skip = odd & (Tensor._of(np.arange(width) >= 2)) & (ext != cat([ext[:, :2], ext[:, :-2]], 1))
    at = reshape(ext, (1, n, width)) + Tensor._of(np.zeros((t_max, 1, 1), np.int64))
    frames = take_along(lp, at, 2, (t_max, n, width))
    start = Tensor._of(np.arange(width) < 2)
    alpha = P.where(start, frames[0], UNREACHABLE)
    for t in range(1, t_max):
        step = _logaddexp(alpha, _shifted(alpha, 1),
                          P.where(skip, _shifted(alpha, 2), UNREACHABLE)) + frames[t]  # fmt: skip
        alpha = P.where(reshape(in_len > t, (n, 1)), step, alpha)
    last = reshape(2 * tgt_len.astype(np.int64), (n, 1))
    final = take_along(alpha, last, 1, (n, 1))
    before = take_along(alpha, P.maximum(last - 1, 0), 1, (n, 1))
    before = P.where(last > 0, before, UNREACHABLE)
    loss = -reshape(_logaddexp(final, before), (n,))
    impossible = loss > -UNREACHABLE / 2
    loss = P.where(impossible, 0.0 if zero_infinity else np.inf, loss)
    if reduction == "none":
        return loss if batched else reshape(loss, ())
    if reduction == "sum":
        return sum(loss)
    return mean(loss / P.maximum(tgt_len, 1).astype(loss.dtype))

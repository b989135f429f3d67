"""Losses over class scores: log-softmax and the negative log-likelihood as the ops a trace
records, and softmax, log_softmax, PyTorch's nll_loss and cross_entropy as one op each eagerly (one
NumPy call and one tape node where the parts are a score of ops, each a Python call forward and
back) whose trace is those parts.

Rows are samples (N) and columns classes (C); a label equal to `ignore_index` counts for
nothing, and the weighted mean divides by the total weight of the counted labels."""

from __future__ import annotations

import math

import numpy as np

from tracegrad.core.vocabulary import Primitive

REDUCTIONS = ("none", "sum", "mean")  # PyTorch's, of the per-sample losses


def log_softmax_parts(x, axis: tuple[int, ...]):
    """(x - m) - log(sum(exp(x - m))), m the maximum where finite: subtracting logsumexp, a
    large number whose rounding error is large, lost log C in a row of -1e9 and 5e-4 at logits
    near 1e4; an infinite maximum would make inf - inf."""
    m = max(x, axis=axis, keepdims=True).detach()
    shifted = x - where(abs(m) < math.inf, m, 0.0)
    return shifted - log(sum(exp(shifted), axis=axis, keepdims=True))


def _log_softmax(x, axis: tuple[int, ...], out=None):
    """`log_softmax_parts` in four passes over x, the last in place."""
    x = x if x.dtype.kind == "f" else x.astype(np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    out = np.subtract(x, np.where(np.abs(m) < math.inf, m, 0.0).astype(x.dtype), out=out)
    out -= np.log(np.sum(np.exp(out), axis=axis, keepdims=True))
    return out


def _log_softmax_rule(x, axis):
    return x.shape, x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)


def _log_softmax_grad(g, out, axis: tuple[int, ...]):
    """g - softmax(x) sum(g), the softmax from the saved result."""
    return g - np.exp(out) * np.sum(g, axis=axis, keepdims=True)


def _log_softmax_grad_parts(g, out, axis):
    return g - exp(out) * sum(g, axis=axis, keepdims=True)


def softmax_parts(x, axis: tuple[int, ...]):
    """exp(x - m) / sum(exp(x - m)), m the maximum (a constant to differentiation)."""
    e = exp(x - max(x, axis=axis, keepdims=True).detach())
    return e / sum(e, axis=axis, keepdims=True)


def _softmax(x, axis: tuple[int, ...], out=None):
    """`softmax_parts` in three passes over x, the last two in place."""
    x = x if x.dtype.kind == "f" else x.astype(np.float64)
    e = np.asarray(np.subtract(x, np.maximum.reduce(x, axis=axis, keepdims=True), out=out))
    np.exp(e, out=e)
    e /= sum.impl(e, axis=axis, keepdims=True)
    return e


def _softmax_grad(g, out, axis: tuple[int, ...]):
    """out (g - sum(g out)), from the saved result."""
    return out * (g - sum.impl(g * out, axis=axis, keepdims=True))


def _softmax_grad_parts(g, out, axis):
    return out * (g - sum(g * out, axis=axis, keepdims=True))


def nll_parts(logp, labels, weight, ignore_index: int):
    """-logp[i, label_i] * weight[label_i] (0 for ignored samples), and those weights."""
    keep = labels != ignore_index
    safe = where(keep, labels, 0)
    picked = logp[np.arange(logp.shape[0]), safe]
    w = keep.astype(logp.dtype)
    if weight is not None:
        w = w * weight[safe]
    return -(picked * w), w


def weighted_reduce(loss, weights, reduction: str):
    """PyTorch's weighted mean divides by the total weight of the (kept) targets. With none
    kept (a batch of padding) the mean is NaN (0 / 0) and its gradient 0, as in PyTorch: a
    gradient of 0 / 0 would turn every parameter NaN. (PyTorch's gradient is NaN when the kept
    targets' weights are all 0; here it is 0 then too.)"""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return sum(loss, axis=(0,), keepdims=False)
    total = sum(weights, axis=(0,), keepdims=False)
    empty = total == 0.0
    return where(empty, np.nan, sum(loss, axis=(0,), keepdims=False) / where(empty, 1.0, total))


def _cross_entropy_parts(x, labels, *weight, ignore_index, reduction):
    logp = log_softmax_parts(x, (1,))
    return _nll_loss_parts(logp, labels, *weight, ignore_index=ignore_index, reduction=reduction)


def _nll_loss_parts(logp, labels, *weight, ignore_index, reduction):
    loss, w = nll_parts(logp, labels, weight[0] if weight else None, ignore_index)
    return weighted_reduce(loss, w, reduction)


def _class_scores_rule(x, labels, *weight, ignore_index, reduction):
    if x.ndim != 2 or labels.shape != x.shape[:1] or labels.dtype.kind not in "iu":
        raise ValueError(f"scores {x.shape} and labels {labels.shape} ({labels.dtype}); "
                         "expected (N, C) and (N,) integer classes")  # fmt: skip
    if weight and weight[0].shape != x.shape[1:]:
        raise ValueError(f"weight {weight[0].shape} for {x.shape[1]} classes")
    floating = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    dtype = np.result_type(floating, *(w.dtype for w in weight))
    return ((x.shape[0],) if reduction == "none" else ()), dtype


def _scores_grad_rule(g, x, labels, *weight, **params):
    return x.shape, _class_scores_rule(x, labels, *weight, **params)[1]


def _shifted(x: np.ndarray) -> np.ndarray:
    """x minus its rows' maxima where finite (`log_softmax_parts`' m), in a new array."""
    x = x if x.dtype.kind == "f" else x.astype(np.float64)
    m = np.maximum.reduce(x, axis=1, keepdims=True)
    if not np.isfinite(m).all():  # rare: asked first, the select costs more than the test
        m = np.where(np.abs(m) < math.inf, m, 0.0).astype(x.dtype, copy=False)
    return np.subtract(x, m)


def _counted(x, labels, weight, ignore_index):
    """Each sample's label (0 where ignored) and its weight (0 where ignored)."""
    keep = labels != ignore_index
    safe = np.where(keep, labels, 0)
    w = keep.astype(x.dtype)
    return safe, (w * weight[0][safe] if weight else w)


def _reduced(loss, w, reduction):
    """`weighted_reduce` in NumPy, bit for bit."""
    if reduction == "none":
        return loss
    total = sum.impl(loss, axis=(0,))
    if reduction == "sum":
        return total
    weights = sum.impl(w, axis=(0,))
    return np.asarray(np.nan if weights == 0.0 else total / weights, loss.dtype)


def _coefficients(g, w, reduction):
    """Each sample's share of the cotangent g of the reduced loss: g w, over the total weight
    for the mean (0 where no label counts, as `weighted_reduce`'s gradient)."""
    coef = np.asarray(g, w.dtype) * w
    if reduction != "mean":
        return coef
    total = np.add.reduce(w)
    return coef / total if total else np.zeros_like(coef)


def _cross_entropy(x, labels, *weight, ignore_index, reduction, out=None):
    """What `_cross_entropy_parts` computes, bit for bit, in a few NumPy calls: the
    log-probabilities of the labels alone, not of every class. (`out`: the plan's buffer.)"""
    shifted = _shifted(x)
    sums = sum.impl(np.exp(shifted), axis=(1,), keepdims=True)
    safe, w = _counted(shifted, labels, weight, ignore_index)
    picked = shifted[np.arange(x.shape[0]), safe] - np.log(sums[:, 0])
    loss = _reduced(-(picked * w), w, reduction)
    if out is None:
        return loss
    out[...] = loss
    return out


def _cross_entropy_grad(g, x, labels, *weight, ignore_index, reduction, out=None):
    """The logits' cotangent, (softmax(x) - onehot(labels)) times each sample's coefficient,
    the softmax recomputed from x rather than kept from forward."""
    shifted = _shifted(x)
    e = np.exp(shifted, out=shifted if out is None else out)
    safe, w = _counted(e, labels, weight, ignore_index)
    coef = _coefficients(g, w, reduction)
    e *= (coef / np.add.reduce(e, axis=1))[:, None]
    e[np.arange(x.shape[0]), safe] -= coef
    return e


def _nll_loss(logp, labels, *weight, ignore_index, reduction):
    safe, w = _counted(logp, labels, weight, ignore_index)
    return _reduced(-(logp[np.arange(logp.shape[0]), safe] * w), w, reduction)


def _nll_loss_grad(g, logp, labels, *weight, ignore_index, reduction):
    safe, w = _counted(logp, labels, weight, ignore_index)
    out = np.zeros(logp.shape, w.dtype)
    out[np.arange(logp.shape[0]), safe] = -_coefficients(g, w, reduction)
    return out


# One op eagerly, its parts traced (`decompose`): log_softmax and softmax (the composed ops made
# ten passes over the scores, forward and back, and a call each; the gradient's op keeps only the
# result, and a second derivative differentiates the gradient's parts), PyTorch's nll_loss over
# log-probabilities and cross_entropy over logits (log_softmax and nll_loss in one). The labels
# are checked before (check_range); the gradient ops run only in eager backward.
log_softmax = Primitive("log_softmax", _log_softmax, _log_softmax_rule,
                        (lambda g, out, x, axis: log_softmax_grad(g, out, axis=axis),),
                        "out", accepts_out=True, raises=False, rerun=True,
                        decompose=log_softmax_parts)  # fmt: skip
log_softmax_grad = Primitive("log_softmax_grad", _log_softmax_grad,
                             lambda g, out, axis: (g.shape, g.dtype), None, "in", raises=False,
                             rerun=True, decompose=_log_softmax_grad_parts)  # fmt: skip
softmax = Primitive("softmax", _softmax, _log_softmax_rule,
                    (lambda g, out, x, axis: softmax_grad(g, out, axis=axis),), "out",
                    accepts_out=True, raises=False, rerun=True,
                    decompose=softmax_parts)  # fmt: skip
softmax_grad = Primitive("softmax_grad", _softmax_grad, lambda g, out, axis: (g.shape, g.dtype),
                         None, "in", raises=False, rerun=True,
                         decompose=_softmax_grad_parts)  # fmt: skip
cross_entropy = Primitive(
    "cross_entropy", _cross_entropy, _class_scores_rule,
    (lambda g, out, x, labels, *weight, **p: cross_entropy_grad(g, x, labels, *weight, **p),),
    "in", accepts_out=True, raises=False, rerun=True, decompose=_cross_entropy_parts,
    trace_parts=False,
)  # fmt: skip
cross_entropy_grad = Primitive("cross_entropy_grad", _cross_entropy_grad, _scores_grad_rule,
                               accepts_out=True, raises=False, rerun=True)  # fmt: skip
nll_loss = Primitive(
    "nll_loss", _nll_loss, _class_scores_rule,
    (lambda g, out, logp, labels, *weight, **p: nll_loss_grad(g, logp, labels, *weight, **p),),
    "in", raises=False, rerun=True, decompose=_nll_loss_parts,
)  # fmt: skip
nll_loss_grad = Primitive("nll_loss_grad", _nll_loss_grad, _scores_grad_rule,
                          raises=False, rerun=True)  # fmt: skip

# --- binary cross-entropy ------------------------------------------------------------------------
# PyTorch's own op: each log clamped at -100 (a saturated probability, exactly 0 or 1, gives a
# finite loss) and the probability's gradient (p - t) / max(p (1 - p), 1e-12), which is 0 where p
# is saturated towards its target. The parts' own gradient is 0 * inf = NaN there (a sigmoid
# that reaches 1.0 in float32 made every parameter NaN), so a trace differentiates the op by its
# VJP too (`traced_vjp`); only a second derivative takes the parts.


def _clamped_log(x):
    return maximum(log(x), -100.0)


def _binary_cross_entropy_parts(p, t):
    return -(t * _clamped_log(p) + (1.0 - t) * maximum(log1p(-p), -100.0))


def _binary_cross_entropy(p, t):
    with np.errstate(divide="ignore"):
        logs = np.maximum(np.log(p), -100.0), np.maximum(np.log1p(-p), -100.0)
    return -(t * logs[0] + (1.0 - t) * logs[1])


def _same_shape_rule(p, t):
    if p.shape != t.shape:
        raise ValueError(f"input {p.shape} and target {t.shape} differ")
    return p.shape, np.result_type(p.dtype, t.dtype, np.float16)


binary_cross_entropy = Primitive(
    "binary_cross_entropy", _binary_cross_entropy, _same_shape_rule,
    (lambda g, out, p, t: g * (p - t) / maximum(p * (1.0 - p), 1e-12),
     lambda g, out, p, t: g * (maximum(log1p(-p), -100.0) - _clamped_log(p))),
    "in", raises=False, rerun=True, decompose=_binary_cross_entropy_parts, traced_vjp=True,
    promotion="operands",
)  # fmt: skip

__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The parts call ops of other families, which import this one: imported last, the cycle is
# harmless (no part runs while the table loads).
from tracegrad.core.ops.elementwise import abs, exp, log, log1p, maximum, where  # noqa: E402
from tracegrad.core.ops.reductions import max, sum  # noqa: E402

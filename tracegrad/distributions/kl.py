"""`kl_divergence(p, q)`: KL(p || q) by the closed form registered for the pair of types
(`register_kl`), the most specific pair when several match, as PyTorch's. Registered here:
Normal, Categorical, OneHotCategorical, Bernoulli, Uniform, Laplace, Exponential,
MultivariateNormal (each with itself) and Independent with Independent (the same number of
reinterpreted dimensions); `kl_families` registers the other families' pairs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tracegrad.core import primitives as P
from tracegrad.distributions.continuous import Exponential, Laplace, Normal, Uniform
from tracegrad.distributions.discrete import Bernoulli, Categorical, OneHotCategorical
from tracegrad.distributions.distribution import Distribution, Independent, sum_rightmost
from tracegrad.distributions.multivariate import (
    MultivariateNormal,
    half_log_det,
    mahalanobis,
)
from tracegrad.frontend.functions import broadcast_to, matmul
from tracegrad.frontend.reductions import sum
from tracegrad.frontend.tensor import Tensor

_KL_REGISTRY: dict[tuple[type, type], Callable] = {}


def register_kl(type_p: type, type_q: type) -> Callable:
    """Decorator: `@register_kl(Normal, Normal) def kl(p, q): ...` registers the closed form
    kl_divergence uses for that pair of types (and their subclasses). Any classes are accepted,
    as PyTorch's (pyro registers pairs of its own mixin classes)."""
    if not (isinstance(type_p, type) and isinstance(type_q, type)):
        raise TypeError(f"register_kl: expected two classes, got {type_p!r}, {type_q!r}")

    def decorator(fn: Callable) -> Callable:
        _KL_REGISTRY[type_p, type_q] = fn
        return fn

    return decorator


def _dispatch(type_p: type, type_q: type) -> Callable | None:
    """The registered pair nearest to (type_p, type_q) in their method resolution orders."""
    matches = [(type_p.__mro__.index(a), type_q.__mro__.index(b), fn)
               for (a, b), fn in _KL_REGISTRY.items()
               if issubclass(type_p, a) and issubclass(type_q, b)]  # fmt: skip
    return min(matches, key=lambda m: m[:2])[2] if matches else None


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q), one value per element of the batch."""
    fn = _dispatch(type(p), type(q))
    if fn is None:
        raise NotImplementedError(
            f"No KL(p || q) is implemented for p {type(p).__name__} and q {type(q).__name__} "
            "(register one with tracegrad.distributions.register_kl)"
        )
    return fn(p, q)


def _infinite_where(condition: Any, x: Tensor) -> Tensor:
    return P.where(condition, math.inf, x)


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Tensor:
    ratio = p.scale / q.scale
    var_ratio = ratio * ratio
    d = (p.loc - q.loc) / q.scale
    return (var_ratio + d * d - 1.0 - P.log(var_ratio)) * 0.5


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical) -> Tensor:
    t = p.probs * (p.logits - q.logits)
    shape = t.shape
    t = _infinite_where(broadcast_to(q.probs == 0.0, shape), t)
    t = P.where(broadcast_to(p.probs == 0.0, shape), 0.0, t)
    return sum(t, -1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p: OneHotCategorical, q: OneHotCategorical) -> Tensor:
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    t1 = p.probs * (P.softplus(-q.logits) - P.softplus(-p.logits))
    t1 = P.where(p.probs == 0.0, 0.0, _infinite_where(q.probs == 0.0, t1))
    t2 = (1.0 - p.probs) * (P.softplus(q.logits) - P.softplus(p.logits))
    t2 = P.where(p.probs == 1.0, 0.0, _infinite_where(q.probs == 1.0, t2))
    return t1 + t2


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p: Uniform, q: Uniform) -> Tensor:
    result = P.log((q.high - q.low) / (p.high - p.low))
    outside = P.where(q.low > p.low, True, q.high < p.high)
    return _infinite_where(outside, result)


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p: Laplace, q: Laplace) -> Tensor:
    scale_ratio = p.scale / q.scale
    loc_abs_diff = P.abs(p.loc - q.loc)
    t1 = -P.log(scale_ratio)
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * P.exp(-loc_abs_diff / p.scale)
    return t1 + t2 + t3 - 1.0


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p: Exponential, q: Exponential) -> Tensor:
    rate_ratio = q.rate / p.rate
    return rate_ratio - P.log(rate_ratio) - 1.0


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_multivariatenormal_multivariatenormal(p: MultivariateNormal,
                                              q: MultivariateNormal) -> Tensor:  # fmt: skip
    if p.event_shape != q.event_shape:
        raise ValueError(f"kl_divergence: MultivariateNormals of different event shapes "
                         f"{p.event_shape} and {q.event_shape}")  # fmt: skip
    n = p.event_shape[0]
    Lp, Lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_term1 = half_log_det(Lq) - half_log_det(Lp)
    Lq_inverse = q._scale_tril_inverse
    X = matmul(Lq_inverse, Lp)
    term2 = sum(X * X, (-2, -1))  # trace(Sigma_q^-1 Sigma_p)
    term3 = mahalanobis(Lq_inverse, q.loc - p.loc)
    return half_term1 + (term2 + term3 - n) * 0.5


@register_kl(Independent, Independent)
def _kl_independent_independent(p: Independent, q: Independent) -> Tensor:
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError(
            "kl_divergence: Independents of different reinterpreted_batch_ndims "
            f"({p.reinterpreted_batch_ndims} and {q.reinterpreted_batch_ndims})"
        )
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


__all__ = ["kl_divergence", "register_kl"]

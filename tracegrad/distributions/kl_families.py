"""More of PyTorch's closed-form KL divergences, registered with `register_kl` on import: the
gamma family (Gamma, Beta, Dirichlet), the counts (Poisson, Binomial, Geometric), Gumbel,
Pareto, Cauchy, HalfNormal, two TransformedDistributions through the same transforms (so two
LogNormals), and the low-rank multivariate normals (with each other and with
MultivariateNormal)."""

from __future__ import annotations

import math

from tracegrad.core import primitives as P
from tracegrad.distributions.continuous import Cauchy
from tracegrad.distributions.counts import Binomial, Geometric, Poisson
from tracegrad.distributions.gamma import Beta, Dirichlet, Gamma
from tracegrad.distributions.kl import kl_divergence, register_kl
from tracegrad.distributions.lowrank import (
    LowRankMultivariateNormal,
    lowrank_logdet,
    lowrank_mahalanobis,
)
from tracegrad.distributions.multivariate import MultivariateNormal, half_log_det
from tracegrad.distributions.transformed import TransformedDistribution
from tracegrad.distributions.transformed_families import EULER, Gumbel, HalfNormal, Pareto
from tracegrad.frontend import linalg
from tracegrad.frontend.functions import matmul, matrix_transpose, reshape
from tracegrad.frontend.rearrange import diag_embed
from tracegrad.frontend.reductions import sum
from tracegrad.frontend.tensor import Tensor


@register_kl(Beta, Beta)
def _kl_beta_beta(p: Beta, q: Beta) -> Tensor:
    sum_p = p.concentration1 + p.concentration0
    sum_q = q.concentration1 + q.concentration0
    t1 = P.lgamma(q.concentration1) + P.lgamma(q.concentration0) + P.lgamma(sum_p)
    t2 = P.lgamma(p.concentration1) + P.lgamma(p.concentration0) + P.lgamma(sum_q)
    t3 = (p.concentration1 - q.concentration1) * P.digamma(p.concentration1)
    t4 = (p.concentration0 - q.concentration0) * P.digamma(p.concentration0)
    t5 = (sum_q - sum_p) * P.digamma(sum_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p: Dirichlet, q: Dirichlet) -> Tensor:
    sum_p, sum_q = sum(p.concentration, -1), sum(q.concentration, -1)
    t1 = P.lgamma(sum_p) - P.lgamma(sum_q)
    t2 = sum(P.lgamma(p.concentration) - P.lgamma(q.concentration), -1)
    t3 = p.concentration - q.concentration
    t4 = P.digamma(p.concentration) - reshape(P.digamma(sum_p), sum_p.shape + (1,))
    return t1 - t2 + sum(t3 * t4, -1)


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p: Gamma, q: Gamma) -> Tensor:
    t1 = q.concentration * P.log(p.rate / q.rate)
    t2 = P.lgamma(q.concentration) - P.lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * P.digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p: Poisson, q: Poisson) -> Tensor:
    return p.rate * (P.log(p.rate) - P.log(q.rate)) - (p.rate - q.rate)


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p: Binomial, q: Binomial) -> Tensor:
    """Infinite where p has more trials than q (values q cannot take)."""
    if not p.total_count.is_symbolic and bool((p.total_count < q.total_count).numpy().any()):
        raise NotImplementedError("kl_divergence: Binomials where q.total_count > "
                                  "p.total_count are not implemented")  # fmt: skip
    kl = p.total_count * (p.probs * (p.logits - q.logits) + P.log1p(-p.probs)
                          - P.log1p(-q.probs))  # fmt: skip
    return P.where(p.total_count > q.total_count, math.inf, kl)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p: Geometric, q: Geometric) -> Tensor:
    return -p.entropy() - P.log1p(-q.probs) / p.probs - q.logits


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p: Gumbel, q: Gumbel) -> Tensor:
    ct1, ct2, ct3 = p.scale / q.scale, q.loc / q.scale, p.loc / q.scale
    t1 = -P.log(ct1) - ct2 + ct3
    t3 = P.exp(ct2 + P.lgamma(ct1 + 1.0) - ct3)
    return t1 + ct1 * EULER + t3 - (1 + EULER)


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p: HalfNormal, q: HalfNormal) -> Tensor:
    return kl_divergence(p.base_dist, q.base_dist)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p: Pareto, q: Pareto) -> Tensor:
    """Infinite where p's support starts below q's."""
    scale_ratio, alpha_ratio = p.scale / q.scale, q.alpha / p.alpha
    result = q.alpha * P.log(scale_ratio) - P.log(alpha_ratio) + alpha_ratio - 1.0
    return P.where(p.scale < q.scale, math.inf, result)


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p: Cauchy, q: Cauchy) -> Tensor:
    s, d = p.scale + q.scale, p.loc - q.loc
    return P.log(s * s + d * d) - P.log(p.scale * q.scale * 4.0)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p: TransformedDistribution,
                                q: TransformedDistribution) -> Tensor:  # fmt: skip
    """The base distributions' divergence, when both go through equal transforms (a
    bijection keeps the divergence)."""
    if p.transforms != q.transforms or p.event_shape != q.event_shape:
        raise NotImplementedError("kl_divergence: TransformedDistributions through different "
                                  "transforms or of different event shapes")  # fmt: skip
    return kl_divergence(p.base_dist, q.base_dist)


def _trace_XXT(X: Tensor) -> Tensor:  # noqa: N802
    """trace(X X^T) over the last two dimensions."""
    return sum(X * X, (-2, -1))


def _same_events(p: object, q: object) -> None:
    if p.event_shape != q.event_shape:  # type: ignore[attr-defined]
        raise ValueError("kl_divergence: (low-rank) multivariate normals of different event "
                         f"shapes {p.event_shape} and {q.event_shape}")  # type: ignore  # fmt: skip


def _unsqueeze(x: Tensor, dim: int) -> Tensor:
    d = dim % (x.ndim + 1)
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def _woodbury_factor(q: LowRankMultivariateNormal) -> Tensor:
    """A with inv(Sigma_q) = inv(D_q) - A^T A."""
    Wt_Dinv = matrix_transpose(q._unbroadcasted_cov_factor) / _unsqueeze(
        q._unbroadcasted_cov_diag, -2
    )
    return linalg.solve_triangular(q._capacitance_tril, Wt_Dinv, upper=False)


def _lowrank_terms(q: LowRankMultivariateNormal, diff: Tensor) -> tuple[Tensor, Tensor]:
    """q's log-determinant and the Mahalanobis distance of `diff` under q."""
    W, D, C = q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q._capacitance_tril
    return lowrank_logdet(D, C), lowrank_mahalanobis(W, D, diff, C)


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank_lowrank(p: LowRankMultivariateNormal, q: LowRankMultivariateNormal) -> Tensor:
    _same_events(p, q)
    q_logdet, term3 = _lowrank_terms(q, q.loc - p.loc)
    term1 = q_logdet - lowrank_logdet(p._unbroadcasted_cov_diag, p._capacitance_tril)
    A = _woodbury_factor(q)
    pW, pD, qD = p._unbroadcasted_cov_factor, p._unbroadcasted_cov_diag, q._unbroadcasted_cov_diag
    term2 = (sum(pD / qD, -1) + _trace_XXT(pW / _unsqueeze(P.sqrt(qD), -1))
             - _trace_XXT(A * _unsqueeze(P.sqrt(pD), -2)) - _trace_XXT(matmul(A, pW)))  # fmt: skip
    return (term1 + term2 + term3 - p.event_shape[0]) * 0.5


@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_mvn_lowrank(p: MultivariateNormal, q: LowRankMultivariateNormal) -> Tensor:
    _same_events(p, q)
    q_logdet, term3 = _lowrank_terms(q, q.loc - p.loc)
    Lp = p._unbroadcasted_scale_tril
    term1 = q_logdet - half_log_det(Lp) * 2.0
    A = _woodbury_factor(q)
    qD = q._unbroadcasted_cov_diag
    term2 = _trace_XXT(Lp / _unsqueeze(P.sqrt(qD), -1)) - _trace_XXT(matmul(A, Lp))
    return (term1 + term2 + term3 - p.event_shape[0]) * 0.5


@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_lowrank_mvn(p: LowRankMultivariateNormal, q: MultivariateNormal) -> Tensor:
    _same_events(p, q)
    Lq = q._unbroadcasted_scale_tril
    term1 = half_log_det(Lq) * 2.0 - lowrank_logdet(p._unbroadcasted_cov_diag,
                                                     p._capacitance_tril)  # fmt: skip
    Lq_inverse = q._scale_tril_inverse
    diff = q.loc - p.loc
    y = matmul(Lq_inverse, reshape(diff, diff.shape + (1,)))
    term3 = sum(y * y, (-2, -1))
    n = p.event_shape[0]
    pW, pD = p._unbroadcasted_cov_factor, p._unbroadcasted_cov_diag
    term21 = _trace_XXT(matmul(Lq_inverse, pW))
    term22 = _trace_XXT(matmul(Lq_inverse, diag_embed(P.sqrt(pD))))
    return (term1 + term21 + term22 + term3 - n) * 0.5


__all__: list[str] = []

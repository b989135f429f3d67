"""Probability distributions with PyTorch's interface (`torch.distributions`): sample them,
score values (`log_prob`), their `entropy`, moments and `kl_divergence`, as a policy gradient,
a VAE, a flow or a probabilistic program (pyro) uses them.

Everything is written with tracegrad's tensor ops: gradients flow to the parameters through
`log_prob`, `entropy`, `kl_divergence` and the reparameterized draws of `rsample`, and a traced
step (`@tracegrad.trace`, `torch.compile`) computes what the eager step does. Draws come from the
counter-based random state (`tracegrad.manual_seed`), so a traced step draws afresh at every call
and the same numbers an eager run with the same seed draws (not PyTorch's numbers).

Provided: PyTorch's families (`__all__`), its transforms (`transforms`, `matrix_transforms`),
`constraints` and `constraint_registry` (`biject_to`, `transform_to`), `kl_divergence` and
`register_kl`. The gamma family's draws are reparameterized in their rates only (`gamma`).
"""

from tracegrad.distributions import constraints
from tracegrad.distributions.constraint_registry import biject_to, transform_to
from tracegrad.distributions.continuous import (
    Cauchy,
    Exponential,
    GeneralizedPareto,
    Laplace,
    Normal,
    Uniform,
)
from tracegrad.distributions.continuous_bernoulli import ContinuousBernoulli
from tracegrad.distributions.counts import (
    Binomial,
    Geometric,
    Multinomial,
    NegativeBinomial,
    Poisson,
)
from tracegrad.distributions.discrete import (
    Bernoulli,
    Categorical,
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
)
from tracegrad.distributions.distribution import Distribution, ExponentialFamily, Independent
from tracegrad.distributions.gamma import Beta, Chi2, Dirichlet, Gamma
from tracegrad.distributions.kl import kl_divergence, register_kl
from tracegrad.distributions.kl_families import __all__ as _registered  # noqa: F401
from tracegrad.distributions.lowrank import LowRankMultivariateNormal
from tracegrad.distributions.matrix_families import LKJCholesky, Wishart
from tracegrad.distributions.matrix_transforms import (
    CorrCholeskyTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    SoftmaxTransform,
    StickBreakingTransform,
)
from tracegrad.distributions.mixture import MixtureSameFamily
from tracegrad.distributions.multivariate import MultivariateNormal
from tracegrad.distributions.relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from tracegrad.distributions.student import FisherSnedecor, StudentT
from tracegrad.distributions.transformed import TransformedDistribution
from tracegrad.distributions.transformed_families import (
    Gumbel,
    HalfCauchy,
    HalfNormal,
    InverseGamma,
    Kumaraswamy,
    LogisticNormal,
    LogNormal,
    Pareto,
    Weibull,
)
from tracegrad.distributions.transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftplusTransform,
    StackTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from tracegrad.distributions.von_mises import VonMises

__all__ = [
    "AbsTransform", "AffineTransform", "Bernoulli", "Beta", "Binomial", "CatTransform",
    "Categorical", "Cauchy", "Chi2", "ComposeTransform", "ContinuousBernoulli",
    "CorrCholeskyTransform", "CumulativeDistributionTransform", "Dirichlet", "Distribution",
    "ExpTransform", "Exponential", "ExponentialFamily", "FisherSnedecor", "Gamma",
    "GeneralizedPareto", "Geometric",
    "Gumbel", "HalfCauchy", "HalfNormal", "Independent", "IndependentTransform", "InverseGamma",
    "Kumaraswamy", "LKJCholesky", "Laplace", "LogNormal", "LogisticNormal",
    "LowRankMultivariateNormal", "LowerCholeskyTransform", "MixtureSameFamily", "Multinomial",
    "MultivariateNormal", "NegativeBinomial", "Normal", "OneHotCategorical",
    "OneHotCategoricalStraightThrough", "Pareto", "Poisson", "PositiveDefiniteTransform",
    "PowerTransform", "RelaxedBernoulli", "RelaxedOneHotCategorical", "ReshapeTransform",
    "SigmoidTransform", "SoftmaxTransform", "SoftplusTransform", "StackTransform",
    "StickBreakingTransform", "StudentT", "TanhTransform", "Transform", "TransformedDistribution",
    "Uniform", "VonMises", "Weibull", "Wishart", "biject_to", "constraints", "identity_transform",
    "kl_divergence", "register_kl", "transform_to",
]  # fmt: skip

"""Probability distributions with PyTorch's interface (`torch.distributions`): sample them,
score values (`log_prob`), their `entropy`, moments and `kl_divergence`, as a policy gradient,
a VAE or a flow uses them.

Everything is written with tracegrad's tensor ops: gradients flow to the parameters through
`log_prob`, `entropy`, `kl_divergence` and the reparameterized draws of `rsample`, and a traced
step (`@tracegrad.trace`, `torch.compile`) computes what the eager step does. Draws come from the
counter-based random state (`tracegrad.manual_seed`), so a traced step draws afresh at every call
and the same numbers an eager run with the same seed draws (not PyTorch's numbers).

Provided: Bernoulli, Categorical, OneHotCategorical, Normal, LogNormal, Uniform, Laplace,
Exponential, Cauchy, Gamma, Beta, Dirichlet, MultivariateNormal, Independent,
RelaxedOneHotCategorical, RelaxedBernoulli; `TransformedDistribution` with the Exp, Affine,
Sigmoid, Tanh and Compose transforms; `kl_divergence` and `register_kl`; `constraints`. The
gamma family's draws are reparameterized in their rates only (`gamma`). Not provided: Poisson,
Binomial, StudentT, Chi2, ...
"""

from tracegrad.distributions import constraints
from tracegrad.distributions.continuous import (
    Cauchy,
    Exponential,
    Laplace,
    LogNormal,
    Normal,
    Uniform,
)
from tracegrad.distributions.discrete import Bernoulli, Categorical, OneHotCategorical
from tracegrad.distributions.distribution import Distribution, ExponentialFamily, Independent
from tracegrad.distributions.gamma import Beta, Dirichlet, Gamma
from tracegrad.distributions.kl import kl_divergence, register_kl
from tracegrad.distributions.multivariate import MultivariateNormal
from tracegrad.distributions.relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from tracegrad.distributions.transforms import (
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    SigmoidTransform,
    TanhTransform,
    Transform,
    TransformedDistribution,
)

__all__ = [
    "AffineTransform", "Bernoulli", "Beta", "Categorical", "Cauchy", "ComposeTransform",
    "Dirichlet", "Distribution", "ExpTransform", "Exponential", "ExponentialFamily", "Gamma",
    "Independent", "Laplace", "LogNormal",
    "MultivariateNormal", "Normal", "OneHotCategorical", "RelaxedBernoulli",
    "RelaxedOneHotCategorical", "SigmoidTransform", "TanhTransform", "Transform",
    "TransformedDistribution", "Uniform", "constraints", "kl_divergence", "register_kl",
]  # fmt: skip

"""`torch.distributions`: tracegrad's distributions (`tracegrad.distributions`), and PyTorch's
submodule paths (`torch.distributions.normal.Normal`, `torch.distributions.kl.kl_divergence`,
...)."""

from typing import Any

from tracegrad.distributions import *  # noqa: F403
from tracegrad.torch._support import not_provided as _not_provided

globals().pop("constraints")  # tracegrad's module: torch's, below, takes its place
from tracegrad.torch.distributions import (  # noqa: E402
    bernoulli,
    beta,
    binomial,
    categorical,
    cauchy,
    chi2,
    constraint_registry,
    constraints,
    continuous_bernoulli,
    dirichlet,
    distribution,
    exp_family,
    exponential,
    fishersnedecor,
    gamma,
    generalized_pareto,
    geometric,
    gumbel,
    half_cauchy,
    half_normal,
    independent,
    inverse_gamma,
    kl,
    kumaraswamy,
    laplace,
    lkj_cholesky,
    log_normal,
    logistic_normal,
    lowrank_multivariate_normal,
    mixture_same_family,
    multinomial,
    multivariate_normal,
    negative_binomial,
    normal,
    one_hot_categorical,
    pareto,
    poisson,
    relaxed_bernoulli,
    relaxed_categorical,
    studentT,
    transformed_distribution,
    transforms,
    uniform,
    utils,
    von_mises,
    weibull,
    wishart,
)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

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
    categorical,
    cauchy,
    constraints,
    dirichlet,
    distribution,
    exponential,
    gamma,
    independent,
    kl,
    laplace,
    log_normal,
    multivariate_normal,
    normal,
    one_hot_categorical,
    relaxed_bernoulli,
    relaxed_categorical,
    transformed_distribution,
    transforms,
    uniform,
    utils,
)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

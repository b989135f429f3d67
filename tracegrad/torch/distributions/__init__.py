"""`torch.distributions`: tracegrad's distributions (`tracegrad.distributions`), and PyTorch's
submodule paths (`torch.distributions.normal.Normal`, `torch.distributions.kl.kl_divergence`,
...)."""

import functools
import math
import numbers
import sys
import types
from typing import Any

from tracegrad.distributions import *  # noqa: F403
from tracegrad.frontend.tensor import Size as _Size
from tracegrad.frontend.tensor import Tensor as _Tensor
from tracegrad.nn import functional as _functional
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


def _in_a_file(file: str, name: str) -> Any:
    """What PyTorch's distribution files import at their top, which code imports from them in
    turn (`from torch.distributions.multivariate_normal import Distribution`): the package's
    names, the helpers', the transforms', and PyTorch's usual imports; or the refusal."""
    if not name.startswith("_") and name in globals():
        return globals()[name]
    for helpers in (utils, transforms):
        if name in vars(helpers) and not name.startswith("__"):
            return vars(helpers)[name]
    usual = {"torch": sys.modules["tracegrad.torch"], "Tensor": _Tensor, "math": math,
             "nan": math.nan, "inf": math.inf, "Number": numbers.Number, "_Number": int | float,
             "_size": _Size | list | tuple, "F": _functional}  # fmt: skip
    if name in usual:
        return usual[name]
    raise _not_provided(file, name)


for _file in [m for m in list(globals().values()) if isinstance(m, types.ModuleType)
              and m.__name__.startswith(f"{__name__}.")]:  # fmt: skip
    _file.__getattr__ = functools.partial(_in_a_file, _file.__name__)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)

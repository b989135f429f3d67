"""`torch.distributions.lowrank_multivariate_normal`: LowRankMultivariateNormal."""

from tracegrad.distributions import LowRankMultivariateNormal  # noqa: F401

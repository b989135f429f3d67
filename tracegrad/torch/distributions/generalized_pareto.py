"""`torch.distributions.generalized_pareto`: GeneralizedPareto."""

from tracegrad.distributions import GeneralizedPareto  # noqa: F401

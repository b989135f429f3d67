"""`torch.distributions.exp_family`: ExponentialFamily."""

from tracegrad.distributions import ExponentialFamily  # noqa: F401

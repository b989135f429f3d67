"""`torch.distributions.continuous_bernoulli`: ContinuousBernoulli."""

from tracegrad.distributions import ContinuousBernoulli  # noqa: F401

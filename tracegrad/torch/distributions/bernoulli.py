"""`torch.distributions.bernoulli`: Bernoulli."""

from tracegrad.distributions import Bernoulli  # noqa: F401

"""`torch.distributions.binomial`: Binomial."""

from tracegrad.distributions import Binomial  # noqa: F401

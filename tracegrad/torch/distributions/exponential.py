"""`torch.distributions.exponential`: Exponential."""

from tracegrad.distributions import Exponential  # noqa: F401

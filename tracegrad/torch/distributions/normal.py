"""`torch.distributions.normal`: Normal."""

from tracegrad.distributions import Normal  # noqa: F401

"""`torch.distributions.distribution`: the base class, Distribution."""

from tracegrad.distributions import Distribution  # noqa: F401

"""`torch.distributions.independent`: Independent."""

from tracegrad.distributions import Independent  # noqa: F401

"""`torch.distributions.transformed_distribution`: TransformedDistribution."""

from tracegrad.distributions import TransformedDistribution  # noqa: F401

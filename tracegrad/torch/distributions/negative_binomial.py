"""`torch.distributions.negative_binomial`: NegativeBinomial."""

from tracegrad.distributions import NegativeBinomial  # noqa: F401

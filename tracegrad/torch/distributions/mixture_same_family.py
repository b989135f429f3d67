"""`torch.distributions.mixture_same_family`: MixtureSameFamily."""

from tracegrad.distributions import MixtureSameFamily  # noqa: F401

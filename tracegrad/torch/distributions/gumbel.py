"""`torch.distributions.gumbel`: Gumbel."""

from tracegrad.distributions import Gumbel  # noqa: F401

"""`torch.distributions.poisson`: Poisson."""

from tracegrad.distributions import Poisson  # noqa: F401

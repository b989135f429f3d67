"""`torch.distributions.dirichlet`: Dirichlet."""

from tracegrad.distributions import Dirichlet  # noqa: F401

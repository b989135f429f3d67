"""`torch.distributions.cauchy`: Cauchy."""

from tracegrad.distributions import Cauchy  # noqa: F401

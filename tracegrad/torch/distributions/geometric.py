"""`torch.distributions.geometric`: Geometric."""

from tracegrad.distributions import Geometric  # noqa: F401

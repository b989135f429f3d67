"""`torch.distributions.uniform`: Uniform."""

from tracegrad.distributions import Uniform  # noqa: F401

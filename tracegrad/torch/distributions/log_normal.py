"""`torch.distributions.log_normal`: LogNormal."""

from tracegrad.distributions import LogNormal  # noqa: F401

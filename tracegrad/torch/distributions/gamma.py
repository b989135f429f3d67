"""`torch.distributions.gamma`: Gamma."""

from tracegrad.distributions import Gamma  # noqa: F401

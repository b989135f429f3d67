"""`torch.distributions.inverse_gamma`: InverseGamma."""

from tracegrad.distributions import InverseGamma  # noqa: F401

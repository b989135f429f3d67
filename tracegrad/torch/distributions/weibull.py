"""`torch.distributions.weibull`: Weibull."""

from tracegrad.distributions import Weibull  # noqa: F401

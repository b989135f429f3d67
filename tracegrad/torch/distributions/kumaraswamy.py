"""`torch.distributions.kumaraswamy`: Kumaraswamy."""

from tracegrad.distributions import Kumaraswamy  # noqa: F401

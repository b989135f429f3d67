"""`torch.distributions.wishart`: Wishart."""

from tracegrad.distributions import Wishart  # noqa: F401
